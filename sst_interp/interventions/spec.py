"""Intervention specs: where (a site) and what (an operation), as dataclasses that round-trip through JSON/YAML.

A site is addressed like a recording: (turn, position, iteration, layer, stream). Each
coordinate is a tuple of values or ``None`` for all of them; positions count per turn, as in the recordings
(position 0 is the pass that chooses the first generated token). The streams of one SST layer (paper eq:blend,
eq:state_update):

- ``state_in``: S(C_prev), the state as the blend reads it (float32);
- ``alpha``: the layer's blend coefficient alpha_l [d] (float32);
- ``blended``: h~ = (1 - alpha) h + alpha S(C_prev), the hidden state after the blend, before the FFN;
- ``layer_out``: the layer's output o, which is also the state C the next pass reads (update ``direct``).

Operations:

- ``zero``: the stream's value becomes 0;
- ``add``: value + ``scale`` * ``direction`` (a d-vector, given inline or as a ``.npy`` file);
- ``set_alpha``: alpha becomes ``value`` (``alpha`` stream only);
- ``freeze``: the carried state is not updated (``layer_out`` only): the next pass reads the state this pass read,
  while the layer's output to the next layer is unchanged;
- ``patch``: ``layer_out`` becomes the value recorded in ``run`` (a run directory) at the same question, turn,
  position and layer, at depth ``depth`` (default: the depth being generated) and iteration ``source_iteration``
  (default: the iteration being generated; causal tracing across depths patches depth k's last iteration into
  iteration 1 of a depth-1 pass).
- ``mean``: ``layer_out`` becomes the mean over every question of ``run`` of its recorded state at the same turn,
  position, iteration and layer (at depth ``depth``, default the depth being generated), computed streaming one
  question at a time;
- ``resample``: ``layer_out`` becomes the state ``run`` recorded at the same site for another question, drawn per
  question with ``seed`` (the same question always draws the same other question); ``depth`` and
  ``source_iteration`` as for ``patch``.

- ``map``: the stream's value v becomes ``f(v)``, where f is a Python function of the rows' values ([B, d] -> [B, d])
  handed to the Intervener under the operation's ``function`` name (``intervene(sst, spec, functions={name: f})``,
  ``intervene_loop(model, spec, functions=...)``): a dictionary's reconstruction spliced in
  (:mod:`sst_interp.features.splice`), or any edit of a state that a constant cannot express. Python only: a recording
  (``record --intervention``) and the compiled step cannot take a function.

- ``feature``: features ``features`` of the sparse dictionary in the folder ``dictionary`` (trained at this layer and
  iteration, :mod:`sst_interp.features`) change, by ``mode``: ``ablate`` (activation 0), ``steer`` (activation +
  ``scale``, or set to ``value`` when given) or ``patch`` (the activation the live ``source`` row has at the same
  site, or the state ``run`` recorded there for the row's question at ``depth`` as for ``patch``, moved ``scale`` of
  the way). The reconstruction error is kept: the value x becomes x + (a'_F - a_F) W_dec[F]
  over the touched features F only, so a feature left as it is changes nothing, bit for bit
  (:mod:`~sst_interp.interventions.feature_edits`).

``patch``, ``mean`` and ``resample`` with ``scale`` s other than 1 move the value only part of the way:
value + s * (reference - value) (s = 0: unchanged; attribution patching's first-order check scales patches so).

The ``attention`` stream is the post-softmax attention pattern of the site's ``heads`` (None: all) of the layer's
attention, at the query of the pass's last column (the position's own query), over the keys the query attends to;
a key is named by its index in the row's own context (prompt tokens from 0, then every token fed after them), as
``record --attention`` records it. Three operations replace the pattern, inside the attention computation (the
layer then reads pattern' @ V: :mod:`~sst_interp.interventions.attention`):

- ``patch`` with a live ``source`` (a batch row, or ``clean``): the pattern the same heads had, at the same site, in
  the source row's pass (its values stay this row's);
- ``set``: all weight on the keys ``attend_to`` (key positions), with ``weights`` (default: equal; used as given,
  not renormalised) and every other key 0;
- ``uniform``: equal weight on every key the query's mask allows (padding and keys beyond a sliding window get 0).

``mean`` and ``resample`` also apply to ``state_in`` at iterations >= 2: the blend then reads S(C_ref), where
C_ref is the state ``run`` carried into the same iteration (its recorded ``layer_out`` of iteration - 1 at the
same position and layer: the carried state under the update ``direct``, the only one they accept), while the
layer's own output and every other layer's stream are left alone. This is the window experiment's mean and
resample baseline: the stream is replaced by a typical (or another question's) state instead of being cut
(``zero`` reads S = 0, which shrinks the residual stream by (1 - alpha)).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sst_interp.kernels.errors import UsageError

#: the attention pattern of chosen heads (``Site.heads``), post-softmax, at a site's query
ATTENTION = "attention"
STREAMS: tuple[str, ...] = ("state_in", "alpha", "blended", "layer_out", ATTENTION)
OPERATIONS: tuple[str, ...] = ("zero", "add", "set_alpha", "freeze", "patch", "mean", "resample", "map", "set",
                               "uniform", "feature")
#: What a ``feature`` operation does to its features.
FEATURE_MODES: tuple[str, ...] = ("ablate", "steer", "patch")
#: Operations that read a reference run's recorded states (its ``hidden`` shards: the layers' outputs).
READS_RUN: tuple[str, ...] = ("patch", "mean", "resample")
#: The live source that is a clean pass of the same prompt run alongside (``Operation.source``); an integer names a
#: row of the same batch.
CLEAN_SOURCE = "clean"
_STREAMS_OF: dict[str, tuple[str, ...]] = {
    "zero": ("state_in", "blended", "layer_out"), "add": ("state_in", "blended", "layer_out"),
    "set_alpha": ("alpha",), "freeze": ("layer_out",), "patch": ("layer_out", ATTENTION),
    "mean": ("layer_out", "state_in"), "resample": ("layer_out", "state_in"),
    "map": ("state_in", "blended", "layer_out"), "set": (ATTENTION,), "uniform": (ATTENTION,),
    "feature": ("layer_out",),  # a dictionary is trained on the recorded states: the layers' outputs
}


def _coords(values: Any, name: str) -> tuple[int, ...] | None:
    if values is None or values == "all":
        return None
    if isinstance(values, int):
        values = [values]
    try:
        out = tuple(sorted({int(v) for v in values}))
    except (TypeError, ValueError) as err:
        raise UsageError(f"intervention site {name}: expected integers or 'all', got {values!r}") from err
    if not out:
        raise UsageError(f"intervention site {name}: an empty list selects nothing; use 'all' or list values")
    return out


@dataclass(frozen=True)
class Site:
    """Where an operation applies: a stream and (turn, position, iteration, layer) sets, ``None`` meaning all; on the
    ``attention`` stream also the ``heads`` of the layer's attention (``None``: every head)."""

    stream: str
    layers: tuple[int, ...] | None = None
    positions: tuple[int, ...] | None = None
    iterations: tuple[int, ...] | None = None
    turns: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.stream not in STREAMS:
            raise UsageError(f"unknown intervention stream {self.stream!r}; use one of {', '.join(STREAMS)}")
        for name in ("layers", "positions", "iterations", "turns", "heads"):
            object.__setattr__(self, name, _coords(getattr(self, name), name))
        if self.iterations is not None and min(self.iterations) < 1:
            raise UsageError(f"intervention site iterations are 1-based, got {list(self.iterations)}")
        for name in ("layers", "positions", "turns", "heads"):
            values = getattr(self, name)
            if values is not None and min(values) < 0:
                raise UsageError(f"intervention site {name} must be >= 0, got {list(values)}")
        if self.heads is not None and self.stream != ATTENTION:
            raise UsageError(f"intervention site heads belong to the {ATTENTION!r} stream, not {self.stream!r}; "
                             f"drop heads or use stream {ATTENTION!r}")

    def matches(self, turn: int, position: int, iteration: int, layer: int) -> bool:
        """Whether the coordinates of one layer's pass fall inside the site."""
        return all(allowed is None or value in allowed for allowed, value in (
            (self.turns, turn), (self.positions, position), (self.iterations, iteration), (self.layers, layer)))


@dataclass(frozen=True)
class Operation:
    """What happens at a site (see the module docstring for each kind)."""

    kind: str
    scale: float = 1.0
    direction: tuple[float, ...] | None = None
    direction_file: str | None = None
    value: float | None = None
    run: str | None = None
    depth: int | None = None
    source_iteration: int | None = None
    seed: int | None = None
    source: int | str | None = None
    function: str | None = None
    attend_to: tuple[int, ...] | None = None
    weights: tuple[float, ...] | None = None
    dictionary: str | None = None
    features: tuple[int, ...] | None = None
    mode: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in OPERATIONS:
            raise UsageError(f"unknown intervention operation {self.kind!r}; use one of {', '.join(OPERATIONS)}")
        self._check_feature()
        self._check_source()
        if (self.kind == "map") != (self.function is not None):
            raise UsageError("a 'map' intervention names its Python function (function=NAME, handed over as "
                             "functions={NAME: f}); function belongs to 'map' alone"
                             if self.kind == "map" else
                             f"function={self.function!r} belongs to a 'map' intervention, not to {self.kind!r}")
        self._check_pattern()
        if self.kind == "add" and (self.direction is None) == (self.direction_file is None):
            raise UsageError("an 'add' intervention needs exactly one of direction (a list of d numbers) and "
                             "direction_file (a .npy file)")
        if self.direction is not None:
            object.__setattr__(self, "direction", tuple(float(x) for x in self.direction))
        if self.kind == "set_alpha" and self.value is None:
            raise UsageError("a 'set_alpha' intervention needs value (the blend coefficient, e.g. 0)")
        if self.kind in READS_RUN and not self.run and self.source is None:
            raise UsageError(f"a {self.kind!r} intervention needs run (the run directory to read the states from)"
                             + (" or a live source (source=ROW)" if self.kind == "patch" else ""))
        if self.source_iteration is not None and (self.kind not in ("patch", "resample")
                                                  or int(self.source_iteration) < 1):
            raise UsageError(f"source_iteration (1-based) belongs to 'patch' and 'resample' operations, got "
                             f"{self.source_iteration!r} "
                             f"on {self.kind!r}")

    def _check_pattern(self) -> None:
        """``attend_to`` (key positions, distinct, >= 0) and its ``weights`` (as many, finite, >= 0) belong to
        ``set``, which needs ``attend_to``."""
        if self.kind != "set":
            extra = [name for name in ("attend_to", "weights") if getattr(self, name) is not None]
            if extra:
                raise UsageError(f"{', '.join(extra)} belong to the 'set' operation (an attention pattern), not "
                                 f"{self.kind!r}")
            return
        keys = _coords(self.attend_to, "attend_to") if self.attend_to is not None else None
        if keys is None:
            raise UsageError("a 'set' intervention needs attend_to (the key positions that get the weight, e.g. 5 "
                             "or [3, 7])")
        given = [self.attend_to] if isinstance(self.attend_to, int) else list(self.attend_to)
        if min(keys) < 0 or len(keys) != len(given):
            raise UsageError(f"attend_to lists key positions (each >= 0, each once), got {given}")
        object.__setattr__(self, "attend_to", tuple(int(k) for k in given))
        if self.weights is None:
            return
        weights = [self.weights] if isinstance(self.weights, (int, float)) else list(self.weights)
        try:
            weights = [float(w) for w in weights]
        except (TypeError, ValueError) as err:
            raise UsageError(f"weights must be numbers, got {self.weights!r}") from err
        if len(weights) != len(given) or not all(math.isfinite(w) and w >= 0 for w in weights):
            raise UsageError(f"weights give one finite weight >= 0 per key of attend_to ({len(given)}), got "
                             f"{weights}")
        object.__setattr__(self, "weights", tuple(weights))

    @property
    def live(self) -> bool:
        """Whether the operation reads another row of the same generation (``source``) instead of a recorded run."""
        return self.source is not None

    def _check_feature(self) -> None:
        named = [name for name in ("dictionary", "features", "mode") if getattr(self, name) is not None]
        if self.kind != "feature":
            if named:
                raise UsageError(f"{', '.join(named)} belong to a 'feature' intervention, not to {self.kind!r}")
            return
        if self.dictionary is None or self.features is None or self.mode not in FEATURE_MODES:
            raise UsageError(f"a 'feature' intervention needs dictionary (a folder), features (a list of feature "
                             f"indices) and mode (one of {', '.join(FEATURE_MODES)}), got dictionary="
                             f"{self.dictionary!r}, features={self.features!r}, mode={self.mode!r}")
        features = [self.features] if isinstance(self.features, int) else self.features
        try:
            chosen = tuple(sorted({int(f) for f in features}))
        except (TypeError, ValueError) as err:
            raise UsageError(f"features: expected feature indices, got {self.features!r}") from err
        if not chosen or min(chosen) < 0:
            raise UsageError(f"features: list one or more feature indices >= 0, got {list(chosen)}")
        object.__setattr__(self, "features", chosen)
        object.__setattr__(self, "dictionary", str(self.dictionary))
        reads_run = ("run", "depth") if self.mode == "patch" and self.run is not None else ()
        extra = [name for name in ("direction", "direction_file", "run", "depth", "seed")
                 if getattr(self, name) is not None and name not in reads_run]
        if extra:
            raise UsageError(f"a 'feature' intervention takes dictionary, features, mode, scale, value and source (or "
                             f"run and depth for a patch); drop {', '.join(extra)}")
        if self.value is not None and self.mode != "steer":
            raise UsageError(f"value sets a feature's activation under mode 'steer', not {self.mode!r}")
        if (self.mode == "patch") != ((self.source is not None) != (self.run is not None)):
            raise UsageError("a feature patch reads the activations of a live source row (source=ROW or 'clean') or of "
                             "a recorded run (run=DIR): give exactly one" if self.mode == "patch" else
                             f"source={self.source!r} belongs to mode 'patch', not {self.mode!r}")

    def _check_source(self) -> None:
        source = self.source
        if source is None:
            return
        if isinstance(source, bool) or not (source == CLEAN_SOURCE or (isinstance(source, int) and source >= 0)):
            raise UsageError(f"source must be a batch row (an integer >= 0) or {CLEAN_SOURCE!r}, got {source!r}")
        if self.kind == "feature":
            return
        if self.kind != "patch":
            raise UsageError(f"a live source (source={source!r}) belongs to 'patch'; {self.kind!r} cannot use it "
                             f"(mean and resample read a recorded run)")
        extra = [name for name in ("run", "depth", "source_iteration") if getattr(self, name) is not None]
        if extra:
            raise UsageError(f"a live patch (source={source!r}) reads the same coordinates of the same generation; "
                             f"drop {', '.join(extra)} (or drop source to patch from a recorded run)")


@dataclass(frozen=True)
class Intervention:
    """One operation at one site."""

    site: Site
    operation: Operation

    def __post_init__(self) -> None:
        allowed = _STREAMS_OF[self.operation.kind]
        if self.site.stream not in allowed:
            raise UsageError(f"operation {self.operation.kind!r} applies to the stream(s) {', '.join(allowed)}, "
                             f"not {self.site.stream!r}")
        if self.site.stream == ATTENTION and self.operation.kind == "patch" and not self.operation.live:
            raise UsageError("a 'patch' of the attention stream reads a live source row of the same batch (source=ROW "
                             "or 'clean'); a recorded run's attention is not read")
        if self.site.stream == "state_in" and self.operation.kind in READS_RUN and not self.operation.live:
            # the state iteration i reads is the one recorded at iteration i - 1; iteration 1 reads the previous
            # position's (or the prompt's), which a recording does not hold as a carried state
            if self.site.iterations is None or min(self.site.iterations) < 2:
                raise UsageError(f"{self.operation.kind!r} on state_in replaces the state carried from the previous "
                                 f"iteration: list iterations >= 2, got "
                                 f"{'all' if self.site.iterations is None else list(self.site.iterations)}")
            if self.operation.source_iteration is not None:
                raise UsageError(f"{self.operation.kind!r} on state_in reads iteration - 1 of the reference run; "
                                 f"source_iteration does not apply")


@dataclass(frozen=True)
class InterventionSpec:
    """An ordered list of interventions; later ones see the result of earlier ones at the same site."""

    interventions: tuple[Intervention, ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, site: Site, operation: Operation) -> InterventionSpec:
        """A spec of one rule (per-row sweeps build one such spec per row)."""
        return cls((Intervention(site, operation),))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"interventions": [{"site": {...}, "operation": {...}}, ...]}``."""
        return {"interventions": [{"site": _clean(asdict(i.site)), "operation": _clean(asdict(i.operation))}
                                  for i in self.interventions]}

    def to_json(self) -> str:
        """The spec as JSON text (stable key order, for the run identity)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InterventionSpec:
        """Inverse of :meth:`to_dict`; unknown keys are errors, so a typo never passes silently."""
        if not isinstance(data, dict) or set(data) != {"interventions"}:
            raise UsageError("an intervention spec is a mapping with one key, 'interventions' (a list)")
        items = data["interventions"]
        if not isinstance(items, list):
            raise UsageError("'interventions' must be a list of {site: ..., operation: ...}")
        out = []
        for number, item in enumerate(items, 1):
            if not isinstance(item, dict) or set(item) != {"site", "operation"}:
                raise UsageError(f"intervention {number}: needs exactly the keys 'site' and 'operation'")
            out.append(Intervention(_build(Site, item["site"], number), _build(Operation, item["operation"], number)))
        return cls(tuple(out))

    @classmethod
    def from_file(cls, path: str | Path) -> InterventionSpec:
        """Read a spec from a ``.json`` or ``.yaml``/``.yml`` file."""
        path = Path(path)
        if not path.is_file():
            raise UsageError(f"intervention spec not found: {path}; pass a .json or .yaml file")
        import yaml

        text = path.read_text()
        try:
            data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
        except (ValueError, yaml.YAMLError) as err:
            raise UsageError(f"{path}: not a valid spec file: {' '.join(str(err).split())}") from err
        return cls.from_dict(data)


def toward(value: Any, reference: Any, scale: float) -> Any:
    """value + scale * (reference - value) (tensors): the reference itself (exactly) at scale 1, ``value`` at 0."""
    if scale == 1.0:
        return reference
    return value + float(scale) * (reference - value)


def _build(kind: type, data: Any, number: int) -> Any:
    if not isinstance(data, dict):
        raise UsageError(f"intervention {number}: {kind.__name__.lower()} must be a mapping")
    known = set(kind.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise UsageError(f"intervention {number}: unknown {kind.__name__.lower()} keys {sorted(unknown)}; known: "
                         f"{sorted(known)}")
    return kind(**data)


def _clean(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items() if v is not None}

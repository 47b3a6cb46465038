"""The loop declaration: how a latent-iteration family loops, as one small declarative object
(:class:`LoopDeclaration`; the families' declarations are in :mod:`sst_interp.model.loops`).

Beside :class:`~sst_interp.model.adapters.ArchitectureAdapter` (how one decoder layer splits around the SST blend),
a :class:`LoopDeclaration` says how a family *loops*:

- its *visits*: which decoder layers run how many times per token, and in what order. Every visit is addressed by
  ``(iteration, layer)``, where ``layer`` indexes the family's *recorded layer axis* (``layer_names``) and
  ``iteration`` counts, from 1, the times that address is reached for one token at one depth;
- what carries from one visit to the next;
- which loop count ``--depths`` sets (``depth_key``, a config field; ``None`` for SST, whose iterations are reruns
  of the emitting pass) and which values it can take;
- where a per-position exit can be taken, and which state the per-iteration logits (the family's *lens*) read.

The declaration is data: the recorder, the manifest and the error messages read it; the arithmetic stays in the
family's own transformers classes (SST's in :mod:`sst_interp.model.layer`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sst_interp.kernels.errors import UsageError


@dataclass(frozen=True)
class LoopDeclaration:
    """How one latent-iteration family loops (see the module docstring).

    Args:
        family: the family's short name (manifests, messages): ``sst``, ``hrm_text``, ``inkling2_loop``.
        model_types: the ``config.model_type`` values it serves.
        carries: what carries from one visit to the next (prose, written into manifests and docs).
        depth_meaning: what ``--depths D`` sets for this family (prose).
        depth_key: the config field a depth sets, or ``None`` when iterations are reruns (SST).
        max_depth: the largest depth the family honours (``None``: no limit but memory).
        exits: where a per-position exit can be taken (prose).
        lens: which state the per-iteration logits read (prose).
        layer_names: ``config -> [name of each recorded layer]``: the recorded layer axis, in visit order.
        visits: ``(config, depth) -> [(iteration, layer), ...]``: every visit of one token, in the order it runs.
        visit_sites: for a family transformers runs natively: ``model -> [(module, address)]``, the modules whose
            output is a visit and ``address(call kwargs) -> (iteration, layer)`` for one call of it (``None``:
            the family records through its own layers, as SST does). The recorder files a call under the address's
            layer and the iteration it counts (the k-th visit of the layer in one forward call); the trace check
            (:mod:`sst_interp.model.loop_trace`) refuses a declaration whose calls, order, counts or iterations
            differ from :attr:`visits`.
        lens_sites: ``model -> [(module, iteration(call kwargs))]``: the modules whose output [B, T, d] the lens
            reads, and which iteration a call is (the recorder counts it too: the k-th call is iteration k).
        lens_head: ``(model, state [B, d]) -> logits [B, V]``: the family's own head on a lens state.
        depth_follows: ``(config, depth) -> {config field: value}``: the config fields other than ``depth_key``
            whose value follows from the depth (HRM-Text's KV slot count); None: none. What running at a depth
            sets is :meth:`depth_fields`, derived from ``depth_key`` and these.
        state_layer: ``config -> recorded layer`` whose output is the loop state that carries and that the ``state``
            exit rule reads (``None``: SST's last stateful layer, from its own config).
        freeze_layers: ``config -> [recorded layer]``: the layers whose visit hands a carried state on to a later
            visit, where a ``freeze`` intervention can keep that state as the visit read it (``None``: SST's
            stateful layers, handled by its own layers).
        freeze_from: the first iteration at which a freeze is defined (a visit that reads no carried state has
            none to keep).
        freeze_meaning: what a freeze at ``(iteration, layer)`` does in this family (prose, for docs and errors).
        pass_input: ``model -> module`` whose input each pass reads the carried state through (a looped block's
            first layer: :func:`~sst_interp.model.looped_block.looped_block` declares it), so that a freeze at
            ``(p, freeze layer)`` gives its call in pass p + 1 the input of its call in pass p. ``None``: a family
            whose freeze reaches its carried state in its own way (HRM-Text, Inkling-2 Loop:
            :mod:`sst_interp.interventions.loops`).
        lens_norm: ``model -> norm module`` that the per-layer logit lens (``analyses.logit_lens``) applies to any
            recorded layer's output before the model's head (``None``: the decoder's final norm, as for SST).
        lens_is_output: whether the lens at a depth's last iteration is the distribution the token is chosen from
            (False for a logit lens of a looped block that later layers follow: a per-position exit simulated from
            it would not be the model's answer).
        settings: ``config -> {field: value}``: the checkpoint's settings that change what a visit computes but
            that ``--depths`` does not set, written into the manifest's ``loop`` (the :attr:`options` are written
            there too).
        options: the config fields a user may set at inference with ``--loop-option KEY=VALUE`` (Dory's
            ``recurrent_kv_cache_mode``): checked against the config class's allowed values
            (:mod:`sst_interp.model.loop_options`), set before the model is built, and written into the manifest's
            ``loop.settings``.
        check_model: ``model -> None``: raises :class:`UsageError` when the declaration's modules are not in the
            model (run on a weightless copy, before any weight loads).
        title: the family's display name (docs, tables).
        layer_meaning: what the recorded layer axis holds (prose, for the families table).
        exact_dtype: the dtype its exactness tests run in (for the families table).
        iterations_meaning: how often each recorded layer runs at depth D (prose, for the families table).
        wrapped: ``{wrapper model_type: key prefix}``: checkpoints saved under a wrapper (a multimodal model around
            the family's text model) whose ``text_config`` and weights under the prefix are the text model, which is
            what is recorded.
    """

    family: str
    model_types: tuple[str, ...]
    carries: str
    depth_meaning: str
    depth_key: str | None
    max_depth: int | None
    exits: str
    lens: str
    layer_names: Callable[[Any], list[str]]
    visits: Callable[[Any, int], list[tuple[int, int]]]
    visit_sites: Callable[[Any], list[tuple[Any, Callable[[dict[str, Any]], tuple[int, int]]]]] | None = None
    lens_sites: Callable[[Any], list[tuple[Any, Callable[[dict[str, Any]], int]]]] | None = None
    lens_head: Callable[[Any, Any], Any] | None = None
    depth_follows: Callable[[Any, int], dict[str, int]] | None = None
    state_layer: Callable[[Any], int] | None = None
    freeze_layers: Callable[[Any], list[int]] | None = None
    freeze_from: int = 1
    freeze_meaning: str = ""
    pass_input: Callable[[Any], Any] | None = None
    lens_norm: Callable[[Any], Any] | None = None
    lens_is_output: bool = True
    settings: Callable[[Any], dict[str, Any]] | None = None
    options: tuple[str, ...] = ()
    check_model: Callable[[Any], None] | None = None
    title: str = ""
    layer_meaning: str = ""
    exact_dtype: str = "float64"
    wrapped: dict[str, str] = field(default_factory=dict)
    iterations_meaning: str = "D everywhere"

    def check_depth(self, depth: int) -> int:
        """``depth`` if the family can run it, else a :class:`UsageError` saying what a depth means here."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise UsageError(f"{self.family}: a depth is an integer >= 1 ({self.depth_meaning}), got {depth!r}")
        if self.max_depth is not None and depth > self.max_depth:
            raise UsageError(f"{self.family} cannot run depth {depth}: {self.depth_meaning}, at most "
                             f"{self.max_depth}")
        return depth

    def depth_fields(self, config: Any, depth: int) -> dict[str, int]:
        """What running at ``depth`` sets in ``config``: ``{depth_key: depth}`` and the fields that follow from it
        (:attr:`depth_follows`). SST has none (``depth_key`` None: its iterations are reruns), a ValueError."""
        if self.depth_key is None:
            raise ValueError(f"{self.family}: a depth sets no config field (its iterations are reruns of a pass)")
        follows = self.depth_follows(config, depth) if self.depth_follows is not None else {}
        if self.depth_key in follows:
            raise ValueError(f"{self.family}: depth_follows sets {self.depth_key!r}, which is the depth itself")
        return {self.depth_key: depth, **follows}

    def iterations_per_layer(self, config: Any, depth: int) -> list[int]:
        """How many times each recorded layer is visited per token at ``depth``: [num recorded layers]."""
        counts = [0] * len(self.layer_names(config))
        for _, layer in self.visits(config, depth):
            counts[layer] += 1
        return counts

    def looped_layers(self, config: Any) -> list[int]:
        """The recorded layers visited more often at depth 2 than at depth 1 (every other layer holds the iterations
        it has at depth 1, whatever the depth)."""
        once, twice = self.iterations_per_layer(config, 1), self.iterations_per_layer(config, 2)
        return [layer for layer, (a, b) in enumerate(zip(once, twice)) if b > a]

    def setting_values(self, config: Any) -> dict[str, Any]:
        """The settings written into the manifest's ``loop.settings``: :attr:`settings` and every :attr:`options`
        field, as ``config`` holds them."""
        values = dict(self.settings(config)) if self.settings is not None else {}
        for name in self.options:
            value = getattr(config, name)
            values[name] = value if isinstance(value, (bool, int, float)) else str(value)
        return values

    def describe(self, config: Any, depths: list[int]) -> dict[str, Any]:
        """The manifest's ``loop`` object: the structure, and per depth how often each recorded layer runs."""
        return {
            "family": self.family,
            "layers": self.layer_names(config),
            "carries": self.carries,
            "depth_meaning": self.depth_meaning,
            "depth_key": self.depth_key,
            "exits": self.exits,
            "lens": self.lens,
            "iterations_per_layer": {str(d): self.iterations_per_layer(config, d) for d in depths},
            "state_layer": self.state_layer(config) if self.state_layer is not None else None,
            "lens_is_output": self.lens_is_output,
            "settings": self.setting_values(config),
        }

"""The ``feature`` operation: ablate, steer or patch features of a sparse dictionary at a site, keeping the
reconstruction error.

A dictionary (a folder written by ``python -m sst_interp.features train``: SAELens' ``cfg.json`` and
``sae_weights.safetensors`` beside the sidecar) encodes a state x [d] as activations a = enc(x) [width]; its decoder
rows W_dec [width, d] are the features' directions. The edit of the features F changes their activations a_F into
a'_F and moves the state by the change alone::

    x' = x + (a'_F - a_F) @ W_dec[F]

instead of ``decode(a') + (x - decode(a))``, which rounds differently from x even when a' = a: here an unchanged
feature contributes an exact zero, so a no-op edit (steer by 0, a patch from the row itself) is the clean run bit for
bit, and an ablation moves x by exactly -a_f W_dec[f].

Modes (:data:`~sst_interp.interventions.spec.FEATURE_MODES`): ``ablate`` (a'_F = 0), ``steer`` (a'_F = a_F +
``scale``, or ``value`` when given) and ``patch`` (a'_F = a_F + ``scale`` (s_F - a_F), where s = enc of the live
source row's state at the same site, as that row's forward computed it).

The dictionary is loaded once per Intervener (:class:`FeatureDictionaries`), SAELens imported only then. Its fit is
checked against the site before anything runs: the layer it was trained on, the iterations it covers, the width of
the states and the feature indices (UsageError, one line).

The interventions floor sits below :mod:`sst_interp.features`, so the sidecar is read here as JSON (its name
:data:`SIDECAR`, the same file :mod:`sst_interp.features.meta` writes; a test holds the two equal).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sst_interp.interventions.spec import Intervention, Operation
from sst_interp.kernels.errors import UsageError

#: The dictionary's sidecar file (written by sst_interp.features.meta, which declares it as ``SIDECAR``).
SIDECAR = "sst_interp_dictionary.json"


@dataclass
class FeatureDictionary:
    """One loaded dictionary, what the edit needs of it.

    Args:
        path: its folder.
        sae: the SAELens SAE (eval mode).
        layer: the recorded layer it was trained on.
        iterations: the iterations it covers.
        d_in: the state width.
        width: the number of features.
    """

    path: Path
    sae: Any
    layer: int
    iterations: tuple[int, ...]
    d_in: int
    width: int

    @classmethod
    def load(cls, path: str | Path) -> FeatureDictionary:
        """Read the sidecar and load the SAE with SAELens (on the CPU; moved to the states' device on use)."""
        path = Path(path)
        sidecar = path / SIDECAR
        if not sidecar.is_file():
            raise UsageError(f"feature: {path} holds no dictionary ({SIDECAR} missing); pass a folder written by "
                             f"python -m sst_interp.features train (for a per-iteration set, its iteration-N folder)")
        try:
            meta = json.loads(sidecar.read_text(encoding="utf-8"))
            layer, iterations = int(meta["layer"]), tuple(int(i) for i in meta["iterations"])
            d_in, width = int(meta["d_in"]), int(meta["width"])
        except (ValueError, KeyError, TypeError) as err:
            raise UsageError(f"feature: {sidecar} is damaged ({type(err).__name__}: {err}); retrain the "
                             f"dictionary") from err
        # SAELens is the features extra: imported only when a spec holds a feature operation
        try:
            from sae_lens import SAE
        except ImportError as err:
            raise UsageError(f"feature: loading the dictionary {path} needs SAELens, the features extra: pip install "
                             f"-e \".[features]\"") from err

        try:
            sae = SAE.load_from_disk(path, device="cpu")
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            raise UsageError(f"feature: {path} does not load in SAELens ({' '.join(str(err).split())[:200]}); "
                             f"retrain the dictionary") from err
        return cls(path, sae.eval(), layer, iterations, d_in, width)

    def check_fits(self, item: Intervention, hidden_size: int, where: str) -> None:
        """Refuse (UsageError, one line) a site this dictionary was not trained for: another layer, an iteration it
        does not cover, states of another width, a feature index past its width."""
        site, operation = item.site, item.operation
        if self.d_in != hidden_size:
            raise UsageError(f"{where}: the dictionary {self.path} was trained on states of width d = {self.d_in}; "
                             f"this model's are d = {hidden_size}: use a dictionary of this model")
        if site.layers != (self.layer,):
            raise UsageError(f"{where}: the dictionary {self.path} was trained on layer {self.layer}; the site names "
                             f"layers {'all' if site.layers is None else list(site.layers)}: set layers=[{self.layer}]")
        if site.iterations is None or not set(site.iterations) <= set(self.iterations):
            raise UsageError(f"{where}: the dictionary {self.path} covers iterations {list(self.iterations)}; the "
                             f"site names {'all' if site.iterations is None else list(site.iterations)}: list "
                             f"iterations it covers")
        past = [f for f in operation.features or () if f >= self.width]
        if past:
            raise UsageError(f"{where}: features {past} do not exist in the dictionary {self.path} of width "
                             f"{self.width} (0-{self.width - 1})")

    def _on(self, device: torch.device) -> Any:
        if self.sae.W_dec.device != device:
            self.sae = self.sae.to(device)
        return self.sae

    @torch.no_grad()
    def encode(self, states: torch.Tensor) -> torch.Tensor:
        """Activations [B, width] float32 of states [B, d] (any float dtype)."""
        return self._on(states.device).encode(states.to(torch.float32)).float()

    def directions(self, features: tuple[int, ...], device: torch.device) -> torch.Tensor:
        """W_dec[features]: [F, d] float32, detached."""
        return self._on(device).W_dec[list(features)].detach().float()


def edited(operation: Operation, active: torch.Tensor, source: torch.Tensor | None) -> torch.Tensor:
    """a'_F [B, F] float32 of one feature ``operation`` from a_F ``active`` [B, F] and, for ``patch``, the source
    rows' s_F ``source`` [B, F]."""
    if operation.mode == "ablate":
        return torch.zeros_like(active)
    if operation.mode == "steer":
        if operation.value is not None:
            return torch.full_like(active, float(operation.value))
        return active + float(operation.scale)
    assert source is not None
    if operation.scale == 1.0:
        return source
    return active + float(operation.scale) * (source - active)


def feature_edit(dictionary: FeatureDictionary, operation: Operation, value: torch.Tensor,
                 source: torch.Tensor | None = None) -> torch.Tensor:
    """The edited states [B, d] (``value``'s dtype): x + (a'_F - a_F) @ W_dec[F] for states ``value`` [B, d];
    ``source`` [B, d] is, per row, the state its ``patch`` reads the activations of."""
    features = tuple(operation.features or ())
    active = dictionary.encode(value)[:, list(features)]
    reference = None if source is None else dictionary.encode(source)[:, list(features)]
    change = edited(operation, active, reference) - active
    delta = change @ dictionary.directions(features, value.device)
    wide = torch.promote_types(value.dtype, torch.float32)  # bf16 adds in float32 and rounds once
    return (value.to(wide) + delta.to(wide)).to(value.dtype)


class FeatureDictionaries:
    """The dictionaries of an Intervener's feature operations, each folder loaded once."""

    def __init__(self) -> None:
        self._loaded: dict[str, FeatureDictionary] = {}

    def check(self, item: Intervention, hidden_size: int, where: str) -> None:
        """Load ``item``'s dictionary (once per folder) and check it fits the site."""
        self[item.operation].check_fits(item, hidden_size, where)

    def __getitem__(self, operation: Operation) -> FeatureDictionary:
        folder = str(Path(str(operation.dictionary)).resolve())
        if folder not in self._loaded:
            self._loaded[folder] = FeatureDictionary.load(folder)
        return self._loaded[folder]

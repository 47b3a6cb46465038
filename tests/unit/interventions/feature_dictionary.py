"""A dictionary folder written by hand for the feature-edit tests: a SAELens ReLU SAE (``StandardSAE``) with given or
seeded weights, saved with ``save_inference_model`` beside the sidecar :mod:`sst_interp.features.meta` writes, so that
``FeatureDictionary.load`` and ``features.Dictionary.load`` both read it."""

from __future__ import annotations

from pathlib import Path

import torch
from sae_lens.saes import StandardSAE, StandardSAEConfig

from sst_interp.features.meta import SAE_FILES, SIDECAR, DictionaryMeta, sha256


def write_dictionary(folder: Path, d_in: int, width: int, *, layer: int, iterations: tuple[int, ...], seed: int = 0,
                     W_dec: torch.Tensor | None = None, W_enc: torch.Tensor | None = None, b_enc: float = 0.05) -> Path:
    """A ReLU dictionary d_in -> width at (layer, iterations): encoder ReLU(x @ W_enc + b_enc) (default W_enc =
    W_dec^T and b_enc 0.05: most features fire on a random state), decoder rows W_dec (default seeded Gaussian; rows
    scaled to unit norm), b_dec 0."""
    generator = torch.Generator().manual_seed(seed)
    sae = StandardSAE(StandardSAEConfig(d_in=d_in, d_sae=width, apply_b_dec_to_input=False, dtype="float32"))
    decoder = torch.randn(width, d_in, generator=generator) if W_dec is None else W_dec.float()
    decoder = decoder / decoder.norm(dim=-1, keepdim=True)
    with torch.no_grad():
        sae.W_dec.copy_(decoder)
        sae.W_enc.copy_(decoder.T.clone() if W_enc is None else W_enc.float())
        sae.b_enc.fill_(b_enc)
        sae.b_dec.zero_()
    folder.mkdir(parents=True, exist_ok=True)
    sae.save_model(folder)
    meta = DictionaryMeta(layout="shared", architecture="relu", run="hand-written", run_identity="0" * 64,
                          model={"family": "sst"}, depth=max(iterations), layer=layer, layer_name=None,
                          iterations=tuple(iterations), d_in=d_in, width=width, k=0, tokens={}, questions=0,
                          samples=0, holdout=0.0, seed=seed, files={name: sha256(folder / name) for name in SAE_FILES})
    (folder / SIDECAR).write_text(meta.to_json())
    return folder

"""A per-layer logit lens: every layer's recorded state read through the model's final norm and unembedding.

A run holds each layer's output at every iteration (full positions), not the unembedding, so the lens loads the
model the run's manifest names (``identity.model``: a local folder, or the default backbone) the first time it is
asked for, keeps only the final norm and the output embedding (with Gemma's final logit soft-capping), and lets
the rest go. At the last layer the lens is the model's own output distribution, so its top token is the recorded
argmax of that iteration. ``RunAnalysis.logit_lens`` and the explorer's per-layer view call :func:`layer_lens`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.results import NotApplicable
from sst_interp.model.cache import DEFAULT_BACKBONE_ID, DEFAULT_MODEL

LABEL = "logit_lens"


@dataclass(frozen=True)
class LensHead:
    """The final norm and unembedding of a run's model.

    Args:
        model: what the manifest names (a folder, or the default backbone's id).
        norm: the decoder's final norm module ([..., d] -> [..., d]).
        head: the output embedding ([..., d] -> [..., V]).
        softcap: the final logit soft-capping (Gemma), or None.
        tokenizer: the model's tokenizer (decodes the lens' tokens).
    """

    model: str
    norm: Any
    head: Any
    softcap: float | None
    tokenizer: Any

    def logprobs(self, states: np.ndarray) -> np.ndarray:
        """Log-probabilities ``[..., V]`` (float32) of states ``[..., d]``, as the model's own head computes them."""
        import torch

        with torch.no_grad():
            hidden = torch.as_tensor(np.asarray(states, dtype=np.float32))
            logits = self.head(self.norm(hidden)).float()
            if self.softcap is not None:
                logits = torch.tanh(logits / self.softcap) * self.softcap
            return torch.log_softmax(logits, dim=-1).numpy()


def model_of(manifest: dict[str, Any]) -> str | NotApplicable:
    """The ``load_backbone`` argument for the model a run was recorded with, or why there is none."""

    model = (manifest.get("identity") or {}).get("model")
    if not model or model == "synthetic":
        return NotApplicable("the run names no model it was recorded with (a synthetic run has none), so there is "
                             "no unembedding to read its layers through", LABEL)
    return DEFAULT_MODEL if model == DEFAULT_BACKBONE_ID else str(model)


def load_lens_head(manifest: dict[str, Any]) -> LensHead | NotApplicable:
    """Load the final norm and unembedding of the model ``manifest`` names (CPU, float32), or say in one line why
    it cannot be loaded (no model named, a folder that is gone, a hub id without network, a bring-your-own run,
    whose ``--loop`` file and model code the lens does not run)."""
    model = model_of(manifest)
    if isinstance(model, NotApplicable):
        return model
    loop_file = (manifest.get("identity") or {}).get("loop")
    if loop_file:
        # the norm and head are the declaration's, and the model may be the folder's own code: neither runs here
        return NotApplicable(f"a bring-your-own run (--loop {loop_file}): its lens norm and head are declared in that "
                             f"file and its model may run the folder's own code, which the per-layer lens does not "
                             f"run; the run's recorded per-iteration logits are the declared lens", LABEL)
    from sst_interp.model.backbone import load_backbone

    try:
        backbone, tokenizer = load_backbone(model, dtype="float32")
    except (UsageError, OSError, ValueError) as err:
        return NotApplicable(f"the per-layer logit lens needs the model the run was recorded with ({model}), which "
                             f"could not be loaded: {' '.join(str(err).split())}", LABEL)
    from sst_interp.model.loops import native_loop

    loop = native_loop(getattr(backbone.config, "model_type", None))
    # a looping family states which norm reads its layers (HRM-Text's decoder has none of its own)
    norm = loop.lens_norm(backbone) if loop is not None and loop.lens_norm is not None else backbone.get_decoder().norm
    head = backbone.get_output_embeddings()
    softcap = getattr(backbone.config, "final_logit_softcapping", None)
    return LensHead(str(model), norm.eval(), head.eval(), None if softcap is None else float(softcap), tokenizer)


def layer_lens(run: Any, head: LensHead, question: str, depth: int, position: int, turn: int = 0,
               top_n: int = 5) -> pd.DataFrame | NotApplicable:
    """The top-``top_n`` tokens of every layer's state at every iteration of one position.

    Returns:
        One row per (iteration, layer, rank): ``iteration``, ``layer``, ``rank``, ``token_id``, ``logprob`` (nats),
        or a NotApplicable (the position has no full states: past the full-state window the run kept sketches
        only). A layer the run did not visit at an iteration (a latent-iteration family's layer outside its loop)
        has token_id -1 and a NaN logprob there.
    """
    if depth not in run.depths:
        return NotApplicable(f"depth {depth} is not in the run (depths {run.depths})", LABEL)
    if str(question) not in run.question_ids(depth):
        return NotApplicable(f"question {question!r} is not recorded at depth {depth}", LABEL)
    for block in run.hidden(depth, [str(question)], turn=turn, positions=[position]):
        if block.positions.size:
            states, iterations = block.values[0], block.iterations  # [I, L, d]
            break
    else:
        full = int(run.manifest.get("full_positions") or 0)
        return NotApplicable(f"position {position} has no full hidden states (the run keeps them for positions "
                             f"0-{full - 1}); the lens reads a layer's whole state", LABEL)
    logprobs = head.logprobs(states)  # [I, L, V]
    n = min(int(top_n), logprobs.shape[-1])
    top = np.argsort(-logprobs, axis=-1, kind="stable")[..., :n]  # [I, L, n]
    unvisited = np.isnan(states).all(axis=-1)  # [I, L]
    chosen = np.take_along_axis(logprobs, top, axis=-1)
    top[unvisited], chosen[unvisited] = -1, np.nan
    n_iter, n_layers = top.shape[:2]
    return pd.DataFrame({
        "iteration": np.repeat(np.asarray(iterations, dtype=np.int64), n_layers * n),
        "layer": np.tile(np.repeat(np.arange(n_layers, dtype=np.int64), n), n_iter),
        "rank": np.tile(np.arange(n, dtype=np.int64), n_iter * n_layers),
        "token_id": top.reshape(-1).astype(np.int64),
        "logprob": chosen.reshape(-1).astype(np.float64),
    })

"""Forward-hook recorders (sst_interp.hooks): capture per-iteration layer outputs and logits inline.

- :class:`Recorder` -- the generation observer used by ``python -m sst_interp.record``: full hidden states,
  top-k |value| sketches, per-iteration logit summaries and (optionally) FFN gate activity of one batch;
- :class:`VisitRecorder` -- the same for natively looping families (HRM-Text): each hook call names its
  (iteration, layer);
- :class:`RecordConfig` -- what to record (:class:`AttentionConfig`: which attention weights);
- :class:`AttentionCapture` -- the attention of each recorded query over its keys, per (iteration, layer, head);
- :class:`OwnedHooks` -- hooks owned by a context manager, all removed on exit (also on an exception).
"""

from sst_interp.hooks.attention import AttentionCapture, attention_heads, attention_module
from sst_interp.hooks.capture import LayerCapture, layer_output, top_abs_indices
from sst_interp.hooks.config import AttentionConfig, PassState, RecordConfig, default_sketch_k
from sst_interp.hooks.gates import GateCapture, gate_projection, pack_signs
from sst_interp.hooks.logits import LogitCapture, logit_summary
from sst_interp.kernels.owned import OwnedHooks
from sst_interp.hooks.recorder import Recorder
from sst_interp.hooks.visits import VisitRecorder

__all__ = [
    "AttentionCapture",
    "AttentionConfig",
    "GateCapture",
    "LayerCapture",
    "LogitCapture",
    "OwnedHooks",
    "PassState",
    "RecordConfig",
    "Recorder",
    "attention_heads",
    "attention_module",
    "default_sketch_k",
    "gate_projection",
    "layer_output",
    "logit_summary",
    "pack_signs",
    "top_abs_indices",
    "VisitRecorder",
]

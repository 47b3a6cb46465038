"""The SST model (paper Sec. 2): state stream, iterative refinement, checkpoints, backbones.

Main entry points::

    from sst_interp.model import SSTConfig, SSTModel, load_backbone, generate, FixedDepth, GenerationConfig
    backbone, tokenizer = load_backbone("default")
    sst = SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden"))
    result = generate(sst, [tokenizer("2 + 2 =").input_ids], depth=3)
"""

from sst_interp.model.adapters import ADAPTERS, ArchitectureAdapter, adapter_for, supported_model_types
from sst_interp.model.backbone import load_backbone
from sst_interp.model.config import SSTConfig
from sst_interp.model.generation import (
    DepthPolicy,
    FixedDepth,
    GenerationConfig,
    GenerationObserver,
    GenerationResult,
    PassInfo,
    generate,
)
from sst_interp.model.halting import PositionPolicy, parse_position_policy
from sst_interp.model.scan import linear_scan, shift_states
from sst_interp.model.sst import SSTModel

__all__ = [
    "ADAPTERS",
    "ArchitectureAdapter",
    "DepthPolicy",
    "FixedDepth",
    "GenerationConfig",
    "GenerationObserver",
    "GenerationResult",
    "PassInfo",
    "PositionPolicy",
    "SSTConfig",
    "SSTModel",
    "adapter_for",
    "generate",
    "linear_scan",
    "load_backbone",
    "parse_position_policy",
    "shift_states",
    "supported_model_types",
]

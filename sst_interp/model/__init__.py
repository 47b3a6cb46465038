"""The SST model (paper Sec. 2): state stream, iterative refinement, checkpoints, backbones.

Main entry points::

    from sst_interp.model import SSTConfig, SSTModel, load_backbone, generate, FixedDepth, GenerationConfig
    backbone, tokenizer = load_backbone("default")
    sst = SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden"))
    result = generate(sst, [tokenizer("2 + 2 =").input_ids], depth=3)
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports

if TYPE_CHECKING:
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

#: Where each public name lives; imported on first use so that importing the package stays light.
_EXPORTS = {
    "ADAPTERS": "sst_interp.model.adapters",
    "ArchitectureAdapter": "sst_interp.model.adapters",
    "adapter_for": "sst_interp.model.adapters",
    "supported_model_types": "sst_interp.model.adapters",
    "load_backbone": "sst_interp.model.backbone",
    "SSTConfig": "sst_interp.model.config",
    "DepthPolicy": "sst_interp.model.generation",
    "FixedDepth": "sst_interp.model.generation",
    "GenerationConfig": "sst_interp.model.generation",
    "GenerationObserver": "sst_interp.model.generation",
    "GenerationResult": "sst_interp.model.generation",
    "PassInfo": "sst_interp.model.generation",
    "generate": "sst_interp.model.generation",
    "PositionPolicy": "sst_interp.model.halting",
    "parse_position_policy": "sst_interp.model.halting",
    "linear_scan": "sst_interp.model.scan",
    "shift_states": "sst_interp.model.scan",
    "SSTModel": "sst_interp.model.sst",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

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

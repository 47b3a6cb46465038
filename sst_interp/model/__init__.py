"""The SST model (paper Sec. 2): state stream, iterative refinement, checkpoints, backbones.

Main entry points::

    from sst_interp.model import SSTConfig, SSTModel, load_backbone, generate, FixedDepth, GenerationConfig
    backbone, tokenizer = load_backbone("default")
    sst = SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden"))
    result = generate(sst, [tokenizer("2 + 2 =").input_ids], depth=3)
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.model.adapters import ADAPTERS, ArchitectureAdapter, adapter_for, supported_model_types
    from sst_interp.model.backbone import load_backbone
    from sst_interp.model.config import SSTConfig
    from sst_interp.model.depth_policy import DepthPolicy, FixedDepth
    from sst_interp.model.generation import GenerationConfig, GenerationResult, generate
    from sst_interp.model.halting import PositionPolicy, parse_position_policy
    from sst_interp.model.observers import GenerationObserver, PassInfo
    from sst_interp.model.scan import linear_scan, shift_states
    from sst_interp.model.sst import SSTModel

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package stays light.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

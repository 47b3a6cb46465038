"""Build an SST from command-line style arguments: a backbone, an optional checkpoint, a preset.

Shared by ``python -m sst_interp.generate`` and ``python -m sst_interp.record`` so both mean the same thing by
``--model``, ``--checkpoint`` and the demo preset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from sst_interp.kernels.errors import UsageError
from sst_interp.model.backbone import DEFAULT_MODEL, backbone_identity, load_backbone
from sst_interp.model.baseline_checkpoint import is_baseline_checkpoint, load_baseline_checkpoint
from sst_interp.model.checkpoint import ADAPTER_DIR, load_checkpoint, read_checkpoint_config
from sst_interp.model.config import SSTConfig
from sst_interp.model.placement import DeviceMap, check_placement, offloaded_modules
from sst_interp.model.sst import SSTModel

def demo_preset_note(model: str | None = None) -> str:
    """What the demo preset runs, naming the backbone actually loaded (``model``: None or ``default`` is the
    embedded Gemma 3 270M; any other is named as given)."""
    backbone = "the default Gemma 3 270M backbone" if model in (None, DEFAULT_MODEL) else f"the backbone {model}"
    return (f"demo preset: {backbone}, untrained, with state_scale='hidden' (an untrained unit-scale SST is nearly "
            "inert) and prompt mode 'none' (the prompt runs as the pretrained model; the state stream starts at "
            "generated position 0); pass --checkpoint for a trained SST")


DEMO_PRESET_NOTE = demo_preset_note()
#: The demo preset's prompt mode. An untrained SST that blends states through the prompt (``two_pass``) derails
#: the base model (4/24 demo questions at depth 1, vs 13/24 for the plain backbone); with ``none`` position 0
#: iteration 1 is a standard forward pass (sec:punctuated_equilibrium) and depth 1 scores 9/24.
DEMO_PROMPT_MODE = "none"
DEFAULT_PROMPT_MODE = "two_pass"


def resolve_prompt_mode(prompt_mode: str | None, demo_preset: bool) -> str:
    """The prompt mode to use: the one asked for, else ``none`` under the demo preset and ``two_pass`` otherwise."""
    if prompt_mode is not None:
        return prompt_mode
    return DEMO_PROMPT_MODE if demo_preset else DEFAULT_PROMPT_MODE


#: What a run's identity says of the state scale of an SST built from a checkpoint (which carries its own).
CHECKPOINT_STATE_SCALE = "from checkpoint"


@dataclass
class ModelSpec:
    """Which SST to build.

    Args:
        model: ``default``, a local HF folder, a ``.gguf`` file or a hub id.
        checkpoint: an SST checkpoint folder, or ``None`` for an untrained SST.
        state_scale: for an untrained SST: ``unit`` (the paper) or ``hidden``; ``None`` picks ``hidden`` for the
            default backbone without checkpoint (the demo preset) and ``unit`` otherwise.
        dtype: ``float32`` or ``bfloat16`` (``float64`` for exactness experiments).
        device: torch device string: where the whole model goes when ``device_map`` is None.
        device_map: None (the whole model on ``device``), ``"auto"`` (accelerate's big-model loading over the GPUs,
            then the CPU, then the disk) or an explicit {module name: device} dict; see
            :mod:`sst_interp.model.placement`.
        max_memory: with ``device_map="auto"``: the budget per device, e.g. ``{0: "20GiB", "cpu": "60GiB"}``.
    """

    model: str = DEFAULT_MODEL
    checkpoint: str | None = None
    state_scale: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    device_map: DeviceMap | None = None
    max_memory: dict[int | str, str] | None = None

    def __post_init__(self) -> None:
        check_placement(self.device_map, self.max_memory)

    @property
    def is_demo_preset(self) -> bool:
        """True when the default backbone runs untrained with the hidden-scale state (see DEMO_PRESET_NOTE)."""
        return self.model == DEFAULT_MODEL and self.checkpoint is None and self.state_scale in (None, "hidden")

    def identity(self) -> dict[str, str | None]:
        """What makes two runs comparable: backbone, checkpoint, SST variant and dtype."""
        return {
            "model": backbone_identity(self.model),
            "checkpoint": self.checkpoint,
            "state_scale": self.resolved_state_scale() if self.checkpoint is None else CHECKPOINT_STATE_SCALE,
            "dtype": self.dtype,
        }

    def resolved_state_scale(self) -> str:
        if self.state_scale is not None:
            return self.state_scale
        return "hidden" if self.model == DEFAULT_MODEL else "unit"


def build_sst(spec: ModelSpec) -> tuple[SSTModel, PreTrainedTokenizerBase]:
    """Load the backbone and return ``(sst, tokenizer)`` for ``spec``."""
    baseline = spec.checkpoint is not None and is_baseline_checkpoint(spec.checkpoint)
    if spec.checkpoint is not None and not baseline:
        read_checkpoint_config(spec.checkpoint)  # fail on a bad checkpoint before the slow backbone load
    backbone, tokenizer = load_backbone(spec.model, dtype=spec.dtype, device=spec.device, device_map=spec.device_map,
                                        max_memory=spec.max_memory)
    if spec.checkpoint is not None and (baseline or (Path(spec.checkpoint) / ADAPTER_DIR).is_dir()):
        _check_adapter_fits(backbone, spec.checkpoint)
    if baseline:
        # The matched baseline (sec:baseline_ft) has no state stream: an SST with no stateful layer is exactly the
        # fine-tuned backbone, and extra iterations change nothing.
        sst = SSTModel.from_backbone(load_baseline_checkpoint(backbone, spec.checkpoint), SSTConfig(layers=[]))
    elif spec.checkpoint is not None:
        if spec.state_scale is not None:
            raise UsageError("--state-scale applies to untrained SSTs only; a checkpoint carries its own variant")
        sst = load_checkpoint(backbone, spec.checkpoint)
    else:
        sst = SSTModel.from_backbone(backbone, SSTConfig(state_scale=spec.resolved_state_scale()))
    if spec.device_map is None:
        sst.to(spec.device)
    # Under a device map each layer's state parameters were made where the layer runs (SSTModel.__init__); moving
    # the model would undo accelerate's placement (and fails outright for offloaded layers).
    return sst, tokenizer


def _check_adapter_fits(backbone, checkpoint: str) -> None:  # noqa: ANN001 - a transformers model
    # peft cannot merge an adapter into offloaded modules (their weights are meta tensors between forwards; it
    # fails deep inside accelerate), so say what to change instead.
    offloaded = offloaded_modules(backbone)
    if offloaded:
        shown = ", ".join(offloaded[:3]) + (" ..." if len(offloaded) > 3 else "")
        raise UsageError(f"{checkpoint} carries a LoRA adapter, which cannot be merged into modules the device map "
                         f"offloads to cpu or disk ({shown}); raise --max-memory for the GPUs (or add GPUs) "
                         "so that no module is offloaded")


def eos_token_ids(tokenizer: PreTrainedTokenizerBase, sst: SSTModel) -> tuple[int, ...]:
    """Token ids that end generation: the tokenizer's EOS plus the backbone's generation-config EOS ids."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(sst.backbone, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos:
        ids.update(int(i) for i in config_eos)
    return tuple(sorted(ids))


def check_depths(depths: Sequence[int]) -> list[int]:
    """The flat iteration depths, checked: at least one, each an integer >= 1, none repeated (else a UsageError).

    The command layer parses ``--depths 1,2,3,4`` into integers (:mod:`sst_interp.cli.args`); this is the library's
    check of the values, so a config built in Python is held to the same rule."""
    depths = list(depths)
    shown = ",".join(str(depth) for depth in depths)
    if not depths or any(not isinstance(depth, int) or isinstance(depth, bool) or depth < 1 for depth in depths):
        raise UsageError(f"invalid depth list {shown!r}; every depth must be an integer >= 1, e.g. 1,2,3,4")
    if len(set(depths)) != len(depths):
        raise UsageError(f"invalid depth list {shown!r}: a depth is repeated")
    return depths

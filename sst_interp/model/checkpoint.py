"""SST checkpoints: a folder with ``sst_config.json``, ``sst_state.safetensors`` and optionally a PEFT adapter.

``sst_config.json`` holds the SST variant (:class:`SSTConfig`), the backbone identity, and the shape the parameters
were made for (layers, hidden size), so a checkpoint made for another backbone is refused with a clear message.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file

from sst_interp import __version__
from sst_interp.kernels.errors import UsageError
from sst_interp.model.config import SSTConfig
from sst_interp.model.sst import SSTModel

CONFIG_FILE = "sst_config.json"
STATE_FILE = "sst_state.safetensors"
ADAPTER_DIR = "adapter"
FORMAT_VERSION = 1


def save_checkpoint(
    sst: SSTModel,
    folder: str | Path,
    backbone_id: str,
    extra: dict[str, Any] | None = None,
    save_adapter: bool = True,
) -> Path:
    """Write an SST checkpoint folder.

    Args:
        sst: the model.
        folder: target folder (created).
        backbone_id: what the checkpoint was trained on (recorded, checked loosely on load).
        extra: additional JSON-serialisable provenance (training step, data hash, ...).
        save_adapter: also save a PEFT adapter when the backbone is a ``PeftModel``-wrapped model.

    Returns:
        The folder path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": FORMAT_VERSION,
        "sst": sst.config.to_dict(),
        "backbone": backbone_id,
        "num_layers": sst.num_layers,
        "hidden_size": sst.hidden_size,
        "stateful_layers": sorted(sst.state_modules()),
        "package_version": __version__,
        "extra": extra or {},
    }
    save_file(sst.state_dict_sst(), str(folder / STATE_FILE))
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2))
    peft_model = getattr(sst, "peft_model", None)
    if save_adapter and peft_model is not None:
        # The LM head is a LoRA target and tied to the embeddings on Gemma; without this flag peft also writes the
        # whole embedding matrix (671 MB on the 270M model) into the adapter.
        peft_model.save_pretrained(str(folder / ADAPTER_DIR), save_embedding_layers=False)
    return folder


def read_checkpoint_config(folder: str | Path) -> dict[str, Any]:
    """Read and validate ``sst_config.json``; missing files are a :class:`UsageError` naming them."""
    folder = Path(folder)
    missing = [name for name in (CONFIG_FILE, STATE_FILE) if not (folder / name).is_file()]
    if missing:
        raise UsageError(f"{folder} is not an SST checkpoint: missing {', '.join(missing)} (give a training run's "
                         "best/ folder, or a named checkpoint: demo-codeact, demo-codeact-baseline)")
    try:
        meta = json.loads((folder / CONFIG_FILE).read_text())
    except json.JSONDecodeError as err:
        raise UsageError(f"{folder / CONFIG_FILE} is not valid JSON ({err.msg})") from err
    for key in ("sst", "num_layers", "hidden_size"):
        if key not in meta:
            raise UsageError(f"{folder / CONFIG_FILE} lacks the key {key!r}")
    return meta


@contextlib.contextmanager
def quiet_tied_adapter_warning() -> Iterator[None]:
    """Silence peft's warnings that an adapter on a tied ``lm_head`` "can lead to complications" when merging.

    Training applies the head's LoRA update to the tied input embedding as well
    (:func:`sst_interp.train.modeling.tie_head_adapter_to_embeddings`), so the trained function is exactly the
    merged one, tied weight and all: the warning's concern does not apply to these checkpoints.

    Every call into peft goes through here, so this also silences the one deprecation peft itself triggers:
    ``PeftModel.__init__`` reads ``model.is_gradient_checkpointing``, which transformers renamed to
    ``is_activation_checkpointing`` (a FutureWarning from peft's line, not ours; this package uses the new name).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def load_checkpoint(backbone, folder: str | Path) -> SSTModel:
    """Build an SST on ``backbone`` from a checkpoint folder (and apply its PEFT adapter if present).

    Raises:
        UsageError: missing files, or a checkpoint made for a backbone with another layer count or hidden size.
    """
    folder = Path(folder)
    meta = read_checkpoint_config(folder)
    adapter_dir = folder / ADAPTER_DIR
    if adapter_dir.is_dir():
        with quiet_tied_adapter_warning():
            backbone = PeftModel.from_pretrained(backbone, str(adapter_dir)).merge_and_unload()
    sst = SSTModel.from_backbone(backbone, SSTConfig.from_dict(meta["sst"]))
    if (sst.num_layers, sst.hidden_size) != (meta["num_layers"], meta["hidden_size"]):
        raise UsageError(
            f"checkpoint {folder} was made for a backbone with {meta['num_layers']} layers and hidden size "
            f"{meta['hidden_size']}, but this backbone has {sst.num_layers} layers and hidden size {sst.hidden_size}; "
            f"load it with the backbone it was trained on ({meta.get('backbone', 'unknown')})"
        )
    apply_state(sst, load_file(str(folder / STATE_FILE)), source=str(folder))
    return sst


def apply_state(sst: SSTModel, tensors: dict[str, torch.Tensor], source: str = "checkpoint") -> None:
    """Copy ``layers.{i}.theta`` / ``layers.{i}.state_norm_weight`` tensors into the model's SST parameters."""
    modules = sst.state_modules()
    expected = {f"layers.{i}.{name}" for i in modules for name in ("theta", "state_norm_weight")}
    if set(tensors) != expected:
        missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise UsageError(f"{source} does not match the model's state layers (missing {missing[:4]}, "
                         f"unexpected {unexpected[:4]})")
    with torch.no_grad():
        for index, module in modules.items():
            for name in ("theta", "state_norm_weight"):
                value = tensors[f"layers.{index}.{name}"]
                target = getattr(module, name)
                if value.shape != target.shape:
                    raise UsageError(f"{source}: layers.{index}.{name} has shape {tuple(value.shape)}, "
                                     f"the model needs {tuple(target.shape)}")
                target.copy_(value.to(target.device, torch.float32))

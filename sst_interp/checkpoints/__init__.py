"""Checkpoints shipped inside the package, addressable by name wherever a checkpoint folder is accepted.

``--checkpoint demo-codeact`` is the CodeACT demo SST trained by this project on GSM8K traces built from the
calculator annotations of GSM8K's training split (``python -m sst_interp.train.codeact_data``);
``--checkpoint demo-codeact-baseline`` is its matched one-pass baseline (sec:baseline_ft), trained on the same
traces, order and steps. Each folder holds the weights, the training logs (``train_log.csv``, and ``alpha_log.csv``
for the SST) and ``TRAINING.md`` with the exact commands that made it, so ``report --training-log demo-codeact``
works too.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from sst_interp.kernels.errors import UsageError

#: name -> folder under ``sst_interp/checkpoints`` (each folder's TRAINING.md says what it is).
NAMED_CHECKPOINTS: dict[str, str] = {
    "demo-codeact": "demo_codeact",
    "demo-codeact-baseline": "demo_codeact_baseline",
    "hops-sst": "hops_sst",
    "hops-sst-baseline": "hops_sst_baseline",
}

#: name -> folder under ``sst_interp/checkpoints`` of a whole model (a Hugging Face folder ``--model`` accepts).
#: ``hops-organism`` is the looped model organism trained on the hops task (docs/organism.md; its TRAINING.md);
#: ``hops-sst-backbone`` the one-pass backbone of the SST organism, whose checkpoints are ``hops-sst`` (the SST,
#: two-pass) and ``hops-sst-baseline`` (its matched baseline); ``hops-overthink`` the looped organism that overthinks
#: by construction (counted hops, trained at each question's sufficient depth only). Each folder's ``organism.json``
#: declares the task spec it was trained on, which ``record --questions hops`` asks by default.
NAMED_MODELS: dict[str, str] = {
    "hops-organism": "hops_organism",
    "hops-sst-backbone": "hops_sst_backbone",
    "hops-overthink": "hops_overthink",
}

#: The checkpoint ``record --protocol codeact`` uses when neither --checkpoint nor --model is given.
DEFAULT_CODEACT_CHECKPOINT = "demo-codeact"


def named_checkpoint_folder(name: str) -> Path:
    """The installed folder of a named checkpoint or named model.

    Raises:
        UsageError: ``name`` is neither, or its files are missing from this installation.
    """
    folders = {**NAMED_CHECKPOINTS, **NAMED_MODELS}
    if name not in folders:
        raise UsageError(f"unknown checkpoint name {name!r}; named checkpoints are {', '.join(folders)}, "
                         "or pass a checkpoint folder")
    folder = Path(str(resources.files(__name__) / folders[name]))
    if not folder.is_dir():
        raise UsageError(f"the named checkpoint {name!r} is not in this installation ({folder} is missing); "
                         "reinstall the package with its data (pip install -e .)")
    return folder


def resolve_checkpoint(value: str | Path | None) -> str | None:
    """A checkpoint argument as a folder path: a name of :data:`NAMED_CHECKPOINTS` becomes its installed folder;
    anything else (a path, or None) is returned unchanged. An existing local folder of the same name wins over the
    packaged one, so a user's own ``./demo-codeact`` folder is never shadowed."""
    if value is None:
        return None
    text = str(value)
    if text in NAMED_CHECKPOINTS and not Path(text).exists():
        return str(named_checkpoint_folder(text))
    return text


def resolve_model(value: str | None) -> str | None:
    """A ``--model`` argument as a folder path: a name of :data:`NAMED_MODELS` becomes its installed folder;
    anything else is returned unchanged (a local folder of the same name wins, as for checkpoints)."""
    if value is not None and value in NAMED_MODELS and not Path(value).exists():
        return str(named_checkpoint_folder(value))
    return value

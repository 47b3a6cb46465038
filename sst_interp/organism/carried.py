"""The task an organism carries: the hops spec it was trained on, read from its folder's ``organism.json``, so that
``--questions hops`` asks an organism the questions it was trained for without flags.

``organism.json`` (written by :func:`sst_interp.organism.train.train_looped`) keeps ``task``: the
:class:`~sst_interp.organism.task.HopsSpec` of training as a dict. The SST organism's checkpoints (``hops-sst``,
``hops-sst-baseline``) were trained on their backbone's spec, so the backbone folder (``--model``) is where it is
read for them too.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from sst_interp.kernels.errors import UsageError
from sst_interp.organism.task import HopsSpec, as_flag

#: The file of an organism folder that records its family, task spec, shape and training settings.
ORGANISM_FILE = "organism.json"
#: The question source whose spec an organism carries.
HOPS_SOURCE = "hops"


def trained_spec(folder: str | Path | None) -> HopsSpec | None:
    """The hops spec the organism in ``folder`` was trained on; None when ``folder`` is not an organism folder (no
    ``organism.json``: a pretrained model, a hub id, a GGUF file, or nothing).

    Raises:
        UsageError: ``organism.json`` is there but unreadable, or its task is not a hops spec.
    """
    if folder is None or not (Path(folder) / ORGANISM_FILE).is_file():
        return None
    path = Path(folder) / ORGANISM_FILE
    try:
        task = json.loads(path.read_text())["task"]
        known = {f.name for f in fields(HopsSpec)}
        unknown = sorted(set(task) - known)
        if unknown:
            raise UsageError(f"{path}: its task has fields {unknown} a hops spec does not know; the organism was "
                             "trained by a newer version of sst-interp")
        return HopsSpec(**task)
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not a readable organism file ({exc}); retrain the organism or remove the "
                         "file") from exc


def task_source_options(questions: str, model: str | Path | None,
                        given: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The question loader's options for ``questions`` asked of ``model``: an organism's trained spec, under the
    options ``given`` explicitly; and a note when a given option differs from the training spec (else None).

    Anything but the hops source, or a model that is not an organism folder, keeps ``given`` as it is.

    Returns:
        (the options, the note: one line naming each differing field with the given and the trained value).
    """
    spec = trained_spec(model) if questions == HOPS_SOURCE else None
    if spec is None:
        return dict(given), None
    trained = asdict(spec)

    def same(key: str) -> bool:
        if isinstance(trained[key], bool):
            return as_flag(given[key], key) == trained[key]
        return str(given[key]) == str(trained[key])

    differing = [f"{key}={given[key]} (trained: {trained[key]})" for key in trained if key in given and not same(key)]
    note = None
    if differing:
        note = (f"note: --source-option {', '.join(differing)} differs from the spec {Path(model).name} was trained "
                "on; its answers are measured out of its training distribution")
    return {**trained, **given}, note

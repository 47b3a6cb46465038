"""A dictionary's sidecar: what it was trained on, beside SAELens' own files, and the checks a folder passes before
it is loaded.

A dictionary folder holds SAELens' inference files, unchanged (``cfg.json``, ``sae_weights.safetensors``: it loads
with ``SAE.load_from_disk(folder)``), and :data:`SIDECAR`, this package's JSON: the run (path and identity hash),
the site (depth, layer, its module name, iterations), the width, the layout, the architecture, the states it was
trained on (tokens per iteration, questions, samples), the seed and the held-out fraction, and the sha256 of both
SAELens files, so that a damaged or replaced file is refused by name instead of loading wrong weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sst_interp.kernels.errors import UsageError

#: The sidecar's file name, and the ``format`` it declares.
SIDECAR = "sst_interp_dictionary.json"
FORMAT = "sst_interp.dictionary"
FORMAT_VERSION = 1
#: SAELens' inference files (sae_lens.constants SAE_CFG_FILENAME, SAE_WEIGHTS_FILENAME), hashed in the sidecar.
SAE_FILES = ("cfg.json", "sae_weights.safetensors")
#: The folder name of iteration i's dictionary in a per-iteration set.
ITERATION_FOLDER = "iteration-{}"


@dataclass(frozen=True)
class DictionaryMeta:
    """The sidecar of one dictionary (module docstring).

    Args:
        layout: ``per-iteration`` (this dictionary covers one iteration) or ``shared`` (every iteration listed).
        architecture: ``topk``, ``batchtopk`` or ``jumprelu`` (the training architecture; SAELens saves BatchTopK
            as JumpReLU).
        run: the training run's path, as given.
        run_identity: sha256 of the run's identity (:func:`~sst_interp.features.sites.run_identity`).
        model: the run's family, model and checkpoint sha256 (:func:`~sst_interp.features.sites.run_model`).
        depth: the run depth the states were read at.
        layer: the recorded layer of the site.
        layer_name: the module behind it in a family run (``loop.layers``), None for an SST run.
        iterations: the iterations covered.
        d_in: the state width.
        width: the number of features.
        k: the sparsity asked for (active features per state).
        tokens: per iteration (a string key), the distinct states trained on.
        questions: the training questions (the run's questions less the held-out ones).
        samples: states the training stepped through (steps x batch size; several passes when the run is small).
        holdout: the fraction of the run's questions held out of training.
        seed: the seed of the weights, the held-out choice and the shuffling.
        training: the optimiser settings (steps, batch size, lr, the architecture's coefficients, device).
        files: sha256 of each SAELens file.
        versions: sae_lens and sst_interp versions.
        source: a dictionary trained on a live model (``train --live``): the model folder, its checkpoint's
            sha256, whether its initial weights were used, the task spec, the split, the prompts, the depth, the
            states per iteration, the seed, and whether each state's dimensions were permuted; empty for a run.
    """

    layout: str
    architecture: str
    run: str
    run_identity: str
    model: dict[str, Any]
    depth: int
    layer: int
    layer_name: str | None
    iterations: tuple[int, ...]
    d_in: int
    width: int
    k: int
    tokens: dict[str, int]
    questions: int
    samples: int
    holdout: float
    seed: int
    training: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The sidecar's text (with ``format`` and ``format_version``)."""
        data = {"format": FORMAT, "format_version": FORMAT_VERSION, **asdict(self)}
        data["iterations"] = list(self.iterations)
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: Path) -> DictionaryMeta:
        """Parse a sidecar's JSON object; UsageError naming ``where`` for another format or a missing key."""
        if data.get("format") != FORMAT or data.get("format_version") != FORMAT_VERSION:
            raise UsageError(f"{where} is not a dictionary sidecar of this version (format {data.get('format')!r} "
                             f"version {data.get('format_version')!r}; expected {FORMAT!r} {FORMAT_VERSION}); "
                             f"retrain with python -m sst_interp.features train")
        names = [f.name for f in fields(cls) if f.name in data or f.name != "source"]  # older sidecars lack source
        missing = [name for name in names if name not in data]
        if missing:
            raise UsageError(f"{where} lacks {', '.join(missing)}: a damaged sidecar; retrain the dictionary")
        values = {name: data[name] for name in names}
        values["iterations"] = tuple(int(i) for i in values["iterations"])
        return cls(**values)


def sha256(target: Path) -> str:
    """The sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(target, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_dictionary(folder: Path) -> bool:
    """Whether ``folder`` holds a dictionary's sidecar (what a per-iteration set's subfolders are told apart by)."""
    return (Path(folder) / SIDECAR).is_file()


def read_meta(folder: str | Path) -> DictionaryMeta:
    """The sidecar of the dictionary in ``folder``, after checking the folder: it exists, holds the sidecar and both
    SAELens files, and their bytes match the sha256 the sidecar records. UsageError (one line) otherwise."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"no dictionary folder at {folder}; pass the --out of python -m sst_interp.features train")
    target = folder / SIDECAR
    if not target.is_file():
        held = "it is empty" if not any(folder.iterdir()) else f"no {SIDECAR}"
        raise UsageError(f"{folder} holds no dictionary ({held}); pass the --out of python -m sst_interp.features "
                         f"train (a per-iteration set holds iteration-N/ folders)")
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise UsageError(f"{target} is damaged (not JSON: {' '.join(str(err).split())}); retrain the "
                         f"dictionary") from err
    if not isinstance(data, dict):
        raise UsageError(f"{target} is damaged (not a JSON object); retrain the dictionary")
    meta = DictionaryMeta.from_dict(data, target)
    for name in SAE_FILES:
        if not (folder / name).is_file():
            raise UsageError(f"{folder} lacks SAELens' {name}: a damaged dictionary; retrain it")
        if meta.files.get(name) != sha256(folder / name):
            raise UsageError(f"{folder / name} differs from the sha256 its sidecar records (damaged or replaced); "
                             f"retrain the dictionary")
    return meta

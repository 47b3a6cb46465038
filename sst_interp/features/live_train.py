"""Training dictionaries on a live organism at every prompt position (``python -m sst_interp.features train --live
hops-organism``), and :func:`train_any`, the command's choice between a run and a live model.

The organism folder (``organism.json``: its task spec and shape) says what its training distribution is: the
prompts of ``--questions`` items of the task's ``--split`` (:func:`~sst_interp.organism.task.split_items`), run at
``--depth`` (default: the depth it was trained to). ``--untrained`` builds the organism's shape under ``--seed``
instead of loading its weights (the initial weights, before training; the factored embedding the trainer installs is
left out: it is a reparametrisation of the same random table), and ``--shuffle-dims`` permutes each state's
dimensions: the two controls without a mechanism. The sidecar's ``source`` records the model, its checkpoint's
sha256, the task spec, the split, the prompts, the depth, the states per iteration and the seed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from sst_interp.checkpoints import resolve_model
from sst_interp.features.live import LiveBatches
from sst_interp.features.meta import ITERATION_FOLDER, DictionaryMeta, sha256
from sst_interp.features.options import TrainOptions
from sst_interp.features.train import Trained, check_options, fit, train_dictionaries, training_settings, write
from sst_interp.kernels.errors import UsageError
from sst_interp.model.devices import check_device
from sst_interp.model.loop_model import LoopModel, load_loop_backbone
from sst_interp.model.loops import native_loop
from sst_interp.organism.carried import ORGANISM_FILE
from sst_interp.organism.config import LoopedShape
from sst_interp.organism.looped import encode_prompts
from sst_interp.organism.task import SPLITS, HopsSpec, split_items
from sst_interp.organism.tokenizer import hops_tokenizer


def train_any(options: TrainOptions) -> list[Trained]:
    """:func:`train_live` with ``--live``, else :func:`~sst_interp.features.train.train_dictionaries` on the run."""
    return train_live(options) if options.live is not None else train_dictionaries(options)


def load_organism(name: str, untrained: bool = False, seed: int = 0, device: str = "cpu"
                  ) -> tuple[LoopModel, HopsSpec, dict[str, Any]]:
    """The organism in folder (or named model) ``name`` as a LoopModel in eval mode, its task spec, and its
    ``organism.json``; ``untrained``: its shape built under ``seed`` instead of its weights. UsageError (one line)
    for a folder that is not an organism's."""
    folder = Path(resolve_model(name) or name)
    if not (folder / ORGANISM_FILE).is_file():
        raise UsageError(f"--live {name} is not an organism folder (no {ORGANISM_FILE}); pass the folder `python -m "
                         f"sst_interp.organism train` wrote, or hops-organism")
    organism = json.loads((folder / ORGANISM_FILE).read_text())
    loop = native_loop(organism.get("family", "hrm_text"))
    if loop is None or organism.get("family", "hrm_text") != "hrm_text":
        raise UsageError(f"--live {name} is a {organism.get('family')!r} organism; live training runs the looped "
                         f"(hrm_text) organisms")
    if untrained:
        torch.manual_seed(seed)
        backbone = LoopedShape(**organism["shape"]).build()
    else:
        backbone, _ = load_loop_backbone(str(folder), loop, device=device)
    return LoopModel(backbone.to(device).eval(), loop), HopsSpec(**organism["task"]), organism


def checkpoint_sha256(name: str) -> str | None:
    """The sha256 of the organism folder's ``model.safetensors`` (None when it has none)."""
    target = Path(resolve_model(name) or name) / "model.safetensors"
    return sha256(target) if target.is_file() else None


def train_live(options: TrainOptions) -> list[Trained]:
    """Train the dictionaries ``options`` asks for on the live organism ``options.live`` (module docstring). Bad
    input is refused before the first step, so a refusal writes nothing."""
    check_options(options)
    assert options.live is not None
    if options.split not in SPLITS:
        raise UsageError(f"--split must be one of {', '.join(SPLITS)}, got {options.split!r}")
    if options.questions < 1:
        raise UsageError(f"--questions must be >= 1, got {options.questions}")
    if options.out is None:
        raise UsageError("--live needs --out (there is no run folder to write under)")
    out = options.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} already exists and is not empty; pass another --out or remove it")
    device = check_device(options.device)
    model, spec, organism = load_organism(options.live, options.untrained, options.seed, device)
    depth = int(options.depth or organism["shape"]["max_depth"])
    if not 0 <= options.layer < model.num_layers:
        raise UsageError(f"the organism records layers 0-{model.num_layers - 1} ({', '.join(model.layer_names)}); "
                         f"there is no layer {options.layer}")
    iterations = tuple(sorted(set(options.iterations or range(1, depth + 1))))
    if iterations[0] < 1 or iterations[-1] > depth:
        raise UsageError(f"--iterations must lie in 1-{depth} (the organism runs --depth {depth})")
    if options.layout == "shared" and len(iterations) < 2:
        raise UsageError("a shared dictionary spans the iterations of a loop: list two or more --iterations, or use "
                         "--layout per-iteration")
    prompts = encode_prompts(hops_tokenizer(), split_items(spec, options.split, options.questions))
    source = {"model": options.live, "checkpoint_sha256": None if options.untrained else checkpoint_sha256(
        options.live), "untrained": options.untrained, "task": asdict(spec), "split": options.split,
              "questions": len(prompts), "positions": int(prompts.shape[1]), "depth": depth,
              "shuffle_dims": options.shuffle_dims, "seed": options.seed}
    identity = hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()
    groups = [iterations] if options.layout == "shared" else [(i,) for i in iterations]
    width = options.width or 8 * model.hidden_size
    trained = []
    for number, group in enumerate(groups, 1):
        target = out if options.layout == "shared" else out / ITERATION_FOLDER.format(group[0])
        print(f"dictionary {number} of {len(groups)}: {options.live} live, layer {options.layer} "
              f"({model.layer_names[options.layer]}), iterations {list(group)}", flush=True)
        batches = LiveBatches(model, prompts, depth, options.layer, group, options.batch_size, options.buffer,
                              options.seed, shuffle_dims=options.shuffle_dims)
        sae, samples = fit(options, model.hidden_size, width, batches, device)
        tokens = {str(i): int(batches.tokens[i]) for i in group}
        meta = DictionaryMeta(
            layout=options.layout, architecture=options.architecture, run=f"live:{options.live}",
            run_identity=identity, model={"family": "hrm_text", "model": options.live,
                                          "checkpoint_sha256": source["checkpoint_sha256"]},
            depth=depth, layer=options.layer, layer_name=model.layer_names[options.layer], iterations=group,
            d_in=model.hidden_size, width=width, k=options.k, tokens=tokens, questions=len(prompts), samples=samples,
            holdout=0.0, seed=options.seed, training=training_settings(options, device, batches.epochs),
            versions={"sae_lens": version("sae-lens"), "sst_interp": version("sst-interp")},
            source={**source, "tokens": tokens})
        trained.append(write(sae, meta, target))
    return trained

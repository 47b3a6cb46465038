"""Training dictionaries on a recorded run's states (``python -m sst_interp.features train``).

The two layouts:

- ``per-iteration``: one dictionary per iteration of the site, each trained on that iteration's states alone,
  written to ``OUT/iteration-N/``;
- ``shared``: one dictionary trained on the states of every iteration of a looped site, pooled, written to ``OUT``.
  The same encoder and decoder read every iteration's state, so feature f is one direction at every iteration and
  "feature f at iteration i" can be followed through the loop. That is exactly a SAELens SAE trained on the pooled
  states, plus the sidecar saying which iterations it covers: SAELens lacks no piece of it, so no class is written
  here. (An iteration crosscoder, one latent read from all iterations' states at once, is the other layout the issue
  names; it needs a class SAELens does not have and is left for later.)

Every dictionary is SAELens' training SAE (:mod:`~sst_interp.features.architectures`) fitted by its ``SAETrainer``
on :class:`~sst_interp.features.batches.StateBatches`, saved with ``save_inference_model`` (so
``SAE.load_from_disk(folder)`` loads it unchanged) and given its sidecar (:mod:`~sst_interp.features.meta`). A
dictionary is written to a temporary sibling and renamed into place, so a folder holds a whole dictionary or none;
an ``--out`` that already holds anything is refused before training starts.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from importlib.metadata import version
from pathlib import Path

import torch
from sae_lens.saes import TrainingSAE
from sae_lens.training.sae_trainer import SAETrainer

from sst_interp.features.architectures import trainer_config, training_sae
from sst_interp.features.batches import StateBatches
from sst_interp.features.meta import ITERATION_FOLDER, SAE_FILES, SIDECAR, DictionaryMeta, sha256
from sst_interp.features.options import TrainOptions
from sst_interp.features.sites import StateSite, resolve_site, run_identity, run_model
from sst_interp.features.states import Split, held_out
from sst_interp.kernels.errors import UsageError
from sst_interp.model.devices import check_device
from sst_interp.store import Run


@dataclass(frozen=True)
class Trained:
    """One dictionary written: its folder and sidecar."""

    path: Path
    meta: DictionaryMeta


def default_out(options: TrainOptions) -> Path:
    """``<run>/features/layer<L>-<layout>-<architecture>``."""
    return options.run / "features" / f"layer{options.layer}-{options.layout}-{options.architecture}"


def check_options(options: TrainOptions) -> None:
    """Refuse settings that cannot train (UsageError, one line)."""
    if options.k < 1 or options.steps < 1 or options.batch_size < 1:
        raise UsageError(f"--k, --steps and --batch-size must be >= 1, got {options.k}, {options.steps} and "
                         f"{options.batch_size}")
    if options.width is not None and options.width <= options.k:
        raise UsageError(f"--width ({options.width}) must exceed --k ({options.k})")
    if not 0.0 <= options.holdout < 1.0:
        raise UsageError(f"--holdout is a fraction in [0, 1), got {options.holdout}")
    if options.lr <= 0:
        raise UsageError(f"--lr must be > 0, got {options.lr}")


def train_dictionaries(options: TrainOptions) -> list[Trained]:
    """Train the dictionaries ``options`` asks for (module docstring) and write them; returns what was written.

    Everything a bad input can be refused for (the run, the site, the settings, an ``--out`` in use) is checked
    before the first step, so a refusal writes nothing.
    """
    check_options(options)
    if (options.run is None) == (options.live is None):
        raise UsageError("pass exactly one of --run (a recorded run) and --live (an organism folder or "
                         "hops-organism)")
    if options.live is not None:
        raise UsageError("--live training is sst_interp.features.live_train.train_live (train_any picks it)")
    if options.untrained or options.shuffle_dims:
        raise UsageError("--untrained and --shuffle-dims are controls of --live training; drop them with --run")
    run = Run.open(options.run)
    site = resolve_site(run, options.layer, options.iterations, options.depth, shared=options.layout == "shared")
    out = options.out or default_out(options)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} already exists and is not empty; pass another --out or remove it")
    device = check_device(options.device)
    groups = [site.iterations] if options.layout == "shared" else [(i,) for i in site.iterations]
    questions = sum(not held_out(q, options.holdout, options.seed) for q in run.question_ids(site.depth))
    trained = []
    for number, iterations in enumerate(groups, 1):
        target = out if options.layout == "shared" else out / ITERATION_FOLDER.format(iterations[0])
        which = "iterations " + ", ".join(map(str, iterations)) if len(iterations) > 1 else f"iteration {iterations[0]}"
        print(f"dictionary {number} of {len(groups)}: layer {site.layer}, {which}", flush=True)
        trained.append(_train_one(run, site, iterations, options, target, device, questions))
    return trained


def _train_one(run: Run, site: StateSite, iterations: tuple[int, ...], options: TrainOptions, target: Path,
               device: str, questions: int) -> Trained:
    """Fit one dictionary on ``iterations`` of ``site`` and write it to ``target`` (whole or not at all)."""
    width = options.width or 8 * run.hidden_size
    batches = StateBatches(run, site, iterations, Split("train", options.holdout, options.seed), options.batch_size,
                           options.buffer, options.seed)
    sae, samples = fit(options, run.hidden_size, width, batches, device)
    if batches.epochs == 0:  # training ended inside the first pass: the distinct states are those read so far
        print(f"  note: {options.steps} steps read only part of the training states once", flush=True)
    meta = DictionaryMeta(
        layout=options.layout, architecture=options.architecture, run=str(options.run), run_identity=run_identity(run),
        model=run_model(run), depth=site.depth, layer=site.layer, layer_name=site.layer_name,
        iterations=tuple(iterations), d_in=run.hidden_size, width=width, k=options.k,
        tokens={str(i): int(batches.tokens[i]) for i in iterations}, questions=int(questions),
        samples=samples, holdout=options.holdout, seed=options.seed,
        training=training_settings(options, device, batches.epochs),
        versions={"sae_lens": version("sae-lens"), "sst_interp": version("sst-interp")})
    return write(sae, meta, target)


def fit(options: TrainOptions, d_in: int, width: int, batches: object, device: str) -> tuple[TrainingSAE, int]:
    """SAELens' trainer on ``batches`` (an endless iterator of [batch_size, d_in] tensors): the trained SAE and the
    samples it stepped through."""
    torch.manual_seed(options.seed)
    sae = training_sae(options.architecture, d_in, width, options.k, options.l0_coefficient, device)
    trainer = SAETrainer(trainer_config(options.steps, options.batch_size, options.lr, device), sae, batches)
    return trainer.fit(), int(trainer.n_training_samples)


def training_settings(options: TrainOptions, device: str, epochs: int) -> dict[str, object]:
    """The sidecar's ``training``: the optimiser settings."""
    return {"steps": options.steps, "batch_size": options.batch_size, "lr": options.lr, "lr_end": options.lr / 10,
            "l0_coefficient": options.l0_coefficient, "buffer": options.buffer, "device": device, "epochs": epochs}


def write(sae: TrainingSAE, meta: DictionaryMeta, target: Path) -> Trained:
    """SAELens' inference files and the sidecar into a temporary sibling of ``target``, renamed into place."""
    staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        sae.save_inference_model(staging)
        files = {name: sha256(staging / name) for name in SAE_FILES}
        meta = replace(meta, files=files)
        (staging / SIDECAR).write_text(meta.to_json(), encoding="utf-8")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.rmdir()  # the empty --out itself (a non-empty one was refused before training)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Trained(target, meta)

"""Training the looped organism from scratch on the hops task, on the CPU, at a loop count sampled per batch.

``train_looped(config)`` writes a Hugging Face folder that ``record --model`` reads as an HRM-Text family model:
``config.json`` and ``model.safetensors`` (transformers' own ``save_pretrained``), the organism tokenizer,
``organism.json`` (the task spec, the shape and this config), ``train_log.csv`` (one row per step: depth, loss,
seconds) and ``depth_by_hop.csv`` (exact-match counts on the test split at every depth, from
:func:`~sst_interp.organism.looped.depth_by_hop`). Every ``checkpoint_every`` steps the model, optimiser and RNG
states go to ``training_state.pt``; rerunning the same command resumes from it, and a different config in an
existing folder is refused.
"""

from __future__ import annotations

import csv
import json
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch

from sst_interp.checkpoints import resolve_model
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.progress import progress
from sst_interp.organism.carried import ORGANISM_FILE
from sst_interp.organism.config import LoopedTrainConfig
from sst_interp.organism.embedding import bake_factored_embeddings, factor_embeddings
from sst_interp.organism.looped import answer_loss, depth_by_hop, encode_training, set_depth, training_text
from sst_interp.organism.tables import DepthByHop, format_table, read_table, write_table
from sst_interp.organism.task import (HopsSpec, counted_follow_ups, counted_training_item,
                                      follow_up_queries, hops_at_depth, split_items, training_item)
from sst_interp.organism.tokenizer import hops_tokenizer

__all__ = ["check_out_folder", "format_table", "read_table", "train_looped", "write_table"]

STATE_FILE = "training_state.pt"
LOG_FILE = "train_log.csv"
TABLE_FILE = "depth_by_hop.csv"
LOG_COLUMNS = ("step", "depth", "hop_ceiling", "loss", "accuracy", "seconds")
# the running accuracy that drives the curriculum: an exponential average over about 20 deepest-depth batches
_RUNNING_WEIGHT = 0.05


def resumable_folder(out: Path, marker: str, recorded: dict[str, object], what: str, model: str) -> bool:
    """Whether ``out`` holds the interrupted or finished run whose ``marker`` file records the settings
    ``recorded`` (True: resume or keep it; False: a new or empty folder).

    Raises UsageError when ``out`` is a file, or a folder holding anything else: ``model`` (a folder with a
    config.json: these organisms train from scratch), other files, or ``what`` trained with other settings.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder")
    if not out.is_dir() or not any(out.iterdir()):
        return False
    if not (out / marker).is_file():
        found = model if (out / "config.json").is_file() else "other files"
        raise UsageError(f"--out {out} holds {found}; the {what} trains from scratch into a new or empty folder")
    kept = json.loads((out / marker).read_text())["train"]
    if kept != recorded:
        changed = sorted(key for key in set(kept) | set(recorded) if kept.get(key) != recorded.get(key))
        raise UsageError(f"--out {out} holds an {what} trained with other settings ({', '.join(changed)}); give a "
                         "new folder or the same flags")
    return True


def check_out_folder(config: LoopedTrainConfig) -> bool:
    """:func:`resumable_folder` for the looped organism (its marker: ``organism.json``)."""
    return resumable_folder(config.out, ORGANISM_FILE, config.recorded(), "organism", "a pretrained model")


def _learning_rate(config: LoopedTrainConfig, step: int) -> float:
    return config.learning_rate * min(1.0, (step + 1) / config.warmup_steps)


def _batch(config: LoopedTrainConfig, spec: HopsSpec, step: int, ceiling: int, depth_rng: random.Random,
           max_depth: int) -> tuple[list[str], int]:
    """One step's training texts and its loop count.

    The plain task draws the loop count uniformly from 1..max_depth and asks every hop count up to the ceiling at it.
    Counted hops draw a depth among those the ceiling's hop counts need and ask only the hop counts whose sufficient
    depth it is (queries and follow-ups alike), so no question is ever trained deeper than it needs.
    """
    if spec.counted:
        depth = depth_rng.randint(1, spec.depth_of(ceiling))
        hops = hops_at_depth(spec, depth, ceiling)
        questions = [counted_training_item(spec, step * config.batch_size + j, depth, ceiling)
                     for j in range(config.batch_size)]
        follow = [counted_follow_ups(q, depth_rng, config.follow_ups, hops) for q in questions]
    else:
        questions = [training_item(spec, step * config.batch_size + j, ceiling) for j in range(config.batch_size)]
        follow = [follow_up_queries(q, depth_rng, config.follow_ups, ceiling) for q in questions]
        depth = depth_rng.randint(1, max_depth)
    return [training_text(q, f) for q, f in zip(questions, follow)], depth


def _deepest(spec: HopsSpec, ceiling: int, max_depth: int) -> int:
    """The loop count whose batches drive the curriculum: the deepest one in use."""
    return spec.depth_of(ceiling) if spec.counted else max_depth


def initial_weights(config: LoopedTrainConfig, model: torch.nn.Module) -> None:
    """Load ``--init``'s weights into ``model`` (a no-op without it); an organism of another shape or family, or a
    folder holding no organism, is a UsageError."""
    if config.init is None:
        return
    folder = Path(resolve_model(config.init))
    if not (folder / ORGANISM_FILE).is_file() or not (folder / "model.safetensors").is_file():
        raise UsageError(f"--init {config.init}: not an organism folder (no {ORGANISM_FILE} and model.safetensors); "
                         "give a folder python -m sst_interp.organism train wrote, or hops-organism")
    family = json.loads((folder / ORGANISM_FILE).read_text()).get("family", "hrm_text")
    mine = model.state_dict()
    weights = type(model).from_pretrained(folder, dtype=torch.float32).state_dict() if family == config.family else {}
    # every tensor must match: a run that silently kept some random tensors would not be the organism it names
    if set(weights) != set(mine) or any(weights[k].shape != mine[k].shape for k in mine):
        raise UsageError(f"--init {config.init} is a {family} organism of another shape; give one trained with the "
                         f"same --family and --hidden-size")
    model.load_state_dict(weights)


def train_looped(config: LoopedTrainConfig) -> DepthByHop:
    """Train (or resume) the looped organism (or, with ``family="gemma3_text"``, the one-pass backbone of the SST
    organism) into ``config.out``; returns the test depth-by-hop table.

    ``table[depth][hops] = (correct, total)``; also written to ``depth_by_hop.csv``.
    """
    config.check()
    resuming = check_out_folder(config)
    if resuming and (config.out / TABLE_FILE).is_file() and not (config.out / STATE_FILE).is_file():
        return read_table(config.out / TABLE_FILE)  # this run finished before: nothing to do
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    spec, shape, tokenizer = config.spec(), config.shape(), hops_tokenizer()
    torch.manual_seed(config.seed)
    model = shape.build()
    initial_weights(config, model)
    if config.factored_embeddings:
        factor_embeddings(model.get_input_embeddings())
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    depth_rng = random.Random(config.seed)
    start, ceiling, running = 0, config.start_hops if config.curriculum_accuracy < 1 else spec.max_hops, 0.0
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / STATE_FILE
    if resuming and state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        depth_rng.setstate(state["depth_rng"])
        start, ceiling, running = state["step"], state["ceiling"], state["running"]
    if not resuming:
        (out / ORGANISM_FILE).write_text(json.dumps({"family": config.family, "task": asdict(spec),
                                                     "shape": asdict(shape), "train": config.recorded()}, indent=2))
        with open(out / LOG_FILE, "w", newline="") as handle:
            csv.writer(handle).writerow(LOG_COLUMNS)
    model.train()
    began = time.perf_counter()
    with open(out / LOG_FILE, "a", newline="") as handle:
        log = csv.writer(handle)
        for step in progress(range(start, config.steps), initial=start, total=config.steps, desc="organism",
                             unit="step"):
            texts, depth = _batch(config, spec, step, ceiling, depth_rng, shape.max_depth)
            input_ids, labels = encode_training(tokenizer, texts)
            set_depth(model, depth)
            for group in optimiser.param_groups:
                group["lr"] = _learning_rate(config, step)
            loss, accuracy = answer_loss(model, input_ids, labels, with_accuracy=True)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            log.writerow((step + 1, depth, ceiling, f"{loss.item():.6f}", f"{accuracy:.4f}",
                          f"{time.perf_counter() - began:.3f}"))
            if depth == _deepest(spec, ceiling, shape.max_depth):
                running = (1 - _RUNNING_WEIGHT) * running + _RUNNING_WEIGHT * accuracy
                if running >= config.curriculum_accuracy and ceiling < spec.max_hops:
                    ceiling, running = ceiling + 1, 0.0
            if (step + 1) % config.checkpoint_every == 0 and step + 1 < config.steps:
                handle.flush()
                torch.save({"model": model.state_dict(), "optimiser": optimiser.state_dict(),
                            "depth_rng": depth_rng.getstate(), "step": step + 1, "ceiling": ceiling,
                            "running": running}, state_path)
    model.eval()
    bake_factored_embeddings(model.get_input_embeddings())
    table = depth_by_hop(model, tokenizer, split_items(spec, "test", config.test_size), config.table_depths())
    set_depth(model, shape.max_depth)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_table(table, out / TABLE_FILE)
    state_path.unlink(missing_ok=True)
    return table

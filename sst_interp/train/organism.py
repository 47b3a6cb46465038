"""The SST organism: a one-pass backbone trained from scratch on the hops task, turned into an SST by the paper's
two-pass training, and its matched baseline; both tabled by depth and hop count.

``train_sst_organism(config)`` (``python -m sst_interp.organism train-sst --out FOLDER``) fills ``FOLDER`` with:

- ``sst_organism.json``: the task spec and every setting that decides the weights (a resume must match them);
- ``backbone/``: the backbone, a Hugging Face folder with the organism tokenizer, written by the organism trainer
  (:func:`~sst_interp.organism.train.train_looped`, family ``gemma3_text``: a 2-layer Gemma 3, one pass, with the
  looped organism's recipe), its ``train_log.csv`` and its own ``depth_by_hop.csv`` (depth 1);
- ``data/train.jsonl``, ``data/validation.jsonl``: the SST stage's prompt/completion rows (the hops prompt, the
  answer digit), generated from the same task spec (:func:`hops_rows`);
- ``sst/`` and ``baseline/``: two runs of the suite's trainer (:class:`~sst_interp.train.loop.Trainer`) on the
  backbone with the same data, order, optimiser and steps, the second with ``baseline``; each holds ``best/`` (the
  checkpoint ``record --checkpoint`` loads), ``last/``, ``train_log.csv`` and ``summary.json``;
- ``sst_depth_by_hop.csv``, ``baseline_depth_by_hop.csv``: exact-match counts on the test split at each depth,
  run as ``record`` runs a checkpoint (:func:`~sst_interp.model.loading.build_sst`, then
  :func:`~sst_interp.model.generation.generate` with the two-pass prompt mode); the SST's depth is its iteration
  count at the answer position, the baseline has no state stream and answers the same at every depth.

Every stage resumes where it stopped (the backbone from its ``training_state.pt``, each trainer run from its
``last/``), so rerunning the command after an interruption finishes the run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from sst_interp.model.generation import GenerationConfig, generate
from sst_interp.model.loading import ModelSpec, build_sst
from sst_interp.organism.config import SSTOrganismConfig
from sst_interp.organism.tables import DepthByHop, read_table, tally_by_hop, write_table
from sst_interp.organism.task import HopsQuestion, HopsSpec, item, split_items
from sst_interp.organism.tokenizer import PAD_ID
from sst_interp.organism.train import resumable_folder, train_looped
from sst_interp.train.config import TrainConfig
from sst_interp.train.loop import Trainer

MARKER = "sst_organism.json"
BACKBONE_DIR, DATA_DIR, SST_DIR, BASELINE_DIR = "backbone", "data", "sst", "baseline"
TABLES = {"sst": "sst_depth_by_hop.csv", "baseline": "baseline_depth_by_hop.csv"}


def check_out_folder(config: SSTOrganismConfig) -> bool:
    """:func:`~sst_interp.organism.train.resumable_folder` for the SST organism (its marker: ``MARKER``)."""
    return resumable_folder(config.out, MARKER, config.recorded(), "SST organism", "a model")


def hops_rows(questions: Sequence[HopsQuestion]) -> list[dict[str, object]]:
    """The trainer's prompt/completion rows (:mod:`sst_interp.train.data`) of hops questions: the prompt, and its
    answer digit as the completion (the one labelled token); ``hops`` rides along for readers."""
    return [{"prompt": q.prompt, "completion": q.answer, "hops": q.hops} for q in questions]


def write_hops_data(spec: HopsSpec, folder: Path, train_size: int, validation_size: int) -> tuple[Path, Path]:
    """Write ``train.jsonl`` (the train split's first ``train_size`` items, hop counts cycling 1..max) and
    ``validation.jsonl`` (``validation_size`` distinct validation questions) into ``folder``; returns their paths.
    Both are a function of the spec, so a rerun writes the same bytes (the trainer's resume checks their hashes)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "train.jsonl", folder / "validation.jsonl"
    splits = [item(spec, "train", index) for index in range(train_size)], split_items(spec, "validation",
                                                                                       validation_size)
    for path, questions in zip(paths, splits):
        text = "".join(json.dumps(row) + "\n" for row in hops_rows(questions))
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return paths


def stage_config(config: SSTOrganismConfig, baseline: bool) -> TrainConfig:
    """The trainer's config of the SST stage (or, with ``baseline``, of its matched baseline): the paper's settings
    (two passes, unit state scale, alpha bounds and init, LoRA on every projection and the head with alpha = rank,
    dropout 0.05, AdamW, clipping at 1, LoRA warm-up then cosine, early stopping on validation loss), on the CPU in
    float32 without quantisation, with the sizes of ``config``."""
    out = config.out.resolve()
    return TrainConfig(
        train_data=str(out / DATA_DIR / "train.jsonl"),
        val_data=str(out / DATA_DIR / "validation.jsonl"),
        out=str(out / (BASELINE_DIR if baseline else SST_DIR)),
        model=str(out / BACKBONE_DIR),
        baseline=baseline,
        action_tokens={},
        max_seq_len=config.bindings + 4,  # <bos>, the bindings, ?, the variable, the answer
        lora_r=config.lora_r,
        lora_alpha=float(config.lora_r),
        quantize="none",
        lr_lora=config.lr_lora,
        lr_sst=config.lr_sst,
        micro_batch_size=config.sst_batch_size,
        grad_accum=1,
        max_steps=config.sst_steps,
        eval_every=config.eval_every,
        patience=config.patience,
        gradient_checkpointing=False,
        dtype="float32",
        device="cpu",
        seed=config.seed,
        threads=config.threads,
        preset="organism",
    )


def checkpoint_answers(backbone: Path, checkpoint: Path, questions: Sequence[HopsQuestion], depths: Sequence[int],
                       batch_size: int = 256) -> dict[int, list[str]]:
    """``{depth: [answer token per question]}``: a trained checkpoint's (SST or baseline, on ``backbone``) greedy first
    answer token at each depth, generated as ``record`` generates (the two-pass prompt, then ``depth`` passes at the
    answer position)."""

    sst, tokenizer = build_sst(ModelSpec(model=str(backbone), checkpoint=str(checkpoint)))
    sst.eval()
    prompts = [tokenizer(q.prompt)["input_ids"] for q in questions]
    generation = GenerationConfig(max_new_tokens=1, pad_token_id=PAD_ID, prompt_mode="two_pass")
    answers: dict[int, list[str]] = {}
    for depth in depths:
        ids: list[int] = []
        for start in range(0, len(prompts), batch_size):
            result = generate(sst, prompts[start:start + batch_size], depth, generation)
            ids.extend(tokens[0] for tokens in result.token_ids)
        answers[depth] = tokenizer.convert_ids_to_tokens(ids)
    return answers


def checkpoint_depth_by_hop(backbone: Path, checkpoint: Path, questions: Sequence[HopsQuestion],
                            depths: Sequence[int]) -> DepthByHop:
    """``table[depth][hops] = (correct, total)`` of :func:`checkpoint_answers`."""
    answers = checkpoint_answers(backbone, checkpoint, questions, depths)
    return {depth: tally_by_hop(questions, answers[depth]) for depth in depths}


def train_sst_organism(config: SSTOrganismConfig, progress: bool = True) -> dict[str, DepthByHop]:
    """Train (or resume) the backbone, the SST and the baseline into ``config.out``; returns the test depth-by-hop
    tables ``{"backbone": ..., "sst": ..., "baseline": ...}`` (also written there)."""
    config.check()
    resuming = check_out_folder(config)
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    if not resuming:
        (out / MARKER).write_text(json.dumps({"task": asdict(config.spec()), "shape": asdict(config.shape()),
                                              "train": config.recorded()}, indent=2))
    tables = {"backbone": train_looped(config.backbone(out / BACKBONE_DIR))}
    write_hops_data(config.spec(), out / DATA_DIR, config.sst_steps * config.sst_batch_size, config.sst_validation)
    questions = split_items(config.spec(), "test", config.test_size)
    for name, baseline in (("sst", False), ("baseline", True)):
        table_path = out / TABLES[name]
        if table_path.is_file():
            tables[name] = read_table(table_path)
            continue
        _train_stage(stage_config(config, baseline), progress)
        tables[name] = checkpoint_depth_by_hop(out / BACKBONE_DIR, out / (BASELINE_DIR if baseline else SST_DIR) /
                                               "best", questions, range(1, config.max_depth + 1))
        write_table(tables[name], table_path)
    return tables


def _train_stage(train_config: TrainConfig, progress: bool) -> None:
    """One run of the suite's trainer (it resumes from its ``last/`` by itself)."""

    if train_config.threads is not None:
        torch.set_num_threads(train_config.threads)
    Trainer(train_config, progress=progress).run()

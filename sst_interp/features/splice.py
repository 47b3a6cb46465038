"""Spliced-in accuracy and loss: the model rerun with a site's state at one iteration replaced by its reconstruction.

The replacement is the intervention layer's own: a ``map`` rule on the layer's output (``layer_out``: an SST layer's
output, which is the state the next pass reads, or a family visit's) at the site's layer, iteration i and the
positions the dictionary was trained on (the run's full positions), whose function is the dictionary's
``reconstruct`` (:mod:`sst_interp.interventions.spec`; an SST through
:func:`~sst_interp.interventions.apply.intervene`, a natively looping family through
:func:`~sst_interp.interventions.loops.intervene_loop`). The model is the one the run recorded
(:func:`load_run_model`): an SST rebuilt from the run's identity (backbone, checkpoint, state scale, dtype) and
generated with its prompt mode, or the family's folder. The later iterations, layers and positions then run on the
reconstruction. Two references at the same site: ``clean`` (no rule) and ``zero`` (the state zeroed: the rule
``zero``, the usual zero-ablation baseline).

Per condition and iteration, over the scored questions:

- ``accuracy``: the generation graded by the run's own grader (:func:`sst_interp.data.grade`), generated with the
  run's recorded decoding (max new tokens, EOS ids, stop strings);
- ``loss``: the mean negative log-likelihood, at position 0, of the token the clean run generated there (from the
  run's ``generations``): how far the splice moves the model's own first choice (nats).

Greedy generation is deterministic, and batches are the same in every condition, so ``clean`` here is the clean model
under the same batching.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from sst_interp.checkpoints import resolve_model
from sst_interp.data import grade
from sst_interp.data.question import Question, frame_to_questions
from sst_interp.features.dictionary import DictionarySet
from sst_interp.features.sites import StateSite
from sst_interp.interventions import InterventionSpec, Operation, Site
from sst_interp.interventions.apply import intervene
from sst_interp.interventions.loops import FAMILY_STREAM, intervene_loop
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.progress import progress
from sst_interp.model.cache import DEFAULT_BACKBONE_ID, DEFAULT_MODEL
from sst_interp.model.generation import GenerationConfig, generate
from sst_interp.model.loading import CHECKPOINT_STATE_SCALE, ModelSpec, build_sst
from sst_interp.model.loop_model import LoopModel, generate_looped, load_loop_backbone
from sst_interp.model.loops import LOOPS
from sst_interp.model.observers import ObserverGroup
from sst_interp.model.sst import SSTModel
from sst_interp.store import Run

#: The conditions, in the table's order.
CONDITIONS = ("clean", "spliced", "zero")
#: The name the ``map`` rule calls the reconstruction by.
RECONSTRUCT = "reconstruct"
#: The columns of :func:`splice_table`.
SPLICE_COLUMNS = ("iteration", "condition", "questions", "accuracy", "loss")


class _FirstLogits:
    """An observer keeping each row's logits at position 0 (the first forward call that emits a token)."""

    def __init__(self) -> None:
        self.logits: torch.Tensor | None = None

    def on_pass_start(self, info: Any) -> None:
        """Nothing to do."""

    def on_pass_end(self, info: Any, logits: torch.Tensor | None) -> None:
        """Keep the logits of position 0."""
        if info.position == 0 and logits is not None:
            self.logits = logits.detach().float().cpu()

    def on_token(self, position: int, token_ids: torch.Tensor, active: torch.Tensor) -> None:
        """Nothing to do."""


def family_loop(run: Run) -> Any:
    """The loop declaration of a natively looping family's run. UsageError for a family this package has no
    declaration of (a bring-your-own loop)."""
    family = str(run.manifest.get("family", "sst"))
    loop = next((loop for loop in LOOPS if loop.family == family and loop.visit_sites is not None), None)
    if loop is None:
        raise UsageError(f"--splice reruns SSTs and the natively looping families this package declares (HRM-Text, "
                         f"Inkling-2 Loop, Dory); {run.path} is a {family} run: pass --no-splice")
    return loop


def load_run_model(run: Run, model: str | None, device: str) -> tuple[Any, Any]:
    """The model ``run`` was recorded from, and its tokenizer: :func:`load_sst_model` for an SST run, else
    :func:`load_family_model`. UsageError for a CodeACT run (its episodes are not regraded here)."""
    if run.manifest.get("protocol", "completion") != "completion":
        raise UsageError(f"--splice regrades completion runs; {run.path} is a {run.manifest.get('protocol')} run: "
                         f"pass --no-splice")
    if str(run.manifest.get("family", "sst")) == "sst":
        return load_sst_model(run, model, device)
    return load_family_model(run, model, device)


def load_sst_model(run: Run, model: str | None, device: str) -> tuple[SSTModel, Any]:
    """The SST of an SST run, rebuilt from its identity (backbone, checkpoint, state scale, dtype; ``model`` in place
    of the backbone when given), on ``device``, and its tokenizer."""
    identity = run.manifest.get("identity") or {}
    backbone = model or str(identity.get("model", DEFAULT_MODEL))
    scale = identity.get("state_scale")
    spec = ModelSpec(model=DEFAULT_MODEL if backbone == DEFAULT_BACKBONE_ID else backbone,
                     checkpoint=identity.get("checkpoint"),
                     state_scale=None if scale in (None, CHECKPOINT_STATE_SCALE) else str(scale),
                     dtype=str(identity.get("dtype", "float32")), device=device)
    try:
        return build_sst(spec)
    except UsageError as err:
        raise UsageError(f"--splice reruns the SST {run.path} was recorded from, and it does not load here ({err}); "
                         f"pass --model FOLDER (its backbone), or --no-splice") from err


def model_folder(run: Run, model: str | None) -> str:
    """The model to splice into: ``model`` (a folder, or a named model such as ``hops-organism``), else the folder
    the run's identity names. UsageError when neither is a folder."""
    named = model or (run.manifest.get("identity") or {}).get("model")
    folder = resolve_model(named) if named else None
    if folder is None or not Path(folder).is_dir():
        raise UsageError(f"--splice reruns the model, and {named!r} is not a model folder here; pass --model FOLDER "
                         f"(the model {run.path} was recorded from), or --no-splice")
    return str(folder)


def load_family_model(run: Run, model: str | None, device: str) -> tuple[LoopModel, Any]:
    """The natively looping model of a family run (``model``, else the folder its identity names), checked in that
    order (:func:`family_loop`, :func:`model_folder`), and its tokenizer."""
    loop = family_loop(run)
    backbone, tokenizer = load_loop_backbone(model_folder(run, model), loop, device=device)
    return LoopModel(backbone, loop), tokenizer


def scored_questions(run: Run, question_ids: Sequence[str]) -> list[Question]:
    """The questions of ``run`` with these ids, in that order."""
    by_id = {q.question_id: q for q in frame_to_questions(run.questions())}
    return [by_id[q] for q in question_ids]


def clean_tokens(run: Run, depth: int, question_ids: Sequence[str]) -> np.ndarray:
    """[Q] int64: the token each question's clean generation emitted at position 0 at ``depth`` (-1 for none)."""
    gens = run.generations()
    gens = gens[(gens["depth"] == depth) & (gens["turn"] == 0)].set_index("question_id")
    return np.array([int(gens.at[q, "token_ids"][0]) if len(gens.at[q, "token_ids"]) else -1
                     for q in question_ids], dtype=np.int64)


@torch.no_grad()
def splice_table(run: Run, dictionaries: DictionarySet, site: StateSite, question_ids: Sequence[str],
                 model: LoopModel | SSTModel, tokenizer: Any, batch_size: int = 64) -> pd.DataFrame:
    """Accuracy and loss per (iteration, condition) (:data:`SPLICE_COLUMNS`; the clean row once, as iteration 0)
    of ``model`` (an SST or a LoopModel: :func:`load_run_model`) on ``question_ids`` of ``run`` with the state at
    ``site`` spliced (module docstring)."""
    questions = scored_questions(run, question_ids)
    targets = torch.from_numpy(clean_tokens(run, site.depth, question_ids))
    decoding = run.manifest.get("decoding") or {}
    looped = isinstance(model, LoopModel)
    config = GenerationConfig(max_new_tokens=int(decoding.get("max_new_tokens", 1)),
                              eos_token_ids=tuple(int(i) for i in decoding.get("eos_token_ids", ())),
                              stop_strings=tuple(decoding.get("stop_strings", ())),
                              pad_token_id=int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0),
                              # a family's prompt runs through its own forward; an SST's as the run prefilled it
                              **({} if looped else {"prompt_mode": str(run.manifest.get("prompt_mode", "two_pass"))}))
    positions = tuple(range(max(1, int(run.manifest.get("full_positions", 1)))))
    cells = [(0, "clean")] + [(i, c) for i in site.iterations for c in CONDITIONS[1:]]
    rows = []
    bar = progress(total=len(cells) * len(questions), desc="splice", unit="question")
    for iteration, condition in cells:
        spec, functions = InterventionSpec(), {}
        if condition != "clean":
            # layer_out: a family visit's output, and an SST layer's (the state its next pass reads)
            where = Site(FAMILY_STREAM, layers=(site.layer,), iterations=(iteration,), positions=positions)
            operation = Operation("map", function=RECONSTRUCT) if condition == "spliced" else Operation("zero")
            spec = InterventionSpec.of(where, operation)
            functions = {RECONSTRUCT: dictionaries[iteration].reconstruct}
        correct, losses = [], []
        for start in range(0, len(questions), batch_size):
            batch = questions[start:start + batch_size]
            prompts = [list(tokenizer(q.prompt).input_ids) for q in batch]
            keeper = _FirstLogits()
            decode = lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True)  # noqa: E731
            if looped:
                with intervene_loop(model, spec, functions=functions) as intervener:
                    result = generate_looped(model, prompts, site.depth, config,
                                             observer=ObserverGroup(intervener, keeper), decode_fn=decode)
            else:
                with intervene(model, spec, functions=functions) as intervener:
                    result = generate(model, prompts, site.depth, config, observer=ObserverGroup(intervener, keeper),
                                      decode_fn=decode)
            for row, question in enumerate(batch):
                text = tokenizer.decode(result.token_ids[row], skip_special_tokens=True)
                correct.append(bool(grade(question, text).correct))
            assert keeper.logits is not None
            target = targets[start:start + len(batch)]
            logprobs = torch.log_softmax(keeper.logits, dim=-1)
            known = target >= 0
            losses.extend((-logprobs[known.nonzero()[:, 0], target[known]]).tolist())
            bar.update(len(batch))
        rows.append({"iteration": iteration, "condition": condition, "questions": len(questions),
                     "accuracy": float(np.mean(correct)) if correct else float("nan"),
                     "loss": float(np.mean(losses)) if losses else float("nan")})
    bar.close()
    return pd.DataFrame(rows, columns=list(SPLICE_COLUMNS))


def splice_columns(table: pd.DataFrame) -> pd.DataFrame:
    """The splice table as columns per iteration: ``accuracy_clean``, ``accuracy_spliced``, ``accuracy_zero``, the
    same for ``loss``, and ``loss_recovered`` = (loss_zero - loss_spliced) / (loss_zero - loss_clean) (1: the
    reconstruction loses nothing the clean state carries; 0: no better than zeroing it)."""
    clean = table[table.condition == "clean"].iloc[0]
    out = []
    for iteration, part in table[table.condition != "clean"].groupby("iteration"):
        by = part.set_index("condition")
        row = {"iteration": int(iteration), "accuracy_clean": clean.accuracy,
               "accuracy_spliced": by.at["spliced", "accuracy"], "accuracy_zero": by.at["zero", "accuracy"],
               "loss_clean": clean.loss, "loss_spliced": by.at["spliced", "loss"], "loss_zero": by.at["zero", "loss"]}
        gap = row["loss_zero"] - row["loss_clean"]
        row["loss_recovered"] = (row["loss_zero"] - row["loss_spliced"]) / gap if gap > 0 else float("nan")
        out.append(row)
    return pd.DataFrame(out)


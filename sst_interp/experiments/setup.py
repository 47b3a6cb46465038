"""What every intervention experiment shares: the model and questions loaded once, and each condition recorded as an
ordinary run directory by ``record``'s own :func:`~sst_interp.record.runner.record_questions`.

An experiment folder holds ``runs/<condition>/`` (run directories: resumable, readable by every analysis and by
``report``), ``specs/<condition>.json`` (the spec each intervened condition was recorded with), the experiment's
tidy tables and ``experiment-<kind>.json`` (its manifest, :mod:`sst_interp.experiments.manifest`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sst_interp.codeact.prompts import codeact_question
from sst_interp.data import questions_to_frame
from sst_interp.data.question import select_questions
from sst_interp.experiments.configs import layer_set
from sst_interp.experiments.families import family_of
from sst_interp.kernels.errors import UsageError
from sst_interp.model.devices import check_device
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loading import build_sst, eos_token_ids, resolve_prompt_mode
from sst_interp.model.loop_folder import native_family
from sst_interp.model.loop_model import LoopModel, load_loop_backbone
from sst_interp.record.completion import batch_generation_config
from sst_interp.record.families import check_family_options, family_identity, record_family_questions
from sst_interp.record.identity import model_spec, questions_sha256, run_identity, sandbox_config
from sst_interp.record.options import RecordOptions
from sst_interp.record.plan import load_every, resolve_options
from sst_interp.record.preflight import check_against_model
from sst_interp.record.runner import record_questions
from sst_interp.sandbox import check_backend

RUNS = "runs"
SPECS = "specs"


@dataclass
class Setup:
    """A loaded model and its questions, with the record options every condition is recorded under.

    Args:
        sst: the :class:`~sst_interp.model.sst.SSTModel`, or the
            :class:`~sst_interp.model.loop_model.LoopModel` of a natively looping family
            (:mod:`sst_interp.experiments.families`).
        tokenizer: its tokenizer.
        questions: the selected questions (CodeACT first turns under ``protocol == "codeact"``).
        base: the record options shared by every condition (``depths``, ``out`` and ``intervention`` are set per
            condition).
        model_identity: the model part of each run's identity (``ModelSpec.identity()``).
        data_sha256: the sha256 of the whole question set (part of each run's identity).
        demo: whether the untrained demo preset is on.
    """

    sst: Any
    tokenizer: Any
    questions: list[Any]
    base: RecordOptions
    model_identity: dict[str, Any]
    data_sha256: str
    demo: bool = False

    @property
    def num_layers(self) -> int:
        return int(self.sst.num_layers)

    @property
    def family(self) -> Any:
        """The family's :class:`~sst_interp.model.loop_declaration.LoopDeclaration`, or None for an SST."""

        return family_of(self.sst)

    @property
    def update(self) -> str | None:
        """The SST's state update (the window's reference baselines need ``direct``); None for a family, whose
        baselines replace a visit's output, not a carried state read through an update."""
        return None if self.family is not None else self.sst.config.update


def prepare(base: RecordOptions) -> tuple[RecordOptions, list[Any], Any, bool, str]:
    """Check ``base`` and load the questions, without loading the model (so bad input stops in seconds).

    Returns:
        (the options with what they left open filled in (``base`` itself is not changed), the selected questions,
        the model spec (for a natively looping family: its LoopDeclaration), demo preset on, questions sha256).
    """

    base, _, _ = resolve_options(base)  # a resolved copy: the caller's options stay as they are
    loop = _family(base)
    if base.codeact:
        check_backend(sandbox_config(base))
    every = load_every(base)
    if base.codeact:
        every = [codeact_question(q) for q in every]
    selected = select_questions(every, limit=base.limit, ids=base.ids)
    if loop is not None:  # the family's folder is the model; it has no SST spec, demo preset or prompt mode
        return base, selected, loop, False, questions_sha256(questions_to_frame(every))
    spec, demo = model_spec(base)
    base = dataclasses.replace(base, prompt_mode=resolve_prompt_mode(base.prompt_mode, demo))
    return base, selected, spec, demo, questions_sha256(questions_to_frame(every))


def _family(base: RecordOptions) -> Any:
    """The LoopDeclaration of a ``--model`` folder of a natively looping family (or the ``--loop`` file's), its
    options checked against it (an SST-only flag, CodeACT, a depth it cannot run, a folder with its own code without
    ``--trust-remote-code``: one UsageError line, before the model loads); None for an SST."""

    loop = native_family(base.model, base.loop, base.trust_remote_code)
    if loop is not None:
        check_family_options(base, loop, list(base.depths))
    return loop


def load(base: RecordOptions) -> Setup:
    """:func:`prepare`, then load the model and check the questions fit it (UsageError before anything is written)."""

    base, questions, spec, demo, data_sha = prepare(base)
    if _family(base) is not None:
        return _load_family(base, questions, spec, data_sha)
    sst, tokenizer = build_sst(spec)
    check_against_model(base, sst, tokenizer, questions)
    return Setup(sst, tokenizer, questions, base, spec.identity(), data_sha, demo)


def _load_family(base: RecordOptions, questions: list[Any], loop: Any, data_sha: str) -> Setup:
    """Load a natively looping family as ``record`` does (:func:`~sst_interp.record.families.record_family`)."""

    backbone, tokenizer = load_loop_backbone(base.model, loop, dtype=base.dtype, device=check_device(base.device),
                                             trust_remote_code=base.trust_remote_code, options=base.loop_options)
    model = LoopModel(backbone, loop)
    check_against_model(base, model, tokenizer, questions)
    return Setup(model, tokenizer, questions, base, {"model": str(Path(base.model).resolve()),
                                                     "family": loop.family}, data_sha)


def generation_config(setup: Setup) -> Any:
    """The :class:`~sst_interp.model.generation.GenerationConfig` ``record`` generates the conditions with (the
    experiments' forced passes start from it): an SST's
    (:func:`~sst_interp.record.completion.batch_generation_config`), or for a family the same greedy decoding
    without a prompt mode (its prompt runs through its own forward)."""

    if setup.family is None:
        return batch_generation_config(setup.sst, setup.tokenizer, setup.base)
    pad = setup.tokenizer.pad_token_id if setup.tokenizer.pad_token_id is not None else 0
    return GenerationConfig(max_new_tokens=setup.base.max_new_tokens,
                            eos_token_ids=eos_token_ids(setup.tokenizer, setup.sst), pad_token_id=pad)


def condition_path(out: Path, name: str) -> Path:
    """The run directory of condition ``name`` in experiment folder ``out``."""
    return Path(out) / RUNS / name


def record_condition(setup: Setup, out: Path, name: str, depths: list[int], spec: Any | None = None) -> Path:
    """Record (or resume) condition ``name`` at ``depths`` with ``spec`` (None: clean) as an ordinary run.

    The spec is written to ``specs/<name>.json`` and passed to ``record`` as ``--intervention`` would be, so it is
    in the run's manifest and identity. Returns the run directory."""

    folder = condition_path(out, name)
    intervention = None
    if spec is not None:
        spec_file = Path(out) / SPECS / f"{name}.json"
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(json.dumps(spec.to_dict(), indent=1, sort_keys=True) + "\n")
        intervention = str(spec_file)
    args = dataclasses.replace(setup.base, depths=list(depths), out=str(folder),
                               intervention=intervention)
    print(f"[condition {name}: depths {','.join(map(str, depths))}]")
    if setup.family is not None:
        # record's own family path, with the identity `record --model FOLDER --intervention SPEC` gives the run
        identity = family_identity(args, setup.family, setup.data_sha256)
        record_family_questions(setup.sst, setup.tokenizer, setup.questions, args, folder, identity)
        return folder
    identity = run_identity(args, setup.model_identity, setup.data_sha256)
    record_questions(setup.sst, setup.tokenizer, setup.questions, args, folder, identity, demo=setup.demo)
    return folder


def condition_identity(setup: Setup, depths: list[int]) -> dict[str, Any]:
    """The run identity a clean condition at ``depths`` gets (its model keys name the model being intervened on)."""

    args = dataclasses.replace(setup.base, depths=list(depths), intervention=None)
    if setup.family is not None:
        return family_identity(args, setup.family, setup.data_sha256)
    return run_identity(args, setup.model_identity, setup.data_sha256)


def parse_layers(text: str | None, num_layers: int, flag: str = "--layers") -> tuple[int, ...]:
    """``all``/None, ``a-b`` ranges and comma lists of layer indices, checked against the model's layer count."""
    chosen = layer_set(text, flag)
    if chosen is None:
        return tuple(range(num_layers))
    bad = sorted(layer for layer in chosen if not 0 <= layer < num_layers)
    if bad or not chosen:
        raise UsageError(f"{flag} {text!r}: layers {bad} do not exist in a model with {num_layers} layers "
                         f"(0-{num_layers - 1})")
    return chosen

"""Recording a natively looping family (HRM-Text, ...): the same run directory as an SST run, from the family's own
transformers classes.

``record --model FOLDER`` lands here when the folder's ``config.json`` names a family of
:data:`~sst_interp.model.loops.LOOPS` other than SST (read before any weight loads). Each depth sets the family's
loop count (:attr:`~sst_interp.model.loop_declaration.LoopDeclaration.depth_key`); the recorder
(:class:`~sst_interp.hooks.visits.VisitRecorder`) files every visit under (turn, position, iteration, layer), and the
manifest adds ``family`` and ``loop`` (docs/format.md, docs/families.md).
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from sst_interp import __version__
from sst_interp.data import grade, questions_to_frame, stop_strings
from sst_interp.data.question import select_questions
from sst_interp.hooks import VisitRecorder
from sst_interp.interventions import patch_runs
from sst_interp.interventions.loops import check_loop_spec, intervene_loop
from sst_interp.interventions.sites import SITES_KEY
from sst_interp.kernels.errors import UsageError
from sst_interp.model.devices import check_device
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loading import eos_token_ids
from sst_interp.model.loop_file import loop_file_sha256
from sst_interp.model.loop_model import LoopModel, generate_looped, load_loop_backbone
from sst_interp.model.observers import ObserverGroup
from sst_interp.record.attention import attention_identity, attention_manifest
from sst_interp.record.batches import record_batches, sites_check
from sst_interp.record.identity import questions_sha256
from sst_interp.record.numerics import check_numerics, cpu_threads, numerics_fingerprint
from sst_interp.record.options import RecordOptions
from sst_interp.record.plan import RecordPlan, capture_config, frozen, load_every, resolve_options
from sst_interp.record.preflight import attention_sizes, check_against_model
from sst_interp.record.ranks import Ranks, ranks_from_environment
from sst_interp.record.rundir import checked_space
from sst_interp.record.trace_check import checked_trace
from sst_interp.store import check_out

#: What the SST-only flags mean for a looping family: each one refused with this reason.
SST_ONLY_FLAGS = {
    "checkpoint": "--checkpoint loads an SST checkpoint",
    "demo_preset": "--demo-preset is the untrained SST preset",
    "prompt_mode": "--prompt-mode says how the prompt runs through the SST state stream",
    "gates": "--gates hooks the SST layers' FFN gate",
}


def check_family_options(options: RecordOptions, loop: Any, depths: list[int]) -> None:
    """Refuse what a looping family cannot honour: an SST-only flag, a per-position or probe depth policy, CodeACT,
    a depth beyond the family's range (each a :class:`UsageError`)."""
    for name, reason in SST_ONLY_FLAGS.items():
        value = getattr(options, name)
        if value not in (None, False):
            raise UsageError(f"{reason}; {loop.family} has none (drop the flag)")
    if options.depth_policy != "fixed":
        raise UsageError(f"--depth-policy {options.depth_policy}: {loop.family} runs are recorded at fixed depths "
                         "only")
    if options.codeact:
        raise UsageError(f"--protocol codeact: {loop.family} runs are recorded with the completion protocol only")
    if options.compile == "on":
        raise UsageError(f"--compile on: the compiled decode step serves SSTs; {loop.family} runs decode eager "
                         "(use --compile off)")
    for depth in depths:
        loop.check_depth(depth)


def check_family_spec(options: RecordOptions, model: Any) -> Any:
    """The ``--intervention`` spec checked against the loaded family (its layers, which of them loop, where a
    freeze keeps a carried state), or None; a spec it cannot take is a :class:`UsageError` before anything is
    written."""
    spec = options.intervention_spec()
    if spec is not None:
        check_loop_spec(spec, model.loop, model.config, model.hidden_size)
    return spec


def family_identity(options: RecordOptions, loop: Any, data_sha256: str) -> dict[str, Any]:
    """What must match to resume a family run of (resolved) ``options``: the model folder, the family, the data and
    what is recorded and how (the intervention and the runs it patches from included)."""
    identity = {"model": str(Path(options.model).resolve()), "family": loop.family, "dtype": options.dtype,
                "questions": options.questions, "data_sha256": data_sha256,
                "max_new_tokens": options.max_new_tokens, "decoding": "greedy",
                "full_positions": options.full_positions, "sketch_positions": options.sketch_positions,
                "sketch_k": options.sketch_k, "top_k": options.top_k, "batch_size": options.batch_size}
    if options.loop is not None:
        # the declaration is the user's file: its text is part of what was recorded (only set keys, so the
        # identities of runs recorded before --loop existed are unchanged)
        identity.update(loop=options.loop, loop_sha256=loop_file_sha256(options.loop),
                        trust_remote_code=options.trust_remote_code)
    if options.loop_options:
        # a setting the family declares changeable at inference changes what every visit computes (only set when
        # given, so the identities of runs recorded before --loop-option existed are unchanged)
        identity.update(loop_options=dict(sorted(options.loop_options.items())))
    spec = options.intervention_spec()
    if spec is not None:
        identity.update(intervention=spec.to_dict(), intervention_runs=patch_runs(spec))
    identity.update(attention_identity(options.attention, options.attention_top_k))
    return identity


def record_family(options: RecordOptions, loop: Any) -> dict[int, float]:
    """Record every depth of ``options`` with the looping family ``loop``; resumes like an SST run. Returns accuracy
    per depth. The inputs are resolved once (:func:`plan_family`)."""

    plan = plan_family(options, loop)
    # the numerics fingerprint is checked once the model is loaded (_record_family_plan): it reads the model
    check_out(plan.out, plan.identity, later=("numerics",))
    device = check_device(plan.options.device)
    # the dtype as asked (auto honours a float64 folder on the CPU; a cast that narrows is said on stderr)
    backbone, tokenizer = load_loop_backbone(plan.options.model, loop, dtype=options.dtype, device=device,
                                             trust_remote_code=plan.options.trust_remote_code,
                                             options=plan.options.loop_options,
                                             say=lambda note: print(note, file=sys.stderr))
    return _record_family_plan(plan, LoopModel(backbone, loop), tokenizer)


def record_family_questions(model: Any, tokenizer: Any, questions: list[Any], options: RecordOptions,
                            out: str | Path, identity: dict[str, Any]) -> dict[int, float]:
    """Record ``questions`` with a loaded :class:`~sst_interp.model.loop_model.LoopModel` into ``out`` (created or
    resumed), every depth of ``options``."""
    plan = plan_family(options, model.loop, out, identity, questions)
    return _record_family_plan(plan, model, tokenizer)


def plan_family(options: RecordOptions, loop: Any, out: str | Path | None = None,
                identity: dict[str, Any] | None = None, questions: list[Any] | None = None) -> RecordPlan:
    """The plan of a natively looping family's recording: options checked against the family; without
    ``questions`` they are loaded and selected and the identity is derived, else the caller's ``questions`` and
    ``identity`` are used. Bad input is a UsageError."""
    resolved, depths, _ = resolve_options(options, default_checkpoint=False)
    check_family_options(resolved, loop, list(depths))
    if questions is None:
        if ranks_from_environment().distributed or resolved.device_map != "none":
            raise UsageError(f"{loop.family} runs are recorded in one process on one device (no torchrun, "
                             "--device-map none)")
        every = load_every(resolved)
        questions = select_questions(every, limit=resolved.limit, ids=resolved.ids)
        identity = family_identity(resolved, loop, questions_sha256(questions_to_frame(every)))
    return RecordPlan(options=resolved, depths=depths, out=Path(out) if out is not None else resolved.out_path(),
                      frozen_identity=frozen(dict(identity or {})), demo=False,
                      intervention=resolved.intervention_spec(),
                      sandbox=None, capture=capture_config(resolved, gates=False), questions=tuple(questions))


def _record_family_plan(plan: RecordPlan, model: Any, tokenizer: Any) -> dict[int, float]:
    """Record the plan of a family run with the loaded ``model``, computing with ``--threads`` CPU threads
    (:func:`~sst_interp.record.numerics.cpu_threads`), as an SST run does."""
    with cpu_threads(plan.options.threads):
        return _record_family_loaded(plan, model, tokenizer)


def _record_family_loaded(plan: RecordPlan, model: Any, tokenizer: Any) -> dict[int, float]:
    """Record the plan of a family run with the loaded ``model``: the checks that need the model first (before the
    run directory is created or resumed), then every batch, in the loop an SST run uses
    (:func:`~sst_interp.record.batches.record_batches`)."""

    options, questions, out, config = plan.options, list(plan.questions), plan.out, plan.capture
    depths = list(plan.depths)
    # the settings besides the flags that change the recorded numbers (threads, device, versions, ...): a resume
    # that would mix two numerics in one run is refused here, with the setting named, before anything is written;
    # family runs decode eager (--compile on is refused for them)
    # the compute dtype, which --dtype auto may have kept wider than the stored one (a float64 folder on the CPU)
    fingerprint = numerics_fingerprint(model, str(model.dtype).removeprefix("torch."), options.batch_size, "eager")
    check_numerics(out, fingerprint)
    identity = dict(plan.identity, numerics=fingerprint)
    check_against_model(options, model, tokenizer, questions)
    spec = check_family_spec(options, model)
    # the declaration against the running model, before the run directory is created (once per model and
    # declaration: a resume reuses the run's own)
    trace = checked_trace(options, model, out)
    extra = family_manifest(options, model, tokenizer, config, depths)
    extra["loop"]["trace"] = trace
    space = checked_space(out, questions, depths, options.allow_low_disk, full_positions=config.full_positions,
                          sketch_positions=config.sketch_positions, layers=model.num_layers, d=model.hidden_size,
                          dtype=options.dtype, top_k=options.top_k, sketch_k=extra["sketch_k"],
                          max_new_tokens=options.max_new_tokens, gates=False, ffn_size=0,
                          **attention_sizes(options, model, tokenizer, questions))

    def one_batch(batch: list[Any], depth: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        rows, columns, meta = record_family_batch(model, tokenizer, batch, depth, options, config, spec)
        return dict(generations=rows, **columns), meta

    # as for an SST: a rule that changed no site in the first batch is refused with nothing written
    return record_batches(out, questions, depths, options.batch_size, one_batch, identity=identity,
                          extra=extra, ranks=Ranks(), space=space,
                          check_sites=sites_check(options.allow_empty_sites) if spec is not None else None,
                          desc=f"record {model.loop.family}")


def record_family_batch(model: Any, tokenizer: Any, batch: list[Any], depth: int, options: RecordOptions,
                        config: Any, spec: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any],
                                                                dict[str, Any] | None]:
    """Generate one batch at ``depth`` with the :class:`~sst_interp.hooks.visits.VisitRecorder` attached, and the
    intervention ``spec`` applied when given; returns (generation rows, writer columns, the batch's manifest keys:
    the spec's site counts, or None)."""
    prompts = [list(tokenizer(q.prompt).input_ids) for q in batch]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    gen_config = GenerationConfig(max_new_tokens=options.max_new_tokens, eos_token_ids=eos_token_ids(tokenizer, model),
                                  stop_strings=tuple(stop_strings(batch[0].source)), pad_token_id=pad)
    ids = [q.question_id for q in batch]
    changing = intervene_loop(model, spec, ids) if spec is not None else nullcontext(None)
    with changing as intervener, VisitRecorder.for_model(model, ids, config) as recorder:
        # the intervener first: it sets each call's coordinates, and its hooks change a visit before it is recorded
        result = generate_looped(model, prompts, depth, gen_config, observer=ObserverGroup(intervener, recorder),
                                 decode_fn=lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True))
    meta = {SITES_KEY: intervener.site_report()} if intervener is not None else None
    rows = []
    for row, question in enumerate(batch):
        tokens = result.token_ids[row]
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        verdict = grade(question, text)
        rows.append({
            "question_id": question.question_id, "turn": 0, "depth": depth, "token_ids": tokens, "text": text,
            "n_tokens": len(tokens), "stop_reason": result.stop_reasons[row],
            "extracted_answer": verdict.extracted_answer, "correct": bool(verdict.correct),
            "grader": verdict.grader, "depth_policy": result.depth_policy, "chosen_depth": depth,
            "prompt_tokens": len(prompts[row]), "iterations": np.asarray(result.iterations[row], dtype=np.int32),
        })
    return rows, recorder.columns(), meta


def family_manifest(options: RecordOptions, model: Any, tokenizer: Any, config: Any,
                    depths: list[int]) -> dict[str, Any]:
    """The manifest keys of a family run besides the identity: the contract layout, ``family`` and ``loop``."""

    # the width of the logits the model emits, which the recorded top-k and the kl rule read: Inkling-2 Loop's head
    # is narrower (unpadded_vocab_size) than its config's vocab_size
    head = model.backbone.get_output_embeddings()
    vocab = getattr(head, "out_features", None) or getattr(model.config, "vocab_size", None)
    spec = options.intervention_spec()
    extra = {} if spec is None else {"intervention": spec.to_dict()}  # as an SST run's manifest states it
    return extra | {
        "hidden_size": model.hidden_size,
        "num_layers": model.num_layers,
        "dtype": options.dtype,
        "depths": depths,
        "full_positions": config.full_positions,
        "sketch_positions": config.sketch_positions,
        "sketch_k": config.resolved_sketch_k(model.hidden_size),
        "top_k": config.top_k,
        "gates": False,
        "ffn_size": None,
        "decoding": {"strategy": "greedy", "do_sample": False, "max_new_tokens": options.max_new_tokens,
                     "eos_token_ids": list(eos_token_ids(tokenizer, model)),
                     "stop_strings": list(stop_strings(options.questions))},
        # the prompt runs through the family's own forward: there is no state stream for a prompt mode to shape
        "prompt_mode": "none",
        "protocol": "completion",
        "depth_policy": "fixed",
        "family": model.loop.family,
        "loop": model.loop.describe(model.config, depths),
        "questions": options.questions,
        "batch_size": options.batch_size,
        "device": str(model.device),
        "package_version": __version__,
        "logits_every_iteration": True,
        "vocab_size": int(vocab) if vocab is not None else None,
    } | attention_manifest(options.attention, options.attention_top_k, model.num_layers)

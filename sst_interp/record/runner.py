"""Recording a run: the library entry (:func:`record_questions`, which takes a loaded model and questions) and the
entry :func:`record` (which loads them as :class:`~sst_interp.record.options.RecordOptions` say; the ``record``
command builds those from its flags in :mod:`sst_interp.cli.record`).

For each depth in ``depths`` a flat-depth run over all questions, in batches: hooks record hidden states, sketches
and per-iteration logits from the passes that produce the tokens; answers (or episodes) are graded; each batch
goes to the run directory's background writer. Rerunning the same command resumes an interrupted run.

Under ``torchrun`` each process records its share of the batches into the same run (:mod:`sst_interp.record.ranks`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sst_interp.interventions import SiteTally, check_spec
from sst_interp.interventions.sites import SITES_KEY
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.paths import ensure_writable_folder
from sst_interp.kernels.progress import progress
from sst_interp.model.depth_policy import FixedDepth
from sst_interp.model.loading import build_sst
from sst_interp.model.loop_folder import native_family
from sst_interp.record.batches import record_batches, sites_check
from sst_interp.record.completion import decode_kind, record_batch, run_compiler
from sst_interp.record.episodes import record_episode_batch
from sst_interp.record.families import record_family
from sst_interp.record.identity import manifest_extra
from sst_interp.record.numerics import check_numerics, check_ranks_agree, cpu_threads, numerics_fingerprint
from sst_interp.record.options import RecordOptions
from sst_interp.record.plan import RecordPlan, plan_loaded, plan_record
from sst_interp.record.preflight import attention_sizes, check_against_model
from sst_interp.record.ranks import Ranks, process_group, ranks_from_environment, share_of_work
from sst_interp.record.rundir import checked_space, completed_before, open_run, run_summary
from sst_interp.store import Run, check_out


def record(options: RecordOptions) -> dict[int, float]:
    """Record every depth of ``options``; resumes a run already at ``options.out_path()``. Returns accuracy per depth.

    The inputs are resolved once into a :class:`~sst_interp.record.plan.RecordPlan` (``options`` is left as it is)
    that every later step reads. Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment) this is one of several
    processes recording into the same run; each returns the accuracy of the whole run."""

    family = native_family(options.model, options.loop, options.trust_remote_code)
    if family is not None:  # a natively looping family (HRM-Text, ...): its own forward, not the SST conversion
        return record_family(options, family)
    if options.loop_options:
        raise UsageError("--loop-option sets a looped family's setting; an SST has none (drop the flag)")
    ranks = ranks_from_environment()
    plan = plan_record(options, ranks)
    with process_group(ranks):
        # refuse a wrong --out before spending time on the model
        # the numerics fingerprint is checked once the model is loaded (_record_plan): it reads the model
        ranks.run_on_main(lambda: (check_out(plan.out, plan.identity, later=("numerics",)),
                                   ensure_writable_folder(plan.out)))
        sst, tokenizer = build_sst(plan.model)
        return _record_plan(plan, sst, tokenizer, ranks)


def record_questions(sst: Any, tokenizer: Any, questions: list[Any], options: RecordOptions, out: str | Path,
                     identity: dict[str, Any] | None = None, demo: bool = False,
                     ranks: Ranks | None = None) -> dict[int, float]:
    """Record ``questions`` with a loaded model into the run directory ``out`` (created or resumed).

    Args:
        sst: the :class:`~sst_interp.model.sst.SSTModel`.
        tokenizer: its tokenizer.
        questions: :class:`~sst_interp.data.Question` objects; under ``options.protocol == "codeact"`` their prompts
            are CodeACT first turns (:func:`sst_interp.codeact.prompts.codeact_question`).
        options: the options (:class:`RecordOptions`; the model and data fields are not read here).
        out: the run directory.
        identity: what must match to resume; None derives one from the model's SST config and the questions.
            Either way the numerics fingerprint of this model, device and thread count is added to it
            (:mod:`sst_interp.record.numerics`; the recording runs with ``options.threads`` CPU threads).
        demo: whether the untrained demo preset is on (recorded in the manifest).
        ranks: this process's place among several recording together (in a joined process group); None records
            alone. Each rank records its :func:`~sst_interp.record.ranks.share_of_work` of the batches.

    Returns:
        accuracy per depth (of the whole run, on every rank).
    """
    plan = plan_loaded(sst, questions, options, out, identity, demo)
    return _record_plan(plan, sst, tokenizer, ranks or Ranks())


def _record_plan(plan: RecordPlan, sst: Any, tokenizer: Any, ranks: Ranks) -> dict[int, float]:
    """Record the plan with the loaded ``sst`` and ``tokenizer``, computing with ``--threads`` CPU threads
    (:func:`~sst_interp.record.numerics.cpu_threads`)."""
    with cpu_threads(plan.options.threads):
        return _record_loaded(plan, sst, tokenizer, ranks)


def _record_loaded(plan: RecordPlan, sst: Any, tokenizer: Any, ranks: Ranks) -> dict[int, float]:
    """Record the :class:`~sst_interp.record.plan.RecordPlan` ``plan`` with the loaded ``sst`` and ``tokenizer``:
    the checks that need the model first (before the run directory is created or resumed), then every batch."""

    options, questions, out, config = plan.options, list(plan.questions), plan.out, plan.capture
    depths = list(plan.depths)
    check_against_model(options, sst, tokenizer, questions)  # before the run directory is created or resumed
    for note in plan.notes:
        ranks.say(note)
    spec = plan.intervention
    if spec is not None:
        check_spec(spec, sst.num_layers, sst.hidden_size)  # before the run directory is created
    compiler = run_compiler(sst, options)  # one for the whole run: each batch size compiles once
    identity = dict(plan.identity, numerics=_checked_fingerprint(sst, options, out, ranks, decode_kind(compiler)))
    extra = manifest_extra(options, sst, tokenizer, config, depths, plan.demo)
    tally = None
    if spec is not None:
        tally = SiteTally()
    batch_fn = _batch_function(options, sst, tokenizer, config, plan.sandbox, tally, compiler)
    policy = plan.policy
    if policy is not None and not getattr(policy, "per_position", False):
        return _record_with_policy(options, policy, batch_fn, questions, identity, extra, out, ranks, tally)
    if policy is not None:  # per-position: one batched run, filed under the policy's maximum depth (plan.depths)
        extra = dict(extra, depth_policy=policy.describe(), max_depth=policy.max_depth)
    sizes = dict(full_positions=config.full_positions, sketch_positions=config.sketch_positions,
                 layers=sst.num_layers, d=sst.hidden_size, dtype=options.dtype, top_k=options.top_k,
                 sketch_k=extra["sketch_k"], max_new_tokens=options.max_new_tokens, gates=options.gates,
                 ffn_size=extra.get("ffn_size") or 0, **attention_sizes(options, sst, tokenizer, questions))
    space = ranks.run_on_main(lambda: checked_space(
        out, questions, depths, options.allow_low_disk,
        # an episode records up to max_turns model turns, each like one completion: count it as that many
        per_question=options.max_turns if options.codeact else 1, **sizes))

    def one_batch(batch: list[Any], depth: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        submission = batch_fn(batch, FixedDepth(depth) if policy is None else policy)
        return submission, _site_meta(tally)

    # a rule that changes nothing is refused before the run directory is created
    check_sites = sites_check(options.allow_empty_sites) if tally is not None else None
    return record_batches(out, questions, depths, options.batch_size, one_batch, identity=identity, extra=extra,
                          ranks=ranks, space=space, check_sites=check_sites)


def _checked_fingerprint(sst: Any, options: RecordOptions, out: Path, ranks: Ranks, decode: str) -> dict[str, Any]:
    """The numerics fingerprint of recording with ``sst`` here, checked to be every rank's and the run's at
    ``out`` (a UsageError naming the setting otherwise), before the run directory is created or resumed."""
    fingerprint = numerics_fingerprint(sst, options.dtype, options.batch_size, decode)
    check_ranks_agree(fingerprint, ranks)
    ranks.run_on_main(lambda: check_numerics(out, fingerprint))
    return fingerprint


def _site_meta(tally: Any) -> dict[str, Any] | None:
    """The batch's manifest keys for an intervened run: its site counts per rule."""
    if tally is None:
        return None

    return {SITES_KEY: tally.take()}


def _checked_batch(batch_fn: Any, batch: list[Any], policy: Any, tally: Any,
                   options: RecordOptions) -> tuple[list[str], dict[str, Any], dict[str, Any] | None]:
    """Record the first batch before anything is written and refuse a rule that changed no site in it
    (unless ``--allow-empty-sites``); returns (its question ids, its submission, its manifest keys)."""
    submission = batch_fn(batch, policy)
    meta = _site_meta(tally)
    sites_check(options.allow_empty_sites)(meta)
    return [q.question_id for q in batch], submission, meta


def _batch_function(options: RecordOptions, sst: Any, tokenizer: Any, config: Any, sandbox: Any,
                    tally: Any = None, compiler: Any = None) -> Any:
    """(batch, depth policy) -> the writer's submit keywords, for the protocol of ``options``; ``tally`` receives
    each batch's intervention site counts; ``compiler`` is the run's step compiler (None: decode eager)."""
    if options.codeact:
        def episodes(batch: list[Any], policy: Any) -> dict[str, Any]:
            rows, episode_rows, columns, _ = record_episode_batch(sst, tokenizer, batch, policy, options, config,
                                                                  sandbox, tally)
            return dict(generations=rows, episodes=episode_rows, **columns)

        return episodes

    def completions(batch: list[Any], policy: Any) -> dict[str, Any]:
        rows, columns = record_batch(sst, tokenizer, batch, policy, options, config, tally, compiler)
        return dict(generations=rows, **columns)

    return completions


def _record_with_policy(options: RecordOptions, policy: Any, batch_fn: Any, questions: list[Any],
                        identity: dict[str, Any], extra: dict[str, Any], out: Path, ranks: Ranks,
                        tally: Any = None) -> dict[int, float]:
    """A run under a probe depth policy: one question per generation call (the policy picks one depth per
    call), each filed under the depth it chose (its first model turn's, for an episode). Resumes like a flat run;
    under torchrun the questions are dealt round-robin to the ranks."""

    extra = dict(extra, depths=[], depth_policy=policy.describe(), max_depth=policy.max_depth)
    first = None
    if tally is not None:  # a rule that changes nothing is refused before the run directory is created
        before = set().union(*completed_before(out).values())
        todo = share_of_work([q for q in questions if q.question_id not in before], ranks)
        if todo:
            first = _checked_batch(batch_fn, [todo[0]], policy, tally, options)
    with open_run(out, identity, extra, questions, ranks) as writer:
        done = set().union(*(writer.completed(k) for k in range(1, policy.max_depth + 1)))
        todo = [q for q in questions if q.question_id not in done]
        if ranks.is_main:
            print(f"depth policy {policy.describe()}: {len(done)} of {len(questions)} questions already recorded "
                  f"in {out}")
        mine = share_of_work(todo, ranks)
        for question in progress(mine, unit="q", desc="record", disable=not mine or not ranks.is_main):
            if first is not None and first[0] == [question.question_id]:
                (_, submission, meta), first = first, None
            else:
                submission = batch_fn([question], policy)
                meta = _site_meta(tally)
            depth = int(submission["generations"][0]["depth"])
            writer.submit(depth, [question.question_id], **submission, meta=meta)
    recorded = Run.open(out).depths
    return run_summary(out, [d for d in range(1, policy.max_depth + 1) if d in recorded], ranks)

"""Recording a run: the library entry (:func:`record_questions`, which takes a loaded model and questions) and the
CLI's :func:`record` (which loads them from :class:`RecordArgs`).

For each depth in ``depths`` a flat-depth run over all questions, in batches: hooks record hidden states, sketches
and per-iteration logits from the passes that produce the tokens; answers (or episodes) are graded; each batch
goes to the run directory's background writer. Rerunning the same command resumes an interrupted run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sst_interp.errors import UsageError
from sst_interp.paths import ensure_writable_folder
from sst_interp.record.options import RecordArgs


def record(args: RecordArgs) -> dict[int, float]:
    """Record every depth of ``args``; resumes a run already at ``args.out_path()``. Returns accuracy per depth."""
    from sst_interp.data import load_questions, questions_to_frame
    from sst_interp.data.question import select_questions
    from sst_interp.model.loading import DEMO_PRESET_NOTE, build_sst, resolve_prompt_mode
    from sst_interp.record.identity import model_spec, questions_sha256, run_identity, sandbox_config
    from sst_interp.store import check_out

    args.validate()
    if args.use_default_codeact_checkpoint():
        print(f"[--protocol codeact without --checkpoint or --model: the shipped CodeACT demo SST "
              f"({args.checkpoint}); pass --checkpoint to use another]")
    if args.codeact:
        from sst_interp.sandbox import check_backend

        check_backend(sandbox_config(args))  # a missing bwrap is a one-line error before the model loads
    every = load_questions(args.questions, args.data, **args.source_options())
    if args.codeact:
        from sst_interp.codeact.prompts import codeact_question

        every = [codeact_question(q) for q in every]
    selected = select_questions(every, limit=args.limit, ids=args.id_list())
    data_sha = questions_sha256(questions_to_frame(every))
    spec, demo = model_spec(args)
    args.prompt_mode = resolve_prompt_mode(args.prompt_mode, demo)
    identity = run_identity(args, spec.identity(), data_sha)
    out = args.out_path()
    check_out(out, identity)  # refuse a wrong --out before spending time on the model
    ensure_writable_folder(out)
    if demo:
        print(f"[{DEMO_PRESET_NOTE}]")
    sst, tokenizer = build_sst(spec)
    return record_questions(sst, tokenizer, selected, args, out, identity, demo=demo)


def completed_before(out: Path) -> dict[int, set[str]]:
    """{depth: question ids} an existing run at ``out`` has complete (its manifest's ``status``); empty when there
    is no run yet."""
    from sst_interp.store.manifest import MANIFEST_NAME, read_manifest

    if not (out / MANIFEST_NAME).is_file():
        return {}
    try:
        status = read_manifest(out).get("status", {})
    except ValueError:  # unreadable JSON: RunWriter.create_or_resume refuses it next, with its own message
        return {}
    return {int(depth): set(ids) for depth, ids in status.items()} if isinstance(status, dict) else {}


def report_resume(report: Any) -> None:
    """Say what a resume found: damaged files and the question-depths that are recorded again."""
    if report.damaged:
        print(f"resume: {len(report.damaged)} damaged file(s) failed verification: {', '.join(report.damaged[:5])}"
              + (" ..." if len(report.damaged) > 5 else ""))
    redo = sum(len(ids) for ids in report.redo.values())
    if redo:
        print(f"resume: {redo} question-depth(s) whose files were damaged or missing are recorded again")


def record_questions(sst: Any, tokenizer: Any, questions: list[Any], args: RecordArgs, out: str | Path,
                     identity: dict[str, Any] | None = None, demo: bool = False) -> dict[int, float]:
    """Record ``questions`` with a loaded model into the run directory ``out`` (created or resumed).

    Args:
        sst: the :class:`~sst_interp.model.sst.SSTModel`.
        tokenizer: its tokenizer.
        questions: :class:`~sst_interp.data.Question` objects; under ``args.protocol == "codeact"`` their prompts
            are CodeACT first turns (:func:`sst_interp.codeact.prompts.codeact_question`).
        args: the options (:class:`RecordArgs`; the model and data fields are not read here).
        out: the run directory.
        identity: what must match to resume; None derives one from the model's SST config and the questions.
        demo: whether the untrained demo preset is on (recorded in the manifest).

    Returns:
        accuracy per depth.
    """
    from tqdm import tqdm

    from sst_interp.data import questions_to_frame
    from sst_interp.hooks import RecordConfig
    from sst_interp.model.generation import FixedDepth
    from sst_interp.record.identity import make_depth_policy, manifest_extra, questions_sha256, sandbox_config
    from sst_interp.record.summary import print_summary
    from sst_interp.store import RunWriter, estimate_remaining

    depths = args.validate()
    if args.prompt_mode is None:
        args.prompt_mode = "two_pass"
    out = Path(out)
    if identity is None:
        identity = {"model": getattr(sst.backbone.config, "_name_or_path", type(sst.backbone).__name__),
                    "sst": sst.config.to_dict(), "questions": args.questions,
                    "data_sha256": questions_sha256(questions_to_frame(questions)), "protocol": args.protocol,
                    "max_new_tokens": args.max_new_tokens, "prompt_mode": args.prompt_mode}
    config = RecordConfig(full_positions=args.full_positions, sketch_positions=args.sketch_positions,
                          sketch_k=args.sketch_k, top_k=args.top_k, dtype=args.dtype, gates=args.gates)
    extra = manifest_extra(args, sst, tokenizer, config, depths, demo)
    sandbox = sandbox_config(args, hidden_paths=(str(out.resolve()),)) if args.codeact else None
    if sandbox is not None:
        from sst_interp.sandbox import check_backend

        check_backend(sandbox)
    batch_fn = _batch_function(args, sst, tokenizer, config, sandbox)
    policy = make_depth_policy(args, depths)
    if policy is not None:
        return _record_with_policy(args, policy, batch_fn, questions, identity, extra, out)
    sizes = dict(full_positions=config.full_positions, sketch_positions=config.sketch_positions,
                 layers=sst.num_layers, d=sst.hidden_size, dtype=args.dtype, top_k=args.top_k,
                 sketch_k=extra["sketch_k"], max_new_tokens=args.max_new_tokens, gates=args.gates,
                 ffn_size=extra.get("ffn_size") or 0)
    # Checked before the writer creates anything: a run that cannot fit is refused with nothing written.
    before = completed_before(out)
    # An episode records up to max_turns model turns, each like one completion: count it as that many.
    per_question = args.max_turns if args.codeact else 1
    space = estimate_remaining(out, {k: sum(q.question_id not in before.get(k, set()) for q in questions)
                                     * per_question for k in depths}, **sizes)
    if not space.fits and not args.allow_low_disk:
        raise UsageError(f"{space.line()}; or pass --allow-low-disk to record anyway")
    with RunWriter.create_or_resume(out, identity, extra) as writer:
        report_resume(writer.report)
        writer.write_questions(questions_to_frame(questions))
        remaining = {k: [q for q in questions if q.question_id not in writer.completed(k)] for k in depths}
        done = sum(len(questions) - len(v) for v in remaining.values())
        print(f"{space.line()}; {done} of {len(questions) * len(depths)} question-depths already recorded in {out}")
        total = sum(len(v) for v in remaining.values())
        with tqdm(total=total, unit="q", desc="record", disable=total == 0) as progress:
            for depth in depths:
                todo = remaining[depth]
                for start in range(0, len(todo), args.batch_size):
                    batch = todo[start : start + args.batch_size]
                    progress.set_postfix_str(f"depth {depth}")
                    submission = batch_fn(batch, FixedDepth(depth))
                    writer.submit(depth, [q.question_id for q in batch], **submission)
                    progress.update(len(batch))
    return print_summary(out, depths)


def _batch_function(args: RecordArgs, sst: Any, tokenizer: Any, config: Any, sandbox: Any) -> Any:
    """(batch, depth policy) -> the writer's submit keywords, for the protocol of ``args``."""
    if args.codeact:
        from sst_interp.record.episodes import record_episode_batch

        def episodes(batch: list[Any], policy: Any) -> dict[str, Any]:
            rows, episode_rows, columns, _ = record_episode_batch(sst, tokenizer, batch, policy, args, config, sandbox)
            return dict(generations=rows, episodes=episode_rows, **columns)

        return episodes
    from sst_interp.record.completion import record_batch

    def completions(batch: list[Any], policy: Any) -> dict[str, Any]:
        rows, columns = record_batch(sst, tokenizer, batch, policy, args, config)
        return dict(generations=rows, **columns)

    return completions


def _record_with_policy(args: RecordArgs, policy: Any, batch_fn: Any, questions: list[Any],
                        identity: dict[str, Any], extra: dict[str, Any], out: Path) -> dict[int, float]:
    """A run under a probe depth policy: one question per generation call (the policy picks one depth per
    call), each filed under the depth it chose (its first model turn's, for an episode). Resumes like a flat run."""
    from tqdm import tqdm

    from sst_interp.data import questions_to_frame
    from sst_interp.record.summary import print_summary
    from sst_interp.store import Run, RunWriter

    extra = dict(extra, depths=[], depth_policy=policy.describe(), max_depth=policy.max_depth)
    with RunWriter.create_or_resume(out, identity, extra) as writer:
        report_resume(writer.report)
        writer.write_questions(questions_to_frame(questions))
        done = set().union(*(writer.completed(k) for k in range(1, policy.max_depth + 1)))
        todo = [q for q in questions if q.question_id not in done]
        print(f"depth policy {policy.describe()}: {len(done)} of {len(questions)} questions already recorded in {out}")
        for question in tqdm(todo, unit="q", desc="record", disable=not todo):
            submission = batch_fn([question], policy)
            depth = int(submission["generations"][0]["depth"])
            writer.submit(depth, [question.question_id], **submission)
    recorded = Run.open(out).depths
    return print_summary(out, [d for d in range(1, policy.max_depth + 1) if d in recorded])

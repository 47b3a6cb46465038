"""The run directory a recording writes, as every recording path (SST, looping family, depth policy) uses it: what
an existing run already holds, the disk-space check, the writer open on every rank, and the closing summary.

These sit below :mod:`sst_interp.record.runner` and :mod:`sst_interp.record.families`, which both import them and
never each other's internals.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sst_interp.data import questions_to_frame
from sst_interp.kernels.errors import UsageError
from sst_interp.record.ranks import Ranks
from sst_interp.record.summary import print_summary
from sst_interp.store import RunWriter, estimate_remaining
from sst_interp.store.manifest import MANIFEST_NAME, read_manifest


def completed_before(out: Path) -> dict[int, set[str]]:
    """{depth: question ids} an existing run at ``out`` has complete (its manifest's ``status``); empty when there
    is no run yet."""

    if not (out / MANIFEST_NAME).is_file():
        return {}
    try:
        status = read_manifest(out).get("status", {})
    except ValueError:  # unreadable JSON: RunWriter.create_or_resume refuses it next, with its own message
        return {}
    return {int(depth): set(ids) for depth, ids in status.items()} if isinstance(status, dict) else {}


def checked_space(out: Path, questions: list[Any], depths: list[int], allow_low_disk: bool, per_question: int = 1,
                  **sizes: Any) -> Any:
    """The disk-space estimate (:func:`sst_interp.store.estimate_remaining`) of what is left to record at ``out``:
    each question not yet complete at a depth counts ``per_question`` recordings of ``sizes``. A run that cannot fit
    is a :class:`UsageError` (unless ``allow_low_disk``), raised before the writer creates anything."""

    before = completed_before(out)
    space = estimate_remaining(out, {k: sum(q.question_id not in before.get(k, set()) for q in questions)
                                     * per_question for k in depths}, **sizes)
    if not space.fits and not allow_low_disk:
        raise UsageError(f"{space.line()}; or pass --allow-low-disk to record anyway")
    return space


def report_resume(report: Any) -> None:
    """Say what a resume found: damaged files and the question-depths that are recorded again."""
    if report.damaged:
        print(f"resume: {len(report.damaged)} damaged file(s) failed verification: {', '.join(report.damaged[:5])}"
              + (" ..." if len(report.damaged) > 5 else ""))
    if report.rebuilt:
        print(f"resume: rebuilt {', '.join(report.rebuilt)} from the rows that pass their checks (none of its "
              "damaged bytes kept)")
    redo = sum(len(ids) for ids in report.redo.values())
    if redo:
        print(f"resume: {redo} question-depth(s) whose files were damaged or missing are recorded again")


@contextmanager
def open_run(out: Path, identity: dict[str, Any], extra: dict[str, Any], questions: list[Any],
             ranks: Ranks) -> Iterator[Any]:
    """The run's writer for this rank, open until every rank has closed its own.

    Rank 0 creates or resumes the run and writes the questions table; ranks 1.. join it afterwards. On entry every
    rank has read the same manifest (nobody commits before the second barrier), so they split the same remaining
    work; on exit every writer has committed its batches.
    """

    def open_main() -> Any:
        writer = RunWriter.create_or_resume(out, identity, extra, world_size=ranks.world_size)
        try:
            report_resume(writer.report)
            writer.write_questions(questions_to_frame(questions))
        except BaseException:
            writer.close()
            raise
        return writer

    opened = ranks.run_on_main(open_main)  # ranks 1.. wait in here until rank 0 has opened the run
    writer = opened if ranks.is_main else RunWriter.join(out, identity, extra, ranks.rank, ranks.world_size)
    ranks.barrier()
    with writer:
        yield writer
    ranks.barrier()


def run_summary(out: Path, depths: list[int], ranks: Ranks) -> dict[int, float]:
    """Rank 0 prints the run's summary; every rank returns its accuracy per depth."""

    return print_summary(out, depths, show=ranks.is_main)

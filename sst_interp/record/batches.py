"""The batch loop every fixed-depth recording shares, an SST's (:mod:`sst_interp.record.runner`) and a looping
family's (:mod:`sst_interp.record.families`): the intervention's first batch checked before anything is written, the
run opened or resumed, this rank's share of the remaining batches recorded and submitted, the summary printed.

What differs between the two paths is only how one batch is recorded (``record_batch``) and what the manifest says
(``extra``); the order of the batches, the resume, the split between ranks and the checks are this module's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sst_interp.interventions import require_sites
from sst_interp.interventions.sites import SITES_KEY
from sst_interp.kernels.progress import progress
from sst_interp.record.ranks import Ranks, batch_cost, batches_of_work, share_of_work
from sst_interp.record.rundir import completed_before, open_run, run_summary

#: ``(questions, depth) -> (the writer's submit keywords, the batch's manifest keys or None)``.
BatchRecorder = Callable[[list[Any], int], tuple[dict[str, Any], "dict[str, Any] | None"]]


def record_batches(out: Path, questions: list[Any], depths: list[int], batch_size: int, record_batch: BatchRecorder,
                   *, identity: dict[str, Any], extra: dict[str, Any], ranks: Ranks, space: Any,
                   check_sites: Callable[[dict[str, Any] | None], None] | None = None,
                   desc: str = "record") -> dict[int, float]:
    """Record every question at every depth of ``depths`` into the run at ``out`` (created or resumed), in batches
    of ``batch_size``; returns accuracy per depth (of the whole run, on every rank).

    Args:
        record_batch: records one batch at one depth (:data:`BatchRecorder`).
        identity, extra: the run identity (what must match to resume) and the other manifest keys.
        ranks: this process's place; each rank records its :func:`~sst_interp.record.ranks.share_of_work`.
        space: the disk-space estimate already checked (:func:`~sst_interp.record.rundir.checked_space`), printed.
        check_sites: given for an intervened run: the first batch at the deepest depth with work left is recorded
            before the run directory is created or resumed, and ``check_sites`` receives its manifest keys (it
            raises for a rule that changed no site, so nothing is written); that batch is then submitted, not
            recorded again.
        desc: the progress bar's label.
    """
    first = None
    if check_sites is not None:
        before = completed_before(out)
        work = share_of_work(batches_of_work({k: [q for q in questions if q.question_id not in before.get(k, set())]
                                              for k in depths}, depths, batch_size), ranks, cost=batch_cost)
        if work:
            # the first batch at the deepest depth: every iteration a rule may name exists there
            depth, batch = next(item for item in work if item[0] == max(d for d, _ in work))
            submission, meta = record_batch(batch, depth)
            check_sites(meta)
            first = ([q.question_id for q in batch], depth, submission, meta)
    with open_run(out, identity, extra, questions, ranks) as writer:
        remaining = {k: [q for q in questions if q.question_id not in writer.completed(k)] for k in depths}
        if ranks.is_main:
            done = sum(len(questions) - len(v) for v in remaining.values())
            print(f"{space.line()}; {done} of {len(questions) * len(depths)} question-depths already recorded in "
                  f"{out}" + (f"; {ranks.world_size} processes share the rest" if ranks.distributed else ""))
        mine = share_of_work(batches_of_work(remaining, depths, batch_size), ranks, cost=batch_cost)
        total = sum(len(batch) for _, batch in mine)
        label = f"{desc} (rank 0 of {ranks.world_size})" if ranks.distributed else desc
        with progress(total=total, unit="q", desc=label, disable=total == 0 or not ranks.is_main) as bar:
            for depth, batch in mine:
                bar.set_postfix_str(f"depth {depth}")
                ids = [q.question_id for q in batch]
                if first is not None and first[:2] == (ids, depth):
                    (_, _, submission, meta), first = first, None
                else:
                    submission, meta = record_batch(batch, depth)
                writer.submit(depth, ids, **submission, meta=meta)
                bar.update(len(batch))
    return run_summary(out, depths, ranks)


def sites_check(allow_empty_sites: bool) -> Callable[[dict[str, Any] | None], None]:
    """The ``check_sites`` of an intervened run: refuses (a :class:`~sst_interp.kernels.errors.UsageError`) a batch
    whose rule changed no site, unless ``--allow-empty-sites``."""

    def check(meta: dict[str, Any] | None) -> None:
        require_sites(meta[SITES_KEY] if meta else None, allow_empty_sites)

    return check

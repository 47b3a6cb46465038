"""Recording with several processes: which process this is, and the few points where the processes wait for each
other.

``torchrun --nproc-per-node N -m sst_interp.record ...`` (or Slurm's ``srun`` with the same environment variables:
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) starts N copies of the command. Each
loads the model on its own device, takes its share of the batches (:func:`share_of_work`), and writes its own
shards into the one run directory (:class:`sst_interp.store.RunWriter` in its multi-process mode).

The processes only synchronise (three barriers and a small broadcast), they never exchange tensors, so the process
group is always gloo, whatever device the model runs on: no NCCL set-up is needed to record on GPUs.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import torch.distributed as dist

from sst_interp.kernels.processes import Ranks, join_process_group, ranks_from_environment

__all__ = ["Ranks", "batch_cost", "batches_of_work", "process_group", "ranks_from_environment",
           "share_of_work"]

T = TypeVar("T")

# A rank that finished its share waits at the last barrier for the slowest one; CodeACT episodes on a big model
# can keep it waiting for hours (torchrun stops every rank as soon as one fails, so this does not hide a crash).
BARRIER_TIMEOUT = datetime.timedelta(hours=48)


@contextmanager
def process_group(ranks: Ranks) -> Iterator[Ranks]:
    """Join the gloo process group of ``ranks`` for the duration (nothing when recording alone); always left."""
    if not ranks.distributed:
        yield ranks
        return

    join_process_group("gloo", ranks.rank, ranks.world_size, BARRIER_TIMEOUT)
    try:
        yield ranks
    finally:
        dist.destroy_process_group()


def batches_of_work(remaining: dict[int, Sequence[Any]], depths: Sequence[int],
                    batch_size: int) -> list[tuple[int, list[Any]]]:
    """The batches a single process would record, in its order: for each depth, its remaining questions in
    slices of ``batch_size``. Returns ``[(depth, questions), ...]``."""
    return [(depth, list(remaining[depth][start : start + batch_size]))
            for depth in depths for start in range(0, len(remaining[depth]), batch_size)]


def share_of_work(work: Sequence[T], ranks: Ranks, cost: Callable[[T], float] | None = None) -> list[T]:
    """This rank's share of ``work``, in the order of ``work``.

    Items are dealt out greedily, the costliest first, each to the rank with the least cost so far (ties: the
    lowest rank; equal costs deal round-robin). Whole batches are dealt, never questions: left padding makes recorded
    values depend on a batch's members, so keeping every batch as a single process forms it is what makes an
    N-process run equal the single-process run of the same command. Every rank computes ``work`` from the same
    manifest, so the shares are disjoint and together cover it.

    Args:
        work: the items (:func:`batches_of_work`'s ``(depth, questions)`` pairs, or questions).
        ranks: this process's place.
        cost: an item's relative cost (default 1 each); :func:`batch_cost` for batches.
    """
    if not ranks.distributed:
        return list(work)
    costs = [1.0 if cost is None else float(cost(item)) for item in work]
    loads = [0.0] * ranks.world_size
    owner = [0] * len(work)
    for index in sorted(range(len(work)), key=lambda i: -costs[i]):  # stable: equal costs keep their order
        rank = min(range(ranks.world_size), key=lambda r: (loads[r], r))
        owner[index] = rank
        loads[rank] += costs[index]
    return [item for item, rank in zip(work, owner) if rank == ranks.rank]


def batch_cost(item: tuple[int, Sequence[Any]]) -> float:
    """The relative cost of recording one ``(depth, questions)`` batch: questions x depth (each generated token
    runs ``depth`` iterations of the decoder)."""
    depth, questions = item
    return float(depth * len(questions))

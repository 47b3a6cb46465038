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
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sst_interp.errors import UsageError

T = TypeVar("T")

# A rank that finished its share waits at the last barrier for the slowest one; CodeACT episodes on a big model
# can keep it waiting for hours (torchrun stops every rank as soon as one fails, so this does not hide a crash).
BARRIER_TIMEOUT = datetime.timedelta(hours=48)


@dataclass(frozen=True)
class Ranks:
    """This process's place among the recording processes (rank 0 of 1 when recording alone).

    Args:
        rank: global rank, 0..world_size-1.
        world_size: number of processes.
        local_rank: rank on this machine (picks the GPU: ``cuda:<local_rank>``).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, which opens (and resumes) the run and prints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether several processes record together."""
        return self.world_size > 1

    def describe(self) -> str:
        """``rank r of n`` (for messages)."""
        return f"rank {self.rank} of {self.world_size}"

    def say(self, text: str) -> None:
        """Print ``text`` on rank 0 only (one copy of each message, not N)."""
        if self.is_main:
            print(text)

    def barrier(self) -> None:
        """Wait until every rank reaches this point (nothing when recording alone)."""
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def run_on_main(self, action: Callable[[], T]) -> T | None:
        """Run ``action`` on rank 0 only, then let every rank go on together; when it raises on rank 0, every rank
        raises too (a :class:`UsageError` with the same message, so that bad input ends all of them with exit 2
        rather than leaving ranks 1.. waiting). Returns ``action()`` on rank 0, None elsewhere."""
        if not self.distributed:
            return action()
        import torch.distributed as dist

        result, failure = None, None
        error: BaseException | None = None
        if self.is_main:
            try:
                result = action()
            except BaseException as err:  # re-raised below, after the other ranks have heard of it
                error = err
                failure = [type(err).__name__, str(err), isinstance(err, UsageError)]
        message = [failure]
        dist.broadcast_object_list(message, src=0)
        if error is not None:
            raise error
        if message[0] is not None:
            name, text, usage = message[0]
            if usage:
                raise UsageError(text)
            raise RuntimeError(f"rank 0 failed ({name}: {text}); see its output")
        return result


def ranks_from_environment(environ: dict[str, str] | None = None) -> Ranks:
    """The :class:`Ranks` that ``torchrun`` (or ``srun`` with its variables) describes in the environment; rank 0
    of 1 when ``WORLD_SIZE`` is unset. Inconsistent values are a :class:`UsageError`."""
    env = os.environ if environ is None else environ
    try:
        world = int(env.get("WORLD_SIZE", "1"))
        rank = int(env.get("RANK", "0"))
        local = int(env.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise UsageError(f"WORLD_SIZE, RANK and LOCAL_RANK must be integers (got {env.get('WORLD_SIZE')!r}, "
                         f"{env.get('RANK')!r}, {env.get('LOCAL_RANK')!r}); launch with torchrun") from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise UsageError(f"RANK={rank} and WORLD_SIZE={world} do not describe a process group; launch with torchrun")
    return Ranks(rank, world, local)


@contextmanager
def process_group(ranks: Ranks) -> Iterator[Ranks]:
    """Join the gloo process group of ``ranks`` for the duration (nothing when recording alone); always left."""
    if not ranks.distributed:
        yield ranks
        return
    import torch.distributed as dist

    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise UsageError(f"WORLD_SIZE={ranks.world_size} but {name} is unset; launch with torchrun, or set "
                             "MASTER_ADDR and MASTER_PORT as torchrun does")
    dist.init_process_group("gloo", rank=ranks.rank, world_size=ranks.world_size, timeout=BARRIER_TIMEOUT)
    try:
        yield ranks
    finally:
        dist.destroy_process_group()


def rank_device(device: str, ranks: Ranks) -> str:
    """The device of this rank: ``cuda`` becomes ``cuda:<local_rank>`` when several processes record."""
    if ranks.distributed and device == "cuda":
        return f"cuda:{ranks.local_rank}"
    return device


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

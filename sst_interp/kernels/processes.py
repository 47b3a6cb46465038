"""A process's place among several started by ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), and the
collectives that ``record`` and ``train`` both use: a barrier, and running something on rank 0 whose failure every
rank then raises. :mod:`sst_interp.record.ranks` and :mod:`sst_interp.train.distributed` build on it.

``torch.distributed`` is imported only when several processes run, so a single process never touches it.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch.distributed as dist

from sst_interp.kernels.errors import UsageError

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process's place among the processes of one launch (rank 0 of 1 when running alone).

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
        """Whether this is rank 0, the one that writes and prints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether several processes run together."""
        return self.world_size > 1

    def say(self, text: str) -> None:
        """Print ``text`` on rank 0 only (one copy of each message, not N)."""
        if self.is_main:
            print(text)

    def barrier(self) -> None:
        """Wait until every rank reaches this point (nothing when running alone)."""
        if self.distributed:
            dist.barrier()

    def run_on_main(self, action: Callable[[], T]) -> T | None:
        """Run ``action`` on rank 0 only while the others wait; when it raises there, every rank raises (a
        :class:`UsageError` with the same message for bad input, so that every process exits with code 2 rather than
        waiting). Returns ``action()`` on rank 0 and ``None`` elsewhere."""
        if not self.distributed:
            return action()

        result, error, failure = None, None, None
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


def ranks_from_environment(environ: Mapping[str, str] | None = None) -> Ranks:
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


#: Seconds a process waits for the others to join its group (``SST_INTERP_JOIN_TIMEOUT`` overrides it). Joining
#: is bounded on its own, apart from the long timeout of the later barriers: a peer that never starts (a wrong
#: ``MASTER_ADDR``, a missing node) is then a clear error within a minute instead of a wait without end.
DEFAULT_JOIN_TIMEOUT_S = 60.0
JOIN_TIMEOUT_VARIABLE = "SST_INTERP_JOIN_TIMEOUT"


def join_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Seconds to wait for the process group to form (``SST_INTERP_JOIN_TIMEOUT``, default 60); a bad value is
    a :class:`UsageError`."""
    env = os.environ if environ is None else environ
    text = env.get(JOIN_TIMEOUT_VARIABLE)
    if text is None:
        return DEFAULT_JOIN_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise UsageError(f"{JOIN_TIMEOUT_VARIABLE}={text!r} must be a positive number of seconds")
    return seconds


def join_process_group(backend: str, rank: int, world_size: int, timeout: Any) -> None:
    """Join the process group of ``rank`` of ``world_size`` through ``MASTER_ADDR``/``MASTER_PORT``.

    The rendezvous waits at most :func:`join_timeout` seconds for every process; ``timeout`` (a timedelta) is the
    group's own timeout for its later collectives. A missing variable, or peers that do not all arrive in time, is a
    :class:`UsageError` naming ``MASTER_ADDR`` and ``MASTER_PORT``.
    """
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise UsageError(f"WORLD_SIZE={world_size} but {name} is unset; launch with torchrun, or set "
                             "MASTER_ADDR and MASTER_PORT as torchrun does")
    seconds = join_timeout()
    address, port_text = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(f"MASTER_PORT={port_text!r} is not a port number; launch with torchrun") from None
    deadline = time.monotonic() + seconds

    def refuse(reason: str) -> UsageError:
        return UsageError(f"rank {rank} of {world_size} could not form the process group at MASTER_ADDR={address} "
                          f"MASTER_PORT={port} within {seconds:g} s ({reason}); start every process (torchrun "
                          f"does), check MASTER_ADDR and MASTER_PORT, or wait longer with "
                          f"{JOIN_TIMEOUT_VARIABLE}=SECONDS")

    if rank != 0 and not _wait_for_listener(address, port, deadline):
        # checked here, in Python: torch's own client retries log several lines per attempt on stderr
        raise refuse("nothing answers there")
    try:
        # rank 0 serves the store and waits for every other rank to connect; the others connect to it
        remaining = datetime.timedelta(seconds=max(deadline - time.monotonic(), 1.0))
        store = dist.TCPStore(address, port, world_size, rank == 0, timeout=remaining, wait_for_workers=True)
    except dist.DistError as err:
        raise refuse(" ".join(str(err).split())[:160]) from None
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)


def _wait_for_listener(address: str, port: int, deadline: float) -> bool:
    """Whether a TCP connection to ``address:port`` succeeds before ``deadline`` (time.monotonic), retrying."""
    while True:
        try:
            with socket.create_connection((address, port), timeout=1.0):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

"""Data-parallel training over several processes (``torchrun`` or ``accelerate launch``).

``torchrun --nproc-per-node N -m sst_interp.train ...`` (and ``accelerate launch --multi_gpu --num_processes N -m
sst_interp.train ...``, which runs torchrun's launcher) start N copies of the command with ``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in their environment. Each copy joins one process group (gloo
on the CPU; NCCL for CUDA tensors plus gloo for the small CPU messages on GPUs), loads the model on its device
(``cuda:<LOCAL_RANK>`` on GPUs) and trains a full replica of the trainable parameters (LoRA + SST).

One optimiser step reads the window of ``grad_accum * N`` micro-batches that a single process with
``grad_accum * N`` micro-batches per step would read (the same global batch): rank r takes the positions ``start +
r, start + r + N, ...`` of the window. Each micro-batch's summed loss is divided by the labelled-token count of the
*whole* window (every rank knows it without communication: the data order is deterministic), and after the local
backward passes the gradients are summed over the ranks (one all-reduce per optimiser step). So every rank holds the
gradient the single process would hold, up to the order of float additions; clipping sees that global gradient and
every rank takes the same AdamW step, so the replicas stay identical (checked at every save). The logged train
loss and the validation loss (validation is sharded the same way) are all-reduced too.

Why a hand-written all-reduce rather than ``DistributedDataParallel`` or accelerate's ``Accelerator``: the
gradients are those of the adapter and SST parameters only (a few MB to a few tens of MB), reduced once per
optimiser step, so DDP's bucketing and overlap buy nothing measurable, while wrapping the model would have to route
the two-pass forward (the decoder is called twice per micro-batch), the checkpointed layers with their replayed SST
context and peft's saving through a wrapper's ``forward``. Summing by hand also states the normalisation exactly
(DDP averages, which would need the loss scaled by N). Accelerate's own launcher is still usable, and its
``PartialState`` is not needed: on a machine without CUDA it does not join the process group unless told the run
is a CPU run, and its multi-CPU launcher needs MPI (``accelerate launch --cpu --num_processes 2`` starts a single
process); torch's own gloo group covers both.

Only rank 0 writes (logs, ``best/``, ``last/``, ``summary.json``, the run meta); the others wait for it. Every rank
loads ``last/`` to resume. The random generators of all ranks (dropout) are saved in ``last/`` so that a resumed
run continues exactly; the number of processes is part of the run's identity (``world_size`` in
``train_config.json``): resuming with another number is refused, since the per-rank dropout streams could not be
carried over.

With ``--fsdp`` the frozen backbone weights are sharded over the processes with torch's FSDP2 (``fully_shard``: one
unit per decoder layer, one for the decoder's embeddings and final norm), so each process holds 1/N of them and
gathers a unit's weights just before it runs (in each of the two passes, and again in the backward); since every
forward is then a collective, validation runs as many forwards on every rank. The trainable LoRA and SST parameters are left out of the sharding (``ignored_params``): they stay
replicated, float32 where they are, reduced by the all-reduce above, and saved as without sharding. A gathered weight
is a bit-exact copy, so a sharded run computes exactly what an unsharded one does. Left unsharded: a tied LM head's
shared embedding matrix (the head runs outside the decoder) and an untied LM head. The backbone is loaded on the CPU,
sharded, then moved to the rank's GPU, so no GPU ever holds all of it (this CUDA path is written but was only run
on the CPU, over gloo). accelerate's own FSDP plugin (``accelerate
launch --use_fsdp``, ``distributed_type: FSDP``) is not used: its settings would be ignored, so that launch is
refused with a one-line error that points to ``--fsdp``. 4-bit NF4 weights (QLoRA) cannot be sharded this way;
``--fsdp`` trains plain LoRA on bfloat16 weights.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.processes import Ranks, join_process_group, ranks_from_environment
from sst_interp.model.adapters import decoder_layers

if TYPE_CHECKING:
    from sst_interp.train.modeling import TrainModel

#: How long a rank waits at a collective for the others (rank 0 writing a large checkpoint, a slow validation). A
#: crash does not hide behind it: torchrun stops every rank as soon as one fails.
TIMEOUT = datetime.timedelta(hours=2)

#: Environment variables that ``accelerate launch`` sets for launch modes this loop does not implement.
UNSUPPORTED_LAUNCHES: dict[str, str] = {
    "ACCELERATE_USE_FSDP": "FSDP (--use_fsdp)",
    "ACCELERATE_USE_DEEPSPEED": "DeepSpeed (--use_deepspeed)",
    "ACCELERATE_USE_MEGATRON_LM": "Megatron-LM (--use_megatron_lm)",
}
#: Variables an MPI launcher (mpirun, as ``accelerate launch --cpu --mpirun_hostfile`` uses) sets instead of
#: torchrun's.
MPI_WORLD_SIZE = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


@dataclass(frozen=True)
class DataParallel(Ranks):
    """This process's place among the training processes (rank 0 of 1 when training alone), with the collectives
    data-parallel training needs on top of :class:`sst_interp.kernels.processes.Ranks` (barrier, run on rank 0)."""

    @property
    def enabled(self) -> bool:
        """Whether several processes train together."""
        return self.distributed

    # -------------------------------------------------------------------------------------------- the data
    def share(self, positions: Sequence[int]) -> list[int]:
        """This rank's part of a window of global micro-batch positions: items ``rank, rank + N, ...``."""
        return list(positions[self.rank :: self.world_size])

    # -------------------------------------------------------------------------------------------- collectives
    def sum(self, values: Sequence[float]) -> list[float]:
        """``values`` summed over the ranks, in float64 (returned unchanged when training alone)."""
        if not self.enabled:
            return [float(v) for v in values]

        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def sum_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Replace every parameter's gradient by its sum over the ranks (one all-reduce per device and dtype).

        A parameter without a gradient on some ranks counts as zero there; one without a gradient on every rank
        keeps none (AdamW then skips it, as a single process would).
        """
        if not self.enabled:
            return

        present = torch.tensor([p.grad is not None for p in params], dtype=torch.int32)
        dist.all_reduce(present, op=dist.ReduceOp.SUM)
        groups: dict[tuple[torch.device, torch.dtype], list[torch.nn.Parameter]] = {}
        for param, count in zip(params, present.tolist()):
            if count == 0:
                continue
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            groups.setdefault((param.grad.device, param.grad.dtype), []).append(param)
        for members in groups.values():
            grads = [p.grad for p in members]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            offset = 0
            for grad in grads:
                grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
                offset += grad.numel()

    def broadcast_parameters(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Copy rank 0's values of ``params`` to every rank (replicas start identical whatever the seeding)."""
        if not self.enabled:
            return

        with torch.no_grad():
            for param in params:
                dist.broadcast(param.data, src=0)

    def check_in_sync(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Raise when the replicas of ``params`` differ between ranks (they take identical steps by design)."""
        if not self.enabled:
            return

        with torch.no_grad():
            local = torch.stack([p.detach().double().sum() for p in params]).cpu() if params else torch.zeros(0)
        values = [torch.zeros_like(local) for _ in range(self.world_size)]
        dist.all_gather(values, local)
        bad = [rank for rank, value in enumerate(values) if not torch.equal(value, values[0])]
        if bad:
            raise RuntimeError(f"the trained parameters of ranks {bad} differ from rank 0's; the replicas went out "
                               f"of sync (a nondeterministic collective?)")

    def gather_tensor(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's value of a CPU tensor of the same shape and dtype on all ranks, by rank."""
        if not self.enabled:
            return [tensor]

        values = [torch.zeros_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(values, tensor.contiguous())
        return values

    # -------------------------------------------------------------------------------------------- random state
    def rng_tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """Every rank's random generator states (CPU, and this rank's CUDA device), keyed ``rng.rank{r}.cpu`` /
        ``rng.rank{r}.cuda``; empty when training alone (:func:`sst_interp.train.state.rng_tensors` covers it)."""
        if not self.enabled:
            return {}
        out: dict[str, torch.Tensor] = {}
        for rank, state in enumerate(self.gather_tensor(torch.get_rng_state())):
            out[f"rng.rank{rank}.cpu"] = state
        if device.type == "cuda":
            for rank, state in enumerate(self.gather_tensor(torch.cuda.get_rng_state(device))):
                out[f"rng.rank{rank}.cuda"] = state
        return out

    def restore_rng(self, tensors: Mapping[str, torch.Tensor], device: torch.device) -> None:
        """Restore this rank's generator states saved by :meth:`rng_tensors` (nothing when training alone)."""
        if not self.enabled:
            return
        key = f"rng.rank{self.rank}.cpu"
        if key not in tensors:
            raise UsageError(f"the saved training state has no random state for rank {self.rank}; resume with the "
                             f"number of processes the run was started with, or start a new --out")
        torch.set_rng_state(tensors[key])
        cuda = tensors.get(f"rng.rank{self.rank}.cuda")
        if cuda is not None and device.type == "cuda":
            torch.cuda.set_rng_state(cuda, device)


def rank_seed(seed: int, rank: int) -> int:
    """Seed of rank ``rank``'s generator after the (identical) initialisation: its own dropout stream."""
    return (int(seed) + 1_000_003 * int(rank)) % (2**63)


# ------------------------------------------------------------------------------------------------ the launch
def from_environment(environ: Mapping[str, str] | None = None) -> DataParallel:
    """The :class:`DataParallel` that ``torchrun`` (or ``accelerate launch``) describes in the environment; rank 0
    of 1 when ``WORLD_SIZE`` is unset.

    Raises:
        UsageError: inconsistent values, an MPI launch (not supported: use torchrun), or an accelerate launch mode
            this loop does not implement (FSDP, DeepSpeed, Megatron-LM).
    """
    env = os.environ if environ is None else environ
    for name, what in UNSUPPORTED_LAUNCHES.items():
        if env.get(name, "false").lower() == "true":
            raise UsageError(f"accelerate launch asked for {what}, which sst_interp.train does not use; launch with "
                             f"accelerate launch --multi_gpu --num_processes N (or torchrun --nproc-per-node N) and "
                             f"pass --fsdp to shard the frozen backbone weights over the processes")
    ranks = ranks_from_environment(env)
    if "WORLD_SIZE" not in env:
        for name in MPI_WORLD_SIZE:
            if int(env.get(name, "1") or "1") > 1:
                raise UsageError(f"{name}={env[name]}: an MPI launch, which sst_interp.train does not join; launch "
                                 f"with torchrun --nproc-per-node N (or accelerate launch --multi_gpu)")
    return DataParallel(ranks.rank, ranks.world_size, ranks.local_rank)


def single_process_accelerate_warning(environ: Mapping[str, str] | None = None) -> str | None:
    """A warning when ``accelerate launch`` was asked for several processes but started this one alone (its simple
    launcher, used without ``--multi_gpu`` on a machine without several GPUs, sets ``MASTER_ADDR`` and starts one
    process); ``None`` otherwise."""
    env = os.environ if environ is None else environ
    if "ACCELERATE_USE_CPU" in env and "MASTER_ADDR" in env and "WORLD_SIZE" not in env:
        return ("warning: accelerate launch started this single process although several were asked for; for "
                "data-parallel training pass --multi_gpu (it also runs CPU processes, over gloo) or use torchrun "
                "--nproc-per-node N")
    return None


def join(dp: DataParallel, device: torch.device) -> bool:
    """Join the process group of ``dp`` for training on ``device`` (gloo on the CPU; NCCL for CUDA tensors and gloo
    for CPU ones on GPUs). Returns whether this call created it (an existing group, e.g. one the caller set up, is
    used as it is after checking its size)."""
    if not dp.enabled:
        return False

    if dist.is_initialized():
        if dist.get_world_size() != dp.world_size or dist.get_rank() != dp.rank:
            raise UsageError(f"the existing process group (rank {dist.get_rank()} of {dist.get_world_size()}) does "
                             f"not match RANK={dp.rank}, WORLD_SIZE={dp.world_size}")
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
        backend = "cpu:gloo,cuda:nccl"
    else:
        backend = "gloo"
    join_process_group(backend, dp.rank, dp.world_size, TIMEOUT)
    return True


def shard_frozen_backbone(model: TrainModel, device: torch.device) -> str:
    """Shard the frozen weights of ``model``'s decoder over the process group with FSDP2, leaving the trainable
    (LoRA, SST) parameters and a tied embedding replicated; then move everything still elsewhere to ``device``.

    Returns:
        A one-line summary of what this process holds.
    """

    backbone = model.backbone
    decoder = backbone.get_decoder()
    head = backbone.get_output_embeddings()
    head_weight = getattr(head, "base_layer", head).weight
    embedding = backbone.get_input_embeddings().weight
    keep = {id(p) for p in model.lora_parameters() + model.sst_parameters()}
    if head_weight is embedding:
        keep.add(id(embedding))  # the head, outside the decoder, reads it too
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    for unit in [*decoder_layers(backbone), decoder]:
        # reshard after every forward, the decoder (root) too: then every rank holds only its shards between
        # forwards, and rank 0 saving alone (state_dict reshards an unsharded unit, locally) cannot put the ranks
        # out of step on the next all-gather
        fully_shard(unit, mesh=mesh, reshard_after_forward=True,
                    ignored_params={p for p in unit.parameters() if id(p) in keep})
    with torch.no_grad():
        for module in backbone.modules():
            for param in module.parameters(recurse=False):
                if not isinstance(param, DTensor) and param.device != device:
                    param.data = param.data.to(device)
            for name, buffer in module.named_buffers(recurse=False):
                if buffer.device != device:
                    setattr(module, name, buffer.to(device))
    sharded = [p for p in backbone.parameters() if isinstance(p, DTensor)]
    full = sum(p.numel() * p.element_size() for p in sharded)
    local = sum(p.to_local().numel() * p.element_size() for p in sharded)
    replicated = sum(p.numel() * p.element_size() for p in backbone.parameters() if not isinstance(p, DTensor))
    return (f"FSDP: {len(sharded)} frozen weight tensors ({full / 2**20:.1f} MiB) sharded over "
            f"{torch.distributed.get_world_size()} processes, {local / 2**20:.1f} MiB of them here; "
            f"{replicated / 2**20:.1f} MiB replicated (trainable parameters, LM head)")


def leave() -> None:
    """Leave the process group when one is joined (the command line calls it on exit)."""

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def say(dp: DataParallel, text: str, err: bool = True) -> None:
    """Print ``text`` on rank 0 only (to stderr unless ``err`` is False)."""
    if dp.is_main:
        print(text, file=sys.stderr if err else sys.stdout)

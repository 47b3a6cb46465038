"""The numerics fingerprint of a recording: every setting besides the command's own flags that changes the numbers
it records, part of the run identity so that a resume never mixes two numerics in one run.

Float sums depend on how a kernel splits them, and the split can depend on the device, the library versions, the
dtype, the CPU thread count (or on a GPU its architecture and whether deterministic algorithms are on), the batch
(left padding) and the attention implementation. The same ``record`` command on the default backbone gave hidden
states differing by up to 0.02 between 1 and 2 CPU threads on one machine (and identical ones on another). :func:`numerics_fingerprint` names these settings;
:func:`check_numerics` refuses a resume whose fingerprint differs with one line that names the setting and how to
match it; :func:`check_ranks_agree` makes every ``torchrun`` process record with one fingerprint.

``--threads N`` (:func:`cpu_threads`) sets the CPU thread count of ``record``; without it torch's own count stays
(``OMP_NUM_THREADS`` when set, else the cores torch finds), as before the flag existed, and is recorded.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import transformers

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.processes import Ranks
from sst_interp.store.manifest import MANIFEST_NAME, normalise, read_manifest

#: The fingerprint's fields, in the order docs/format.md lists them. Fields that do not apply are null: ``threads``
#: and ``cpu_capability`` where no layer computes on the CPU, ``cuda_capability`` and ``cuda_version`` where none
#: computes on a GPU.
FIELDS = ("device_kind", "device_name", "cpu_capability", "threads", "cuda_capability", "cuda_version",
          "deterministic_algorithms", "torch", "transformers", "dtype", "batch_size", "attention", "decode")
#: What a field absent from an older run's fingerprint was: runs recorded before ``--compile`` decoded eager.
ABSENT_MEANS = {"decode": "eager"}

#: How to match each field on a resume; ``{old}`` is the run's value.
_HINTS = {
    "device_kind": "record on the same device (--device {old}), or pick another --out",
    "device_name": "resume on a machine with the same device ({old}), or pick another --out",
    "cpu_capability": "resume on a CPU with the same vector instructions ({old}), or pick another --out",
    "threads": "pass --threads {old} to resume, or pick another --out",
    "cuda_capability": "resume on a GPU of compute capability {old}, or pick another --out",
    "cuda_version": "resume with a torch built for CUDA {old}, or pick another --out",
    "deterministic_algorithms": "call torch.use_deterministic_algorithms({old}) before recording, or pick another "
                                "--out",
    "torch": "install torch=={old} to resume, or pick another --out",
    "transformers": "install transformers=={old} to resume, or pick another --out",
    "dtype": "pass --dtype {old} to resume, or pick another --out",
    "batch_size": "pass --batch-size {old} to resume, or pick another --out",
    "attention": "load the model with attention {old} to resume, or pick another --out",
    "decode": "pass --compile {flag} to resume, or pick another --out",
}


def numerics_fingerprint(sst: Any, dtype: str, batch_size: int, decode: str = "eager") -> dict[str, Any]:
    """The fingerprint of recording with the loaded ``sst`` here and now: one value per name in :data:`FIELDS`.

    Args:
        sst: the loaded :class:`~sst_interp.model.sst.SSTModel` (its devices and attention implementation are read).
        dtype: the resolved compute dtype (``float32`` or ``bfloat16``).
        batch_size: questions per generation batch.
        decode: ``eager`` or ``compiled:<recipe>`` (:func:`sst_interp.record.completion.decode_kind`): a compiled step
            sums in another order, so its numbers differ from eager ones in the last bits.
    """

    kinds = _device_kinds(sst)
    on_cpu, on_gpu = "cpu" in kinds, "cuda" in kinds
    gpus = _gpu_indices(sst) if on_gpu else []
    names = sorted({torch.cuda.get_device_name(index) for index in gpus})
    if on_cpu:
        names.insert(0, cpu_name())
    capabilities = sorted({"{}.{}".format(*torch.cuda.get_device_capability(index)) for index in gpus})
    return {
        "device_kind": "+".join(kinds),
        "device_name": " + ".join(names) if names else None,
        "cpu_capability": torch.backends.cpu.get_cpu_capability() if on_cpu else None,
        "threads": torch.get_num_threads() if on_cpu else None,
        "cuda_capability": ",".join(capabilities) if on_gpu else None,
        "cuda_version": torch.version.cuda if on_gpu else None,
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": dtype,
        "batch_size": int(batch_size),
        "attention": str(getattr(sst.backbone.config, "_attn_implementation", None)),
        "decode": decode,
    }


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what :mod:`platform` reports)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown cpu"


def _device_kinds(sst: Any) -> list[str]:
    """The kinds of device the model computes on: the device map's (a model spread by ``--device-map``; weights
    offloaded to the disk compute on the main device), else the one device its inputs go to."""
    device_map = getattr(sst.backbone, "hf_device_map", None)
    kinds = {sst.device.type}
    for place in (device_map or {}).values():
        if isinstance(place, int) or str(place).startswith("cuda"):
            kinds.add("cuda")
        elif str(place) in ("cpu", "mps"):
            kinds.add(str(place))
    return sorted(kinds)


def _gpu_indices(sst: Any) -> list[int]:
    """Indices of the CUDA devices the model's weights are on."""

    return sorted({p.device.index if p.device.index is not None else torch.cuda.current_device()
                   for p in sst.backbone.parameters() if p.device.type == "cuda"})


def fingerprint_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Names of the fields whose values differ between two fingerprints, in :data:`FIELDS` order (then any other)."""
    names = list(FIELDS) + sorted((set(old) | set(new)) - set(FIELDS))
    return [name for name in names
            if old.get(name, ABSENT_MEANS.get(name)) != new.get(name, ABSENT_MEANS.get(name))]


def check_numerics(out: Path, fingerprint: dict[str, Any]) -> None:
    """Refuse to resume the run at ``out`` when its fingerprint differs from ``fingerprint``: one UsageError that
    names the first differing setting, both values, and how to match it. Nothing to check where ``out`` holds no
    readable manifest yet (a new run, or one whose lost manifest the writer rebuilds and then compares in full)."""

    if not (Path(out) / MANIFEST_NAME).is_file():
        return
    try:
        identity = read_manifest(Path(out)).get("identity")
    except ValueError:
        return  # not valid JSON: the writer refuses or rebuilds it with its own message
    if not isinstance(identity, dict):
        return
    old = identity.get("numerics")
    if not isinstance(old, dict):
        raise UsageError(f"--out {out} was recorded without a numerics fingerprint (an older sst-interp), so a "
                         "resume cannot be checked to compute the same numbers; pick another --out")
    new = normalise(fingerprint)
    differ = fingerprint_differences(old, new)
    if not differ:
        return
    name = differ[0]
    others = f" (and {', '.join(differ[1:])})" if len(differ) > 1 else ""
    was = old.get(name, ABSENT_MEANS.get(name))
    hint = _HINTS.get(name, "pick another --out").format(old=was, flag="off" if was == "eager" else "on")
    raise UsageError(f"--out {out} was recorded with {name}={was!r}, this command has "
                     f"{name}={new.get(name)!r}{others}, which changes the recorded numbers; {hint}")


def check_ranks_agree(fingerprint: dict[str, Any], ranks: Ranks) -> None:
    """Under torchrun, refuse to start when the processes' fingerprints differ (every rank raises the same
    UsageError, naming the first rank and setting that differ from rank 0's). Nothing when recording alone."""
    if not ranks.distributed:
        return

    every: list[Any] = [None] * ranks.world_size
    dist.all_gather_object(every, fingerprint)
    for rank, theirs in enumerate(every):
        differ = fingerprint_differences(every[0], theirs)
        if differ:
            name = differ[0]
            raise UsageError(f"rank {rank} records with {name}={theirs.get(name)!r} but rank 0 with "
                             f"{name}={every[0].get(name)!r}; every process of one run must compute the same "
                             "numbers: start them with the same settings (e.g. the same --threads)")


@contextmanager
def cpu_threads(threads: int | None) -> Iterator[int]:
    """Run the body with ``threads`` torch intra-op threads (None: torch's count as it is), restored afterwards;
    yields the count in effect.

    The inter-op pool is set to the same count where torch still allows it (before any parallel work in this
    process); where it does not, it stays: it runs independent operations side by side and changes no sum's order.
    """

    before = torch.get_num_threads()
    if threads is None:
        yield before
        return
    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != threads:
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:
            pass  # already started in this process (see the docstring): the numerics do not depend on it
    try:
        yield threads
    finally:
        torch.set_num_threads(before)

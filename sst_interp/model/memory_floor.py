"""The memory floor of a decode step: the least time a step can take on this machine (issue 48).

Decoding one position at a small batch is a matrix-vector product per weight matrix: every weight is read once and
each byte is used for about one multiply-add per row, so a step cannot run faster than the time to stream its
weights from memory. The benchmarks therefore state each decode time as a multiple of that floor, measured on the
machine they run on, rather than as a speed-up over eager decoding: the speed-up measures how slow a CPU's eager
matrix-vector product is, not how close the step is to what the machine can do.

Three pieces, each a small function:

- :func:`decode_bytes`: what one decode step reads (:class:`DecodeBytes`, from the model's parameters);
- :func:`probe_bandwidth`: a streaming read on the device, with the threads the run uses (:class:`Bandwidth`);
- :func:`floor_ratio`, :func:`goal_line`, :func:`break_even_steps`: the arithmetic the benchmarks print.

What counts as read per step (:class:`DecodeBytes`):

- every parameter of the decoder except the input embedding (the decoder layers, the SST's state-stream
  parameters inside them, the final norm), once per pass: an SST at depth k makes k passes per token;
- the LM head's parameters, once per pass that computes logits (once per token, or every iteration when
  recording logits per iteration); a head tied to the input embedding is counted once, as the head;
- one row of the input embedding per batch row (a gather, not a read of the table).

Not counted: the KV cache (a few KB per cached position and layer on the default backbone, about 80 MB against
54 GB at the 27B shape with a 160-position cache), activations, and the packed copies the CPU's frozen step makes of
the weights (it reads those instead of the originals: the same number of bytes).
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

#: The goal of the compiled step, as a multiple of the floor: what is left above the floor is the step's own
#: overhead (kernel dispatch, the attention, the cache, non-fused small kernels).
FLOOR_GOALS: dict[str, float] = {"cpu": 1.1, "cuda": 1.25}

#: The probe reads min(step bytes, this) bytes: past the last-level cache the rate no longer depends on the size,
#: and a 54 GB model on an 80 GB GPU has no room for a second copy of its weights.
PROBE_CAP_BYTES = 2 * 2**30


@dataclass(frozen=True)
class DecodeBytes:
    """Bytes one decode step reads from the model's weights (see the module docstring for what counts).

    Args:
        per_pass: the decoder's parameters except the input embedding, read by every pass.
        head: the LM head's parameters, read by every pass that computes logits.
        embedding_row: one row of the input embedding, read once per batch row and token.
    """

    per_pass: int
    head: int
    embedding_row: int

    def step(self, passes: int = 1, head_passes: int = 1, rows: int = 1) -> int:
        """Bytes of one decode step that makes ``passes`` passes, ``head_passes`` of them with logits, for
        ``rows`` batch rows (the weights are read once for all rows)."""
        if passes < 1 or not 0 <= head_passes <= passes or rows < 1:
            raise ValueError(f"need passes >= 1, 0 <= head_passes <= passes, rows >= 1; got {passes}, "
                             f"{head_passes}, {rows}")
        return passes * self.per_pass + head_passes * self.head + rows * self.embedding_row


def _nbytes(parameters: Iterable[torch.Tensor], skip: set[int]) -> int:
    """Bytes of the distinct tensors among ``parameters`` whose ids are not in ``skip``."""
    seen: dict[int, int] = {}
    for parameter in parameters:
        if id(parameter) not in skip:
            seen[id(parameter)] = parameter.numel() * parameter.element_size()
    return sum(seen.values())


def decode_bytes(model: nn.Module) -> DecodeBytes:
    """What one decode step of ``model`` reads: a Hugging Face causal LM, or an object holding one as ``backbone``
    (an :class:`~sst_interp.model.SSTModel`, whose converted layers carry its state-stream parameters)."""
    backbone = getattr(model, "backbone", model)
    embedding = backbone.get_input_embeddings()
    head = backbone.get_output_embeddings()
    head_ids = {id(p) for p in head.parameters()}
    embedding_ids = {id(p) for p in embedding.parameters()}
    weight = embedding.weight
    return DecodeBytes(per_pass=_nbytes(backbone.get_decoder().parameters(), embedding_ids | head_ids),
                       head=_nbytes(head.parameters(), set()),
                       embedding_row=weight.shape[1] * weight.element_size())


@dataclass(frozen=True)
class Bandwidth:
    """A streaming read, timed: ``probe_bytes`` read in ``seconds`` (the fastest of the repeats).

    Args:
        probe_bytes: bytes the probe read per repeat.
        seconds: the fastest repeat (other work on a shared machine only ever adds time).
        threads: the CPU threads torch used (the run's own setting).
        device: the device the probe read on, ``"cpu"`` or ``"cuda:0"``.
        machine: the processor's or GPU's name.
    """

    probe_bytes: int
    seconds: float
    threads: int
    device: str
    machine: str

    @property
    def bytes_per_s(self) -> float:
        return self.probe_bytes / self.seconds

    def floor_s(self, nbytes: int) -> float:
        """Seconds to read ``nbytes`` at this bandwidth: the floor of a step that reads them."""
        return nbytes / self.bytes_per_s

    def describe(self) -> str:
        """One line: the bandwidth, how it was measured, and where."""
        what = f"{self.threads} threads" if self.device == "cpu" else self.device
        return (f"bandwidth {self.bytes_per_s / 1e9:.1f} GB/s (sum of {self.probe_bytes / 1e9:.2f} GB float32 in "
                f"{1000 * self.seconds:.2f} ms, fastest repeat; {what}; {self.machine})")


def machine_name(device: str | torch.device = "cpu") -> str:
    """The GPU's name on CUDA; on the CPU the processor's model name (``/proc/cpuinfo``) and its logical cores."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} logical cores"


def probe_bandwidth(nbytes: int, device: str | torch.device = "cpu", repeats: int = 5,
                    cap: int = PROBE_CAP_BYTES, clock: Callable[[], float] = time.perf_counter) -> Bandwidth:
    """Time a streaming read of ``min(nbytes, cap)`` bytes on ``device``: ``sum`` of a float32 tensor that size,
    with the threads torch is set to use (call it where the run sets its threads), fastest of ``repeats`` after one
    untimed read (which faults the pages in). ``clock`` is for tests."""
    device = torch.device(device)
    elements = max(1, min(int(nbytes), int(cap)) // 4)
    buffer = torch.ones(elements, dtype=torch.float32, device=device)

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    buffer.sum()
    synchronize()
    best = math.inf
    for _ in range(repeats):
        started = clock()
        buffer.sum()
        synchronize()
        best = min(best, clock() - started)
    del buffer
    return Bandwidth(probe_bytes=elements * 4, seconds=best, threads=torch.get_num_threads(),
                     device=str(device), machine=machine_name(device))


def floor_ratio(seconds: float, floor_s: float) -> float:
    """``seconds`` as a multiple of the floor; NaN when either is not a positive number (not measured)."""
    if not (seconds > 0 and floor_s > 0):
        return math.nan
    return seconds / floor_s


def format_ratio(ratio: float) -> str:
    """A ratio as the tables print it: ``1.19x``; ``-`` when not measured (NaN)."""
    return "-" if math.isnan(ratio) else f"{ratio:.2f}x"


def floor_goal(device: str | torch.device) -> float:
    """The compiled step's goal as a multiple of the floor on ``device``'s type."""
    return FLOOR_GOALS["cuda" if torch.device(device).type == "cuda" else "cpu"]


def goal_line(compiled_ratios: Mapping[str, float], device: str | torch.device) -> str:
    """The benchmarks' goal line: the largest floor ratio among the compiled rows against the goal.

    ``compiled_ratios``: {row name: compiled seconds / floor seconds}. Rows not measured (NaN) are named and left
    out; with none measured the goal is "not measured"."""
    goal = floor_goal(device)
    where = "a GPU" if torch.device(device).type == "cuda" else "the CPU"
    measured = {name: ratio for name, ratio in compiled_ratios.items() if not math.isnan(ratio)}
    missing = sorted(set(compiled_ratios) - set(measured))
    tail = f" ({', '.join(missing)} not measured)" if missing else ""
    if not measured:
        return f"compiled <= {goal}x the floor on {where}: not measured{tail}"
    worst = max(measured, key=measured.get)
    verdict = "met" if measured[worst] <= goal else "NOT met"
    return (f"compiled <= {goal}x the floor on {where}: largest {format_ratio(measured[worst])} ({worst}): "
            f"{verdict}{tail}")


def break_even_steps(compile_s: float, eager_s: float, compiled_s: float) -> float:
    """Decode steps after which compiling has paid for itself: compile seconds over the seconds it saves per step.
    ``inf`` when it saves nothing; NaN when a time is not a positive number (noise larger than the steps timed)."""
    if not (eager_s > 0 and compiled_s > 0 and compile_s >= 0):
        return math.nan
    gain = eager_s - compiled_s
    if not gain > 0:
        return math.inf
    return compile_s / gain


@dataclass(frozen=True)
class FloorRow:
    """One benchmark row against the floor: seconds per decode step, eager and compiled.

    Args:
        name: the row's label (``plain``, ``sst d4``, ...).
        step_bytes: the bytes its step reads (:meth:`DecodeBytes.step`).
        floor_s: seconds to read them at the probed bandwidth (:meth:`Bandwidth.floor_s`).
        eager_s: seconds per decode step, eager.
        compiled_s: seconds per decode step, compiled; ``None`` where the row has no compiled variant.
        compile_s: seconds the compilation its compiled variant needed; ``None`` where unknown.
    """

    name: str
    step_bytes: int
    floor_s: float
    eager_s: float
    compiled_s: float | None = None
    compile_s: float | None = None

    @property
    def eager_x(self) -> float:
        return floor_ratio(self.eager_s, self.floor_s)

    @property
    def compiled_x(self) -> float:
        return math.nan if self.compiled_s is None else floor_ratio(self.compiled_s, self.floor_s)

    @property
    def speed_up(self) -> float:
        """Eager over compiled (no goal attached)."""
        if self.compiled_s is None or not (self.compiled_s > 0 and self.eager_s > 0):
            return math.nan
        return self.eager_s / self.compiled_s

    @property
    def break_even(self) -> float:
        """Decode steps after which the compilation has paid for itself; NaN where either time is unknown."""
        if self.compiled_s is None or self.compile_s is None:
            return math.nan
        return break_even_steps(self.compile_s, self.eager_s, self.compiled_s)


def format_steps(steps: float) -> str:
    """A step count as the tables print it: ``2,480``; ``never`` for no gain; ``-`` when unknown."""
    if math.isnan(steps):
        return "-"
    return "never" if math.isinf(steps) else f"{math.ceil(steps):,}"


def format_floor_table(rows: Iterable[FloorRow]) -> str:
    """The rows as a table: bytes read, floor, eager and compiled in ms per step and as multiples of the floor,
    the speed-up over eager, the break-even in decode steps (columns as wide as their widest cell)."""
    header = ("row", "reads GB", "floor ms", "eager ms", "compiled ms", "eager/floor", "compiled/floor",
              "speed-up", "break-even steps")
    cells = [header]
    for row in rows:
        compiled_ms = "-" if row.compiled_s is None else f"{1000 * row.compiled_s:.1f}"
        cells.append((row.name, f"{row.step_bytes / 1e9:.3f}", f"{1000 * row.floor_s:.1f}",
                      f"{1000 * row.eager_s:.1f}", compiled_ms, format_ratio(row.eager_x),
                      format_ratio(row.compiled_x), format_ratio(row.speed_up), format_steps(row.break_even)))
    widths = [max(len(line[column]) for line in cells) for column in range(len(header))]
    return "\n".join("  ".join(value.ljust(width) if column == 0 else value.rjust(width)
                               for column, (value, width) in enumerate(zip(line, widths))).rstrip()
                     for line in cells)

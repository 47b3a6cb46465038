"""Disk-space estimate for a recording, compared with the free space of the output's filesystem."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sst_interp.store.schema import UINT16_INDEX_LIMIT

# Parquet per-row overhead of the coordinate columns (question_id dictionary index, 4 int32, levels): generous.
ROW_OVERHEAD_BYTES = 24
# Footer, page headers and row-group metadata, per (question, depth, table) in the worst case of one question a batch.
TABLE_OVERHEAD_BYTES = 4096


@dataclass(frozen=True)
class SpaceEstimate:
    """Bytes a recording needs versus the bytes free where it is written.

    Args:
        bytes_per_question: upper estimate for one question over all depths (every generated position used).
        total_bytes: bytes_per_question x the number of questions still to record.
        free_bytes: free space on the filesystem holding the output.
    """

    bytes_per_question: int
    total_bytes: int
    free_bytes: int

    @property
    def fits(self) -> bool:
        """Whether the estimate fits in the free space."""
        return self.total_bytes <= self.free_bytes

    def line(self) -> str:
        """One line for the user, e.g. ``disk: ~1.2 GB needed (12.3 MB per question), 40.0 GB free``."""
        warn = "" if self.fits else " -- NOT ENOUGH SPACE: free some or lower --full-positions/--sketch-positions"
        return (f"disk: ~{_human(self.total_bytes)} needed ({_human(self.bytes_per_question)} per question), "
                f"{_human(self.free_bytes)} free{warn}")


def bytes_per_question(depths: Sequence[int], full_positions: int, sketch_positions: int, layers: int, d: int,
                       dtype: str, top_k: int, sketch_k: int, max_new_tokens: int, gates: bool = False,
                       ffn_size: int = 0, turns: int = 1, attention_rows: int = 0, attention_keys: int = 0) -> int:
    """Upper estimate of the bytes one question takes over all ``depths`` (uncompressed values).

    At depth k a recorded position has k iterations; full states cost ``layers * d * (4 or 2)`` bytes per
    (position, iteration); sketches ``layers * sketch_k * (2 or 4)`` (uint16 indices when d < 65,536, else int32;
    the writer's delta encoding stores sorted indices in less); logits ``top_k * 12 + 8`` for every recorded
    position; gates ``layers * (4 + ffn_size / 8)`` for full positions when enabled; attention ``attention_rows``
    (recorded layers x heads) rows of ``attention_keys`` keys (8 bytes each: position and weight) per full position
    when recorded; plus a fixed Parquet overhead per depth and table. Positions are capped at ``max_new_tokens`` (position 0 is always recorded
    in full).
    """
    value_bytes = 4 if dtype == "float32" else 2
    index_bytes = 2 if d < UINT16_INDEX_LIMIT else 4
    full = min(max(full_positions, 1), max(max_new_tokens, 1))
    sketched = max(0, min(full_positions + sketch_positions, max_new_tokens) - full)
    per_iteration = (
        full * layers * (d * value_bytes + ROW_OVERHEAD_BYTES)
        + sketched * layers * (sketch_k * index_bytes + ROW_OVERHEAD_BYTES)
        + (full + sketched) * (top_k * 12 + 8 + ROW_OVERHEAD_BYTES)
    )
    if gates:
        per_iteration += full * layers * (4 + (ffn_size + 7) // 8 + ROW_OVERHEAD_BYTES)
    if attention_rows:
        per_iteration += full * attention_rows * (attention_keys * 8 + 4 + ROW_OVERHEAD_BYTES)
    generation_bytes = max_new_tokens * 4 + 512
    fixed = TABLE_OVERHEAD_BYTES * (3 + bool(gates) + bool(attention_rows))
    return int(sum(turns * (int(k) * per_iteration + generation_bytes) + fixed for k in depths))


def estimate(out: str | Path, questions: int, **sizes: int | str | bool | Sequence[int]) -> SpaceEstimate:
    """SpaceEstimate for ``questions`` questions written under ``out``; ``sizes`` as :func:`bytes_per_question`."""
    per = bytes_per_question(**sizes)  # type: ignore[arg-type]
    return SpaceEstimate(per, per * max(questions, 0), _free(out))


def estimate_remaining(out: str | Path, remaining: Mapping[int, int], **sizes: Any) -> SpaceEstimate:
    """SpaceEstimate for ``remaining`` = {depth: questions still to record at that depth}; ``sizes`` as
    :func:`bytes_per_question` without ``depths``. ``bytes_per_question`` of the result covers all the depths."""
    per_depth = {int(k): bytes_per_question(depths=[int(k)], **sizes) for k in remaining}
    total = sum(per_depth[int(k)] * max(int(n), 0) for k, n in remaining.items())
    return SpaceEstimate(sum(per_depth.values()), total, _free(out))


def _free(out: str | Path) -> int:
    target = Path(out)
    while not target.exists() and target != target.parent:
        target = target.parent
    return shutil.disk_usage(target).free


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"

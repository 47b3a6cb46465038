"""The spec of a planted-truth synthetic run: sizes, seeds and what to plant (see :mod:`sst_interp.synthetic`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sst_interp.kernels.errors import UsageError

# Correctness kinds (question-level correctness pattern over the recorded flat depths).
KINDS = ("always", "never", "recover", "regress", "fragile", "random")
PAPER_POSITION_RATES = (1.0, 0.42, 0.2, 0.04, 0.06, 0.15, 0.12, 0.18, 0.2, 0.22)


def scaled_k(hidden_size: int) -> int:
    """The paper's k = 1024 of d = 5376 scaled to ``hidden_size``: the sketch k ``record`` writes by default and the
    k the overlap measurements take by default."""
    return max(1, int(round(hidden_size * 1024 / 5376)))


@dataclass
class SyntheticSpec:
    """Size and plants of a synthetic run (the paper scale is 198 questions, depths 1-4, 10 full positions,
    62 layers, d = 5376).

    Args:
        n_questions: number of questions.
        depths: flat depths recorded; the run at depth D records iterations 1..D.
        full_positions: generated positions with full hidden states and logits (position 0 always included).
        sketch_positions: further positions recorded as top-k sketches.
        extra_tokens: generated tokens after the recorded positions (in token_ids only).
        num_layers: decoder layers.
        hidden_size: d.
        vocab_size: token ids are drawn from [0, vocab_size).
        top_k: K, logit top-K per row (default 128, as ``record``).
        sketch_k: k of the sketches and of the basin plant; None -> round(d * 1024 / 5376).
        dtype: "float32" or "bfloat16" (logical dtype of the hidden values).
        seed: seed of every draw.
        batch_questions: questions per writer batch (memory is one batch's arrays).
        pos0_universal: position 0 is a basin shift in every question (except exception questions).
        position_rates: basin-shift probability per full-window position; None -> PAPER_POSITION_RATES, cycled.
        sketch_rate: basin-shift probability at sketch positions.
        basin_amplitude: (lo, hi) of the swapped fraction of k at layer weight 1, drawn per position.
        layer_profile: layer profile of positions >= 1.
        pos0_layer_profile: layer profile of position 0.
        stable_step: at most floor(stable_step * k) dimensions move per iteration at stable cells.
        basin_kinds: probabilities of "sustained", "first", "late" shifts (position 0 is always sustained).
        divergence_probs: probabilities of first divergence at position 0, inside the full window, beyond it.
        divergence: optional explicit [n_questions, n_depths] first-divergence token positions (-1: identical;
            column 0, the smallest depth, is ignored).
        identical_trace_prob: per deeper depth, probability its trace equals the smallest depth's.
        n_exceptions: the first n questions diverge at position 0 before their first basin shift.
        flip_prob_basin: per (position, iteration) argmax flip probability in the basin phase.
        flip_prob_stable: the same in the stable phase.
        gaps: optional explicit [n_questions, full_positions] iteration-1 top-1 minus top-2 gaps (nats, rounded to
            multiples of 1/16); None draws them (0, 1/16 or 1/8 where a stable-phase flip happens, wide in basins).
        correctness_kinds: probabilities of the correctness kinds (see module docstring).
        correct: optional explicit [n_questions, n_depths] bool correctness.
        halting_layer: layer of the halting feature; None -> the paper's layer 15 scaled to num_layers.
        halting_dims: dimensions of the halting feature; None -> n_halting_dims drawn from the seed; () -> none.
        n_halting_dims: number of halting dims drawn when halting_dims is None.
        halting_strength: feature value (+ MUST HALT, - SAFE).
        l2_noise: noise scale at iteration 2.
        l2_decay: noise scale factor per further iteration.
        l2_signal: > 0 makes the noise (and L2 deltas) larger before a degrading step (positive control).
        sst: the SST config written to the manifest's ``sst`` block (``theta_init``, ``update``, ...), as ``record``
            writes it from the checkpoint it loads; None writes none (planted ablation runs set it).
        questions: the manifest's ``questions`` key (the benchmark label tables show); None writes none.
    """

    n_questions: int = 12
    depths: tuple[int, ...] = (1, 2, 3, 4)
    full_positions: int = 10
    sketch_positions: int = 0
    extra_tokens: int = 6
    num_layers: int = 8
    hidden_size: int = 512
    vocab_size: int = 4096
    top_k: int = 32
    sketch_k: int | None = None
    dtype: str = "float32"
    seed: int = 0
    batch_questions: int = 4
    pos0_universal: bool = True
    position_rates: tuple[float, ...] | None = None
    sketch_rate: float = 0.1
    basin_amplitude: tuple[float, float] = (0.3, 0.7)
    layer_profile: str = "paper"
    pos0_layer_profile: str = "paper"
    stable_step: float = 0.003
    basin_kinds: dict[str, float] = field(default_factory=lambda: {"sustained": 0.45, "first": 0.45, "late": 0.1})
    divergence_probs: tuple[float, float, float] = (0.379, 0.333, 0.288)
    divergence: Any = None
    identical_trace_prob: float = 0.05
    n_exceptions: int = 0
    flip_prob_basin: float = 0.3
    flip_prob_stable: float = 0.03
    gaps: Any = None
    correctness_kinds: dict[str, float] = field(default_factory=lambda: {
        "always": 0.3, "never": 0.25, "recover": 0.2, "regress": 0.15, "fragile": 0.05, "random": 0.05})
    correct: Any = None
    halting_layer: int | None = None
    halting_dims: tuple[int, ...] | None = None
    n_halting_dims: int = 8
    halting_strength: float = 0.7
    l2_noise: float = 0.1
    l2_decay: float = 0.5
    l2_signal: float = 0.0
    sst: dict[str, Any] | None = None
    questions: str | None = None

    def __post_init__(self) -> None:
        self.depths = tuple(sorted({int(d) for d in self.depths}))
        if not self.depths or self.depths[0] < 1:
            raise UsageError(f"depths must be positive integers, got {self.depths}")
        if self.n_questions < 1 or self.full_positions < 1 or self.num_layers < 1:
            raise UsageError("n_questions, full_positions and num_layers must be >= 1")
        if self.dtype not in ("float32", "bfloat16"):
            raise UsageError(f"dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.vocab_size < 2 * (self.top_k + self.reorg_top_n) + max(self.depths) + 1:
            raise UsageError(f"vocab_size {self.vocab_size} too small for top_k {self.top_k}")
        unknown = set(self.correctness_kinds) - set(KINDS)
        if unknown:
            raise UsageError(f"unknown correctness kinds {sorted(unknown)}; use {', '.join(KINDS)}")
        for name in ("correct", "divergence", "gaps"):
            value = getattr(self, name)
            if value is not None and np.asarray(value).shape[0] != self.n_questions:
                raise UsageError(f"{name} must have one row per question ({self.n_questions})")
        if self.halting_dims is not None:
            self.halting_dims = tuple(int(x) for x in self.halting_dims)
            if any(not 0 <= x < self.hidden_size for x in self.halting_dims):
                raise UsageError(f"halting_dims must lie in [0, {self.hidden_size})")

    # derived sizes --------------------------------------------------------------------------------------
    @property
    def overlap_k(self) -> int:
        """k of the basin plant and the sketches: ``sketch_k`` or round(d * 1024 / 5376)."""
        if self.sketch_k is not None:
            return int(self.sketch_k)
        return scaled_k(self.hidden_size)

    @property
    def reorg_top_n(self) -> int:
        """n of the planted top-n replacement: min(100, top_k)."""
        return min(100, self.top_k)

    @property
    def n_tokens(self) -> int:
        """Generated tokens per run."""
        return self.full_positions + self.sketch_positions + self.extra_tokens

    @property
    def halting_layer_index(self) -> int:
        """The layer carrying the halting feature."""
        if self.halting_layer is not None:
            return int(self.halting_layer)
        return int(round(15 / 61 * (self.num_layers - 1)))

    def halting_dim_list(self) -> list[int]:
        """The halting dimensions (sorted)."""
        if self.halting_dims is not None:
            return sorted(self.halting_dims)
        rng = np.random.default_rng([self.seed, 987654])
        return sorted(int(x) for x in rng.choice(self.hidden_size, size=self.n_halting_dims, replace=False))

    def rates(self) -> np.ndarray:
        """Basin-shift probability of each full-window position: ``[full_positions]``."""
        base = PAPER_POSITION_RATES if self.position_rates is None else tuple(self.position_rates)
        return np.array([base[p % len(base)] for p in range(self.full_positions)], dtype=np.float64)

    def question_id(self, index: int) -> str:
        """Id of question ``index``."""
        return f"syn{index:04d}"

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON-able values (arrays as lists)."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, np.ndarray):
                out[key] = value.tolist()
        return out

"""A planted run of the demo's shape (issue 31): 24 questions, flat depths 1-4, 18 layers, 10 full positions and
sketches after them, top-128; a single MUST HALT question and no basin shift at position 0 (what the demo run
tripped over)."""

from __future__ import annotations

import numpy as np

from sst_interp.synthetic import SyntheticSpec

T, F = True, False


def demo_spec() -> SyntheticSpec:
    """The demo run's shape; question 1 is the only MUST HALT question (right at depth 1, wrong at depth 2)."""
    correct = np.zeros((24, 4), dtype=bool)
    correct[0] = [T, T, T, T]
    correct[1] = [T, F, F, F]
    correct[2] = [F, F, T, T]
    correct[5] = [T, T, T, T]
    rates = (0.0, 0.3, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1)  # never a planted basin shift at position 0
    return SyntheticSpec(n_questions=24, depths=(1, 2, 3, 4), full_positions=10, sketch_positions=6, extra_tokens=0,
                         num_layers=18, hidden_size=64, top_k=128, vocab_size=4096, batch_questions=24, seed=3,
                         correct=correct, pos0_universal=False, position_rates=rates, n_exceptions=0)

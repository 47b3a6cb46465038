"""Planted-truth synthetic runs: a run directory with known structure, written through :class:`RunWriter`.

Modules: :mod:`~sst_interp.synthetic.spec` (:class:`SyntheticSpec`), :mod:`~sst_interp.synthetic.plan` (drawing one
question's truth), :mod:`~sst_interp.synthetic.arrays` (the arrays a run stores), :mod:`~sst_interp.synthetic.truth`
(:class:`PlantedTruth`) and :mod:`~sst_interp.synthetic.writer` (:func:`write_synthetic_run`).

``write_synthetic_run(path, spec) -> PlantedTruth`` writes questions, generations, hidden states (full window),
top-k sketches (positions beyond it) and per-iteration logits for every depth in ``spec.depths``, one batch of
questions at a time (memory: one batch's arrays, never the run). Everything is drawn from
``numpy.random.default_rng([seed, question_index, stream])``, so the same spec gives identical bytes, and an
interrupted call resumes (questions already complete at a depth are skipped).

What is planted (all recorded exactly in :class:`PlantedTruth`):

- **Basin shifts** (overlap, basins): at planted positions (position 0 always when ``pos0_universal``, others with
  per-position rates) a fraction ``amp * w[l]`` of the top-k dimensions (``k = overlap_k``) is swapped out between
  iteration 1 and the last iteration, where ``w`` is the layer profile (``paper``, ``late``, ``uniform``,
  ``band:LO:HI``; layers with ``w = 0`` do not shift). Elsewhere at most ``floor(stable_step * k)`` dimensions move
  per iteration. Shifts are ``sustained`` (every transition i -> i+1), ``first`` (1 -> 2 only) or ``late`` (one
  later transition). Top-k overlap between iterations a and b is ``1 - |swaps_b - swaps_a| / k`` exactly.
  Iteration states do not depend on the run's depth (the state after iteration i is the same in every run of depth
  >= i; exact at position 0, a simplification elsewhere).
- **First divergence** (divergence): the run at depth D first emits a different token from the run at the smallest
  depth at token position ``divergence[q, D]`` (-1: identical trace). Categories at position 0 / inside the full
  window / beyond it follow ``divergence_probs``; ``n_exceptions`` questions diverge at position 0 before their
  first basin shift (the exceptions of tab:causal_ordering).
- **Argmax flips with gaps** (logit dynamics): ``winners[q, p, i]`` is the iteration-1 rank of iteration i's argmax;
  ``gaps[q, p]`` the iteration-1 top-1 minus top-2 log-prob gap (multiples of 1/16 nat, exact ties included).
  Flips in the stable phase always promote the runner-up and occur only at gaps 0, 1/16 or 1/8; flips in the basin
  phase promote ranks up to 49 over any gap. ``replaced[q, p, i]`` iteration-1 top-n tokens (n = min(100, K)) leave
  the top-n at iteration i (many in the basin phase, 0-2 otherwise); ``flip_basin`` marks basin-phase flips.
- **Correctness** per question and depth (generations.parquet ``correct``), from kinds ``always``, ``never``,
  ``recover`` (wrong, then right from a deeper depth on), ``regress`` (right, then wrong: overthinking),
  ``fragile`` (right at exactly one deeper depth), ``random``; or an explicit ``correct`` matrix.
- **Halting feature**: at position 0 and ``halting_layer``, dimensions ``halting_dims`` hold ``+halting_strength``
  after iteration d when depth d is MUST HALT (passes at staged depth <= d and fails at flat depth d+1,
  ``app:halting_training``) and ``-halting_strength`` otherwise (SAFE; also every non-recoverable question). No
  feature when ``halting_dims == ()``.
- **L2 deltas that do not predict correctness** (convergence): iteration i >= 2 moves every state by a noise step
  of scale ``l2_noise * l2_decay**(i-2)`` (so deltas shrink with iterations, the same for every difficulty group),
  independent of correctness; ``l2_signal > 0`` multiplies the step into iteration i by ``1 + l2_signal`` when the
  question degrades from flat depth i to i+1 (a positive control). Basin swaps add to the deltas too.
"""

from sst_interp.synthetic.spec import KINDS, SyntheticSpec
from sst_interp.synthetic.truth import PlantedTruth
from sst_interp.synthetic.writer import write_synthetic_run

__all__ = ["KINDS", "PlantedTruth", "SyntheticSpec", "write_synthetic_run"]

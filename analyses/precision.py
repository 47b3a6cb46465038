"""Blend perturbation vs floating-point precision (app:precision_proof, tab:precision_proof).

Three parts:

1. **Machine epsilon** of the recorded dtype, computed as ``torch.nextafter(1, 2) - 1`` in that dtype
   (bfloat16: exactly 2^-7; float32: 2^-23).
2. **Analytic bound**: the blend changes the FFN input by ``alpha_{l,d} * Delta_d``; in the case most
   favourable to the rounding null (``|Delta_d| = |h_d|``) it is indistinguishable from rounding only if
   ``alpha_{l,d} <= eps``. :func:`alpha_bound` reports the smallest coefficient in units of eps.
3. **Empirical ratios**: at the selected (basin-shift) positions of the deepest run, for every layer and
   dimension, ``|h^(b) - h^(a)| / (eps * |h^(a)|)`` for the iteration transition a -> b (1 -> 2 in the
   paper). Dimensions with ``h^(a) = 0`` have no defined ratio and are counted separately. Per layer:
   quantiles, the fraction above 1 and a one-sided exact binomial test of that fraction against 0.5
   (with its one-sided Clopper-Pearson interval).

Ratios are reduced by a streaming accumulator (exact counts, quantiles from a log-spaced histogram
whose bins are 0.5% of a decade wide, so quantiles are within ~1.2% of the exact value); memory is one
question's hidden block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sst_interp.analyses import sections, tidy
from sst_interp.analyses.measurement import Measurement
from sst_interp.kernels import stats
from sst_interp.analyses.layers import paper_layer
from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.analyses.logit_dynamics.regimes import check_labels
from sst_interp.kernels.errors import UsageError

if TYPE_CHECKING:  # torch is imported by the functions that compute in a dtype, not by importing the module
    import torch

PAPER_TABLE_LAYERS = (0, 15, 30, 45, 61)
_DTYPE_NAMES = ("bfloat16", "float32", "float16", "float64")


def _torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPE_NAMES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(_DTYPE_NAMES)}")
    return getattr(torch, dtype)


def machine_epsilon(dtype: str | torch.dtype) -> float:
    """Gap between 1.0 and the next representable value of ``dtype`` (``torch.nextafter``; bf16 -> 2^-7)."""
    import torch

    dt = _torch_dtype(dtype)
    one = torch.tensor(1.0, dtype=dt)
    return float(torch.nextafter(one, torch.tensor(2.0, dtype=dt)) - one)


def rounding_check(dtype: str | torch.dtype) -> tuple[float, float]:
    """``(1 + eps, 1 + eps/2)`` evaluated in ``dtype``: the first exceeds 1, the second rounds back to 1."""
    import torch

    dt = _torch_dtype(dtype)
    eps = machine_epsilon(dt)
    one = torch.tensor(1.0, dtype=dt)
    return float(one + torch.tensor(eps, dtype=dt)), float(one + torch.tensor(eps / 2, dtype=dt))


@dataclass(frozen=True)
class AlphaBound(AnalysisResult):
    """The analytic bound: learned blend coefficients in units of machine epsilon.

    Args:
        eps: machine epsilon.
        n: coefficients.
        minimum, maximum, p1, p99: their range and p1-p99.
        below: ``{multiple m: count of alpha <= m * eps}`` for m in (1, 3).
    """

    label = "app:precision_proof"
    eps: float
    n: int
    minimum: float
    maximum: float
    p1: float
    p99: float
    below: dict[float, int]

    def table(self) -> pd.DataFrame:
        """quantity / value rows."""
        rows = [("machine epsilon", self.eps), ("coefficients", self.n), ("alpha min", self.minimum),
                ("alpha max", self.maximum), ("alpha p1", self.p1), ("alpha p99", self.p99),
                ("alpha min / eps", self.minimum / self.eps)]
        rows += [(f"coefficients <= {m:g} eps", c) for m, c in self.below.items()]
        return pd.DataFrame(rows, columns=["quantity", "value"])


def alpha_bound(alpha: np.ndarray, dtype: str | torch.dtype = "bfloat16") -> AlphaBound:
    """Analytic bound from ``alpha: [L, d]`` (blend coefficients) for the recorded ``dtype``."""
    arr = np.asarray(alpha, dtype=np.float64)
    if arr.size == 0 or not np.isfinite(arr).all():
        raise UsageError("alpha must be a non-empty finite [layers, d] array")
    eps = machine_epsilon(dtype)
    p1, p99 = np.percentile(arr, [1, 99])
    return AlphaBound(eps, arr.size, float(arr.min()), float(arr.max()), float(p1), float(p99),
                      {m: int((arr <= m * eps).sum()) for m in (1.0, 3.0)})


def precision_ratios(h_from: np.ndarray, h_to: np.ndarray, eps: float) -> np.ndarray:
    """``|h_to - h_from| / (eps * |h_from|)``, NaN where ``h_from`` is 0 or either value is not finite.

    ``h_from, h_to: [..., d]`` (same shape) -> ratios of that shape (float64).
    """
    a, b = np.asarray(h_from, dtype=np.float64), np.asarray(h_to, dtype=np.float64)
    if a.shape != b.shape:
        raise UsageError(f"hidden arrays differ in shape: {a.shape} vs {b.shape}")
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.abs(b - a) / (eps * np.abs(a))
    r[(a == 0) | ~np.isfinite(a) | ~np.isfinite(b)] = np.nan
    return r


class RatioAccumulator:
    """Streaming per-layer summary of delta-to-precision ratios (exact counts, histogram quantiles).

    ``add(ratios)`` takes ``[..., L, d]`` ratios (NaN = undefined); ``state_dict`` / ``load_state_dict``
    save and restore the state as plain arrays.
    """

    LOG_LO, LOG_HI, BINS = -8.0, 8.0, 3200

    def __init__(self, num_layers: int) -> None:
        self.num_layers = int(num_layers)
        self.counts = np.zeros((self.num_layers, self.BINS), dtype=np.int64)
        self.zeros = np.zeros(self.num_layers, dtype=np.int64)
        self.above_one = np.zeros(self.num_layers, dtype=np.int64)
        self.undefined = np.zeros(self.num_layers, dtype=np.int64)

    def add(self, ratios: np.ndarray) -> None:
        """Add ``ratios: [..., L, d]``."""
        r = np.asarray(ratios, dtype=np.float64)
        if r.ndim < 2 or r.shape[-2] != self.num_layers:
            raise UsageError(f"ratios must be [..., {self.num_layers}, d], got {r.shape}")
        r = np.moveaxis(r, -2, 0).reshape(self.num_layers, -1)
        nan = np.isnan(r)
        self.undefined += nan.sum(1)
        self.zeros += (r == 0).sum(1)
        self.above_one += (r > 1).sum(1)
        pos = ~nan & (r > 0)
        width = (self.LOG_HI - self.LOG_LO) / self.BINS
        for layer in range(self.num_layers):
            v = np.log10(r[layer, pos[layer]])
            idx = np.clip(((v - self.LOG_LO) / width).astype(np.int64), 0, self.BINS - 1)
            self.counts[layer] += np.bincount(idx, minlength=self.BINS)

    def n(self, layer: int | None = None) -> int:
        """Defined ratios at ``layer`` (None: all layers)."""
        sel = slice(None) if layer is None else layer
        return int(self.counts[sel].sum() + self.zeros[sel].sum())

    def quantile(self, q: float, layer: int | None = None) -> float:
        """Approximate ``q``-quantile (0..1) at ``layer`` (None: all layers pooled)."""
        sel = slice(None) if layer is None else layer
        counts = np.atleast_2d(self.counts[sel]).sum(0)
        zeros = int(np.sum(self.zeros[sel]))
        total = zeros + int(counts.sum())
        if total == 0:
            raise UsageError("no defined ratios to take a quantile of")
        target = q * total
        if target <= zeros:
            return 0.0
        cum = np.cumsum(counts)
        i = int(np.searchsorted(cum, target - zeros))
        before = cum[i - 1] if i else 0
        frac = (target - zeros - before) / counts[i]
        width = (self.LOG_HI - self.LOG_LO) / self.BINS
        return float(10 ** (self.LOG_LO + (i + frac) * width))

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as arrays (JSON/safetensors-able)."""
        return {"counts": self.counts.copy(), "zeros": self.zeros.copy(), "above_one": self.above_one.copy(),
                "undefined": self.undefined.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a state from :meth:`state_dict`."""
        if np.asarray(state["counts"]).shape != self.counts.shape:
            raise UsageError("accumulator state has a different number of layers or bins")
        for key in ("counts", "zeros", "above_one", "undefined"):
            setattr(self, key, np.asarray(state[key], dtype=np.int64).copy())


@dataclass(frozen=True)
class PrecisionProof(AnalysisResult):
    """tab:precision_proof: per-layer delta-to-precision ratios.

    Args:
        dtype: the run's hidden dtype; eps: its machine epsilon.
        transition: ``(a, b)`` iterations compared; depth: the run used.
        positions: positions measured; restricted: True when restricted to low-overlap positions.
        frame: one row per layer and a final ``all`` row: n, median, p25, p75, p95, frac_above_1, p, ci_low.
        bound: the analytic alpha bound when alpha was given.
    """

    label = "tab:precision_proof"
    dtype: str
    eps: float
    transition: tuple[int, int]
    depth: int
    positions: int
    restricted: bool
    frame: pd.DataFrame
    bound: AlphaBound | None = None

    def measured_layers(self) -> list[int]:
        """The layers with a defined ratio (a row of :attr:`frame`), ascending: every layer of an SST run, only the
        looped ones of a family whose other layers run once per token (no iteration a -> b change there)."""
        return sorted(int(x) for x in self.frame["layer"] if x != "all")

    def table(self, layers: Sequence[int] | None = None) -> pd.DataFrame:
        """Rows for ``layers`` plus ``all``. Default: the paper's 0, 15, 30, 45, 61 at the same depth fraction of the
        measured layers (:meth:`measured_layers`), so a family's looped block is shown, not mapped away (an
        SST run measures every layer: the paper's layers mapped onto the run's)."""
        if layers is None:
            measured = self.measured_layers()
            layers = sorted({measured[paper_layer(x, len(measured))] for x in PAPER_TABLE_LAYERS}) if measured else []
        keep = [str(x) for x in layers] + ["all"]
        return self.frame[self.frame["layer"].isin(keep)].reset_index(drop=True)

    def full_table(self) -> pd.DataFrame:
        """Every layer plus ``all``."""
        return self.frame


def summarise(acc: RatioAccumulator, null: float = 0.5) -> pd.DataFrame:
    """Per-layer rows (and ``all``) from an accumulator; layers without defined ratios are dropped."""
    rows = []
    for layer in [*range(acc.num_layers), None]:
        n = acc.n(layer)
        if n == 0:
            continue
        k = int(acc.above_one.sum() if layer is None else acc.above_one[layer])
        test = stats.binomial_test(k, n, null, alternative="greater")
        ci = stats.binomial_ci(k, n, null, alternative="greater")
        rows.append({"layer": "all" if layer is None else str(layer), "n": n,
                     "median": acc.quantile(0.5, layer), "p25": acc.quantile(0.25, layer),
                     "p75": acc.quantile(0.75, layer), "p95": acc.quantile(0.95, layer),
                     "frac_above_1": k / n, "p": test.pvalue, "ci_low": ci.low})
    return pd.DataFrame(rows)


def _selected(labels: pd.DataFrame | None, depth: int) -> set[tuple[str, int, int]] | None:
    if labels is None:
        return None
    lab = check_labels(labels)
    lab = lab[(lab["depth"] == depth) & (lab["iter_a"] == 1) & (lab["iter_b"] == depth) & lab["low_overlap"]]
    return set(zip(lab["question_id"], lab["turn"], lab["position"]))


def precision_proof(
    run: Any,
    labels: pd.DataFrame | None = None,
    transition: tuple[int, int] = (1, 2),
    depth: int | None = None,
    alpha: np.ndarray | None = None,
    null: float = 0.5,
    question_ids: Sequence[str] | None = None,
) -> PrecisionProof | NotApplicable:
    """tab:precision_proof from a run's hidden states at its deepest depth (or ``depth``).

    ``labels`` (a regime label table) restricts the measurement to positions that are low-overlap for
    iteration 1 vs the last iteration of that run (the paper's basin-shift positions); without it every
    recorded position is used. ``alpha: [L, d]`` adds the analytic bound.
    """
    label = PrecisionProof.label
    depth = max(run.depths) if depth is None else int(depth)
    a, b = (int(x) for x in transition)
    if depth < 2 or not 1 <= a < b <= depth:
        return NotApplicable(f"transition {a}->{b} needs a run of depth >= {max(b, 2)} (deepest: {depth})", label)
    if depth not in run.depths:
        raise UsageError(f"depth {depth} is not in the run (depths {list(run.depths)})")
    keep = _selected(labels, depth)
    eps = machine_epsilon(run.dtype)
    acc = RatioAccumulator(run.num_layers)
    measured = 0
    for block in run.hidden(depth, question_ids=question_ids):
        ia, ib = (int(np.flatnonzero(block.iterations == it)[0]) for it in (a, b))
        rows = np.arange(block.positions.size)
        if keep is not None:
            rows = np.array([i for i, p in enumerate(block.positions.tolist())
                             if (block.question_id, block.turn, p) in keep], dtype=np.int64)
        if rows.size == 0:
            continue
        vals = block.values[rows]  # [P, I, L, d]
        ratio = np.full((rows.size, run.num_layers, vals.shape[-1]), np.nan)
        ratio[:, block.layers] = precision_ratios(vals[:, ia], vals[:, ib], eps)
        acc.add(ratio)
        measured += rows.size
    if measured == 0:
        why = "no low-overlap position in the labels" if keep is not None else "no recorded hidden states"
        return NotApplicable(f"{why} at depth {depth}", label)
    if acc.n() == 0:
        return NotApplicable("every selected hidden value is zero or missing; no ratio is defined", label)
    bound = None if alpha is None else alpha_bound(alpha, run.dtype)
    return PrecisionProof(run.dtype, eps, (a, b), depth, measured, keep is not None, summarise(acc, null), bound)


# ------------------------------------------------------------------------------------------------ entry
def _precision(a: Any) -> Any:
    return precision_proof(a.run, a.regime_labels(), alpha=a.checkpoint_alpha())


def _precision_notes(a: Any, result: Any) -> list[str]:
    threshold, origin = a.threshold
    notes = [f"dtype {result.dtype}: machine epsilon {result.eps:.3g}",
             f"iterations {result.transition[0]} -> {result.transition[1]} of the depth-{result.depth} run at "
             f"{result.positions} {'basin-shift' if result.restricted else 'recorded'} positions (threshold "
             f"{threshold:.4f}, {origin})",
             "p: one-sided exact binomial test of the fraction above 1x against 0.5; ci_low: its one-sided 95% bound"]
    measured = result.measured_layers()
    if len(measured) < a.run.num_layers:
        # a family's layers outside its loop run once per token: they have no iteration a -> b change to measure
        notes.append(f"layers {', '.join(map(str, measured))} of {a.run.num_layers} have a change to measure (the "
                     f"others are not visited at both iterations); the paper's layers are placed among these")
    if result.bound is not None:
        b = result.bound
        notes.append(f"analytic bound: alpha in [{b.minimum:.4g}, {b.maximum:.4g}], minimum = "
                     f"{b.minimum / b.eps:.3g} eps; {b.below.get(3.0, 0)} of {b.n} coefficients <= 3 eps")
    else:
        notes.append("analytic alpha bound omitted: no checkpoint for this run")
    return notes


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="precision_proof", label="tab:precision_proof", title="Iteration 1 -> 2 change against the "
                "dtype's rounding error, per layer.", requires=("iterations",), compute=_precision,
                tidy=lambda r: tidy.renamed(r.table(), {"n": "n_values", "frac_above_1": "fraction_above_1"}),
                columns={"layer": "decoder layer (or all)", "n_values": "ratios", "median": "median ratio",
                         "p25": "25th percentile", "p75": "75th", "p95": "95th", "fraction_above_1": "fraction above "
                         "1x", "p": "one-sided exact binomial p", "ci_low": "one-sided 95% bound"},
                notes=_precision_notes, extra_tables=lambda r: {"layers": r.full_table()},
                family=sections.PRECISION_AND_CONVERGENCE, inputs=("run", "checkpoint"), caption="Per-layer ratio of "
                "the iteration 1 -> 2 hidden-state change to the dtype's rounding error at basin-shift positions; "
                "under the rounding null the ratio is <= 1."),
)

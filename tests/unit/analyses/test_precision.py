"""Precision proof: bf16 epsilon via torch.nextafter, the alpha bound, and planted delta/precision ratios."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import precision as pr
from sst_interp.kernels import stats
from sst_interp.kernels.results import NotApplicable
from sst_interp.analyses.logit_dynamics import labels_from_overlap
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run


def test_bf16_epsilon_is_two_to_minus_seven():
    assert pr.machine_epsilon("bfloat16") == 2.0**-7 == 0.0078125
    assert pr.rounding_check("bfloat16") == (1.0078125, 1.0)  # 1 + 2^-8 rounds back to 1
    assert pr.machine_epsilon("float32") == 2.0**-23
    with pytest.raises(UsageError):
        pr.machine_epsilon("int8")


def test_alpha_bound_in_units_of_eps():
    eps = 2.0**-7
    alpha = np.full((4, 10), 0.027)
    alpha[2, 3] = 3.08 * eps  # the paper's minimum
    alpha[1, 1] = 0.035
    res = pr.alpha_bound(alpha)
    assert res.minimum / res.eps == pytest.approx(3.08)
    assert res.below == {1.0: 0, 3.0: 0}
    assert res.maximum == 0.035
    low = pr.alpha_bound(np.array([[0.5 * eps, 2.5 * eps, 0.03]]))
    assert low.below == {1.0: 1, 3.0: 2}


def test_precision_ratios_hand_values():
    eps = 2.0**-7
    h = np.array([1.0, -2.0, 0.0, 4.0])
    h2 = h + np.array([eps, 3 * eps * 2.0, 1.0, 0.0])
    r = pr.precision_ratios(h, h2, eps)
    assert r[0] == pytest.approx(1.0) and r[1] == pytest.approx(3.0) and np.isnan(r[2]) and r[3] == 0.0


def test_accumulator_quantiles_and_counts():
    rng = np.random.default_rng(0)
    ratios = np.exp(rng.normal(np.log([2.9, 11.1, 28.9])[None, :, None], 1.0, size=(20, 3, 500)))
    ratios[0, 0, :10] = 0.0
    ratios[0, 1, :5] = np.nan
    acc = pr.RatioAccumulator(3)
    acc.add(ratios[:10])
    state = acc.state_dict()
    acc2 = pr.RatioAccumulator(3)
    acc2.load_state_dict(state)
    acc2.add(ratios[10:])  # resumed accumulation equals one pass
    for layer in range(3):
        v = ratios[:, layer].ravel()
        v = v[~np.isnan(v)]
        assert acc2.n(layer) == v.size
        assert acc2.above_one[layer] == int((v > 1).sum())
        for q in (0.25, 0.5, 0.75, 0.95):
            assert acc2.quantile(q, layer) == pytest.approx(np.quantile(v, q), rel=0.012)
    assert acc2.undefined[1] == 5
    table = pr.summarise(acc2)
    row = table.set_index("layer").loc["0"]
    k, n = int(acc2.above_one[0]), acc2.n(0)
    assert row["p"] == stats.binomial_test(k, n, 0.5).pvalue
    assert list(table["layer"]) == ["0", "1", "2", "all"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    spec = SyntheticSpec(n_questions=6, depths=(1, 2, 3), num_layers=4, hidden_size=256, top_k=32, seed=5,
                         dtype="bfloat16")
    path = tmp_path_factory.mktemp("prec") / "run"
    truth = write_synthetic_run(path, spec)
    return truth, Run.open(path)


def test_precision_proof_on_planted_run(planted):
    truth, run = planted
    eps = 2.0**-7
    ov = truth.overlap(1, 3)[:, :10]
    labels = pd.concat([labels_from_overlap(ov[i], depth=3, question_id=q, iter_a=1, iter_b=3)
                        for i, q in enumerate(truth.question_ids)], ignore_index=True)
    res = pr.precision_proof(run, labels, transition=(1, 2), alpha=np.full((4, 256), 0.027))
    assert res.eps == eps and res.restricted and res.depth == 3
    basin = truth.basin[:, :10]
    assert res.positions == int(basin.sum())
    # recompute directly from the stored hidden states at the planted basin positions
    above = np.zeros(4, int)
    n = np.zeros(4, int)
    for block in run.hidden(3):
        qi = truth.question_ids.index(block.question_id)
        rows = np.flatnonzero(basin[qi, block.positions])
        r = pr.precision_ratios(block.values[rows, 0], block.values[rows, 1], eps)  # [P, L, d]
        above += (r > 1).sum(axis=(0, 2))
        n += (~np.isnan(r)).sum(axis=(0, 2))
    full = res.full_table().set_index("layer")
    assert full.loc[[str(x) for x in range(4)], "n"].tolist() == n.tolist()
    assert full.loc["all", "frac_above_1"] == pytest.approx(above.sum() / n.sum())
    assert res.bound is not None and res.bound.below[1.0] == 0
    assert list(res.table()["layer"]) == ["0", "1", "2", "3", "all"]


def test_precision_degenerate(planted, tmp_path):
    truth, run = planted
    none_low = pd.DataFrame({"depth": 3, "question_id": truth.question_ids[0], "turn": 0, "position": [0],
                             "iter_a": 1, "iter_b": 3, "low_overlap": [False]})
    assert isinstance(pr.precision_proof(run, none_low), NotApplicable)
    assert isinstance(pr.precision_proof(run, transition=(2, 4)), NotApplicable)
    write_synthetic_run(tmp_path / "one", SyntheticSpec(n_questions=2, depths=(1,), top_k=32))
    assert isinstance(pr.precision_proof(Run.open(tmp_path / "one")), NotApplicable)


class PlantedRatioRun:
    """A duck-typed run whose iteration-2 deltas are exact integer multiples m of eps * |h| (float32)."""

    depths = [1, 2]
    dtype = "float32"
    num_layers = 3

    def __init__(self, m_per_layer: list[np.ndarray]):
        self.m = m_per_layer

    def hidden(self, depth, question_ids=None, turn=None):
        from sst_interp.store import HiddenBlock

        eps = 2.0**-23
        d = self.m[0].size
        rng = np.random.default_rng(0)
        for q in range(2):
            h = (2.0 ** rng.integers(-3, 4, size=(4, 3, d))) * rng.choice([-1.0, 1.0], size=(4, 3, d))
            h2 = h + np.stack(self.m)[None] * eps * np.abs(h)
            values = np.stack([h, h2], axis=1).astype(np.float32)  # [P, I, L, d], exact in float32
            yield HiddenBlock(f"q{q}", 0, np.arange(4), np.array([1, 2]), np.arange(3), values)


def test_planted_exact_ratios_recovered():
    d = 200
    m = [np.where(np.arange(d) < 150, 5.0, 1.0),  # 75% above 1, median 5
         np.where(np.arange(d) < 40, 3.0, 0.0),  # 20% above 1, median 0
         np.full(d, 12.0)]  # every ratio 12
    res = pr.precision_proof(PlantedRatioRun(m))
    t = res.full_table().set_index("layer")
    assert t.loc[["0", "1", "2"], "frac_above_1"].tolist() == pytest.approx([0.75, 0.2, 1.0])
    assert t.loc["0", "median"] == pytest.approx(5.0, rel=0.012)
    assert t.loc["1", "median"] == 0.0
    assert t.loc["2", "p25"] == pytest.approx(12.0, rel=0.012)
    assert t.loc["all", "n"] == 2 * 4 * 3 * d
    assert t.loc["all", "frac_above_1"] == pytest.approx((0.75 + 0.2 + 1.0) / 3)
    assert t.loc["0", "p"] < 1e-10 and t.loc["1", "p"] > 0.99  # one-sided binomial vs 0.5
    assert not res.restricted and res.positions == 8

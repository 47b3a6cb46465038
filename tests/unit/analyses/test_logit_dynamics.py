"""Logit dynamics: hand-computed comparisons and exact recovery of the synthetic run's planted flips."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import logit_dynamics as ld
from sst_interp.kernels.results import NotApplicable
from sst_interp.kernels.errors import UsageError
from sst_interp.store import LogitBlock, Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

# --------------------------------------------------------------------------------------------- hand cases
ORIG_IDS = np.array([[10, 11, 12, 13, 14, 15]])
ORIG_LP = np.array([[-0.5, -1.0, -2.0, -3.0, -4.0, -5.0]])
NEW_IDS = np.array([[12, 10, 16, 11, 17, 13]])
NEW_LP = np.array([[-0.3, -1.2, -2.5, -2.6, -3.0, -4.0]])


def check_hand_case(out):
    assert out["changed"].tolist() == [True]
    assert out["gap"][0] == pytest.approx(0.5)
    assert out["replaced"].tolist() == [1]  # top-4 {10,11,12,13} vs {12,10,16,11}: 13 left
    assert out["suppression"][0] == pytest.approx(-0.7)  # token 10: -1.2 - (-0.5)
    assert out["new_winner_rank"][0] == 3.0  # token 12 was rank 3
    rank = out["top5_rank_shift"][0]
    assert rank[:3].tolist() == [1.0, 2.0, 2.0] and np.isnan(rank[3:]).all()
    assert out["top5_lp_shift"][0][:3] == pytest.approx([-0.7, -1.6, 1.7])


def test_compare_distributions_hand_case():
    out = ld.compare_distributions(ORIG_IDS, ORIG_LP, NEW_IDS, NEW_LP, np.array([10]), np.array([12]), top_n=4)
    check_hand_case(out)


def test_compare_distributions_sorts_and_uses_tracked():
    perm = np.array([[3, 0, 5, 1, 4, 2]])
    tracked = np.array([[-1.2, -2.6, -0.3, -4.0, -9.0, -9.5]])  # new log-probs of ORIG_IDS
    out = ld.compare_distributions(np.take_along_axis(ORIG_IDS, perm, 1), np.take_along_axis(ORIG_LP, perm, 1),
                                   NEW_IDS[:, ::-1], NEW_LP[:, ::-1], np.array([10]), np.array([12]), top_n=4,
                                   new_lp_of_orig=np.take_along_axis(tracked, perm, 1))
    check_hand_case(out)
    with pytest.raises(UsageError):
        ld.compare_distributions(ORIG_IDS, ORIG_LP, NEW_IDS, NEW_LP, np.array([10]), np.array([12]), top_n=100)


def block(qid: str, argmax_final: list[int], iterations: int) -> LogitBlock:
    """A block whose final iteration has the given argmax per position (other iterations: token 0)."""
    p, k = len(argmax_final), 4
    ids = np.zeros((p, iterations, k), np.int32)
    lp = np.tile(np.array([-0.1, -2.0, -3.0, -4.0], np.float32), (p, iterations, 1))
    for i in range(iterations):
        top = np.array(argmax_final) if i == iterations - 1 else np.zeros(p, int)
        ids[:, i] = np.stack([top, top + 100, top + 200, top + 300], axis=1)
    am = ids[:, :, 0].copy()
    return LogitBlock(qid, 0, np.arange(p), np.arange(1, iterations + 1), am, ids, lp,
                      np.zeros((p, iterations), np.float32), lp.copy())


def test_cross_run_clean_range_stops_at_first_divergence():
    lo, hi = block("q", [5, 6, 7, 8, 9], 1), block("q", [5, 6, 1, 8, 2], 2)
    rec = ld.cross_run_records(lo, hi, 1, 2, max_positions=10, top_n=4)
    assert rec["position"].tolist() == [0, 1, 2]  # the divergence position is the last clean record
    assert rec["changed"].tolist() == [False, False, True]
    same = ld.cross_run_records(lo, block("q", [5, 6, 7, 8, 9], 2), 1, 2, max_positions=3, top_n=4)
    assert same["position"].tolist() == [0, 1, 2] and not same["changed"].any()


# --------------------------------------------------------------------------------------------- planted run
@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    spec = SyntheticSpec(n_questions=16, top_k=32, flip_prob_stable=0.08, seed=3)
    path = tmp_path_factory.mktemp("ld") / "run"
    truth = write_synthetic_run(path, spec)
    run = Run.open(path)
    labels = truth_labels(truth)
    recs = ld.collect_records(run, labels, top_n=32)
    return truth, run, labels, recs


def truth_labels(truth) -> pd.DataFrame:
    """Labels from the exact planted overlaps (below 0.976 at some layer)."""
    frames = []
    for d, a, b in ld.needed_pairs(truth.depths):
        ov = truth.overlap(a, b)[:, :truth.spec.full_positions]
        for qi, qid in enumerate(truth.question_ids):
            frames.append(ld.labels_from_overlap(ov[qi], depth=d, question_id=qid, iter_a=a, iter_b=b))
    return pd.concat(frames, ignore_index=True)


def low_truth(truth, j: int) -> np.ndarray:
    """[Q, P] planted low-overlap for iteration 1 vs j."""
    p = truth.spec.full_positions
    return truth.basin[:, :p] & (j >= truth.onset[:, :p] + 1)


def first_diff(w: np.ndarray, a: int, b: int) -> np.ndarray:
    """[Q] first position where run a's and run b's final winners differ (-1: none)."""
    diff = w[:, :, a - 1] != w[:, :, b - 1]
    return np.where(diff.any(1), diff.argmax(1), -1)


def test_labels_from_run_equal_planted_overlap_labels(planted):
    truth, run, labels, _ = planted
    ids = truth.question_ids[:3]
    got = ld.labels_from_run(run, question_ids=ids)
    want = labels[labels["question_id"].isin(ids)]
    key = ["depth", "question_id", "position", "iter_a", "iter_b"]
    merged = got.merge(want, on=key, suffixes=("_run", "_truth"))
    assert len(merged) == len(want) == len(got)
    assert (merged["low_overlap_run"] == merged["low_overlap_truth"]).all()


def test_labels_recover_planted_basin_shifts(planted):
    truth, _, labels, _ = planted
    lab = labels.set_index(["depth", "question_id", "position", "iter_a", "iter_b"])["low_overlap"]
    for d, a, b in ld.needed_pairs(truth.depths):
        got = np.array([[lab[(d, q, p, a, b)] for p in range(10)] for q in truth.question_ids])
        if a == 1:
            expected = low_truth(truth, b)
        else:  # consecutive transition a -> a+1 carries a shift
            kind, onset = truth.basin_kind[:, :10], truth.onset[:, :10]
            expected = (kind == 0) | (onset == a)
            expected &= truth.basin[:, :10]
        assert (got == expected).all(), (d, a, b)


def test_within_records_recover_planted_flips(planted):
    truth, _, _, recs = planted
    w = truth.winners.astype(int)
    r = recs.records[recs.records["kind"] == "within"]
    assert len(r) == 16 * 10 * 6  # six within-run comparisons per question and position
    q_index = {q: i for i, q in enumerate(truth.question_ids)}
    qi, p, j = r["question_id"].map(q_index).to_numpy(), r["position"].to_numpy(), r["iter_b"].to_numpy()
    assert (r["changed"].to_numpy() == (w[qi, p, j - 1] != 0)).all()
    assert (r["gap"].to_numpy() == truth.gaps[qi, p]).all()
    assert (r["replaced"].to_numpy() == truth.replaced[qi, p, j - 1]).all()
    ch = r["changed"].to_numpy()
    assert (r["new_winner_rank"].to_numpy()[ch] == w[qi, p, j - 1][ch] + 1).all()
    assert (r["low_overlap"].to_numpy(bool) == low_truth(truth, 2)[qi, p] | (
        low_truth(truth, 3)[qi, p] & (j >= 3)) | (low_truth(truth, 4)[qi, p] & (j == 4))).all()


def test_argmax_concentration_counts_match_plant(planted):
    truth, _, _, recs = planted
    w = truth.winners.astype(int)
    n = {True: 0, False: 0}
    k = {True: 0, False: 0}
    for a in (1, 2, 3):
        for b in range(a + 1, 5):
            f = first_diff(w, a, b)
            low = low_truth(truth, b)
            for q in range(16):
                last = 9 if f[q] < 0 else f[q]
                for p in range(last + 1):
                    n[bool(low[q, p])] += 1
                    k[bool(low[q, p])] += int(p == f[q])
    res = ld.argmax_concentration(recs)
    assert res.counts["low_overlap"] == n[True] and res.counts["stable"] == n[False]
    assert res.value("argmax changes", "low_overlap") == k[True]
    assert res.value("argmax changes", "stable") == k[False]
    orr = (k[True] * (n[False] - k[False])) / ((n[True] - k[True]) * k[False])
    assert res.value("odds ratio (low vs stable)", "total") == pytest.approx(orr)
    db = ld.decision_boundary(recs)
    assert db.value("argmax changes", "value") == k[True] + k[False]


def test_gap_distributions_match_plant(planted):
    truth, _, _, recs = planted
    w = truth.winners.astype(int)
    gaps = {True: [], False: []}
    for d in (2, 3, 4):
        for j in range(2, d + 1):
            changed = w[:, :, j - 1] != 0
            low = low_truth(truth, j)
            for q, p in zip(*np.nonzero(changed)):
                gaps[bool(low[q, p])].append(truth.gaps[q, p])
    res = ld.gap_distributions(recs, n_resamples=500)
    for regime, key in (("low_overlap", True), ("stable", False)):
        g = np.array(gaps[key])
        assert res.counts[regime] == g.size
        assert res.value("exact ties (gap = 0) (%)", regime) == pytest.approx(100 * np.mean(g == 0))
        assert res.value("gap (nats) mean", regime) == pytest.approx(g.mean())
    # planted: stable flips only at gaps 0, 1/16, 1/8
    assert res.value("gap max (nats)", "stable") <= 0.125


def test_reorg_tables_match_plant(planted):
    truth, _, _, recs = planted
    w = truth.winners.astype(int)
    rep, ranks = [], []
    for d in (2, 3, 4):
        for j in range(2, d + 1):
            sel = (w[:, :, j - 1] != 0) & low_truth(truth, j)
            rep += truth.replaced[:, :, j - 1][sel].tolist()
            ranks += (w[:, :, j - 1][sel] + 1).tolist()
    res = ld.reorg_argmax(recs, "low_overlap", n_resamples=500)
    assert res.counts["within"] == len(rep)
    assert res.value("tokens replaced mean", "within") == pytest.approx(np.mean(rep))
    assert res.value("new winner original rank max", "within") == max(ranks)
    st = ld.reorg_argmax(recs, "stable", n_resamples=500)
    assert st.value("new winner original rank max", "within") == 2.0  # stable flips promote the runner-up
    assert st.value("new winner original rank min", "within") == 2.0
    every = ld.reorg_all(recs, "stable", n_resamples=500)
    n_stable = sum(int((~low_truth(truth, j)).sum()) for d in (2, 3, 4) for j in range(2, d + 1))
    assert every.counts["within"] == n_stable


def test_basin_shift_activity_matches_plant(planted):
    truth, _, labels, _ = planted
    kind, onset, basin = truth.basin_kind[:, :10], truth.onset[:, :10], truth.basin[:, :10]
    res = ld.basin_shift_activity(labels)
    c = res.counts
    assert res.n == 160
    assert c["sustained (all 3 transitions)"] == int((kind == 0).sum())
    assert c["at 1->2 only"] == int((kind == 1).sum())
    assert c["at 1->2 and some later (not all)"] == 0
    assert c["new at 2->3 (stable before)"] == int(((kind == 2) & (onset == 2)).sum())
    assert c["new at 3->4 (stable before)"] == int(((kind == 2) & (onset == 3)).sum())
    assert c["no basin shift at any transition"] == int((~basin).sum())
    assert res.table()["count"].sum() == 160


def test_later_iter_computation_matches_plant(planted):
    truth, _, _, recs = planted
    w = truth.winners.astype(int)
    res = ld.later_iter_computation(recs, n_resamples=500)
    for i in (1, 2, 3):
        expected = int((w[:, :, i - 1] != w[:, :, i]).sum())
        assert res.value(f"argmax changes at {i}->{i + 1} (deepest run)", "stable") == expected
    first = (w[:, :, 1] != 0) & truth.basin[:, :10] & (truth.onset[:, :10] == 1)
    assert res.value("basin-shift positions changed at first transition", "basin_shift") == int(first.sum())
    rechanged = int((first & (w[:, :, 1] != w[:, :, 2])).sum())
    assert res.value("re-changed at 2->3", "basin_shift") == rechanged
    f01, f12, f23 = first_diff(w, 1, 2), first_diff(w, 2, 3), first_diff(w, 3, 4)
    changed = f01 >= 0
    further = changed & (((f12 >= 0) & (f12 <= f01)) | ((f23 >= 0) & (f23 <= f01)))
    assert res.value("questions changed at the first run pair", "stable") == int(changed.sum())
    assert res.value("further changes", "stable") == int(further.sum())
    assert res.value("trajectories (logits)", "basin_shift") > 0


def test_trajectory_ratio_classes_hand_case():
    traj = pd.DataFrame({"question_id": "q", "turn": 0, "position": 0, "token": np.arange(8),
                         "s1": [1.0, 1.0, 1.0, 1.0, -1.0, 2.0, 0.0, 1.0],
                         "s2": [0.5, 0.0, -0.2, -0.8, -1.0, -4.0, 1.0, 0.05],
                         "low_overlap": pd.array([True, True, True, True, False, False, False, False])})
    from sst_interp.analyses.logit_dynamics.later import _trajectory_rows
    rows = dict(_trajectory_rows(traj, ["basin_shift", "stable"], seed=0, n_resamples=200))
    # ratios: basin 1.5, 1.0, 0.8, 0.2; stable 2.0, -1.0, (excluded: s1 = 0), 1.05
    assert rows["trajectories (logits)"] == {"basin_shift": 4, "stable": 3}
    assert rows["cumulative ratio mean"]["basin_shift"] == pytest.approx(0.875)
    assert rows["continuing same direction, r > 1 (%)"]["basin_shift"] == pytest.approx(25.0)
    assert rows["retaining within 10%, 0.9 <= r <= 1 (%)"]["basin_shift"] == pytest.approx(25.0)
    assert rows["losing 10-50%, 0.5 <= r < 0.9 (%)"]["basin_shift"] == pytest.approx(25.0)
    assert rows["reversing > 50%, r < 0.5 (%)"]["basin_shift"] == pytest.approx(25.0)
    assert rows["direction reversal rate (%)"]["stable"] == pytest.approx(100 / 3)
    assert rows["trajectories excluded (zero first shift)"]["stable"] == 1


# --------------------------------------------------------------------------------------------- degenerate
def test_single_depth_and_missing_labels_not_applicable(tmp_path):
    spec = SyntheticSpec(n_questions=3, depths=(1,), top_k=32, seed=1)
    write_synthetic_run(tmp_path / "one", spec)
    run = Run.open(tmp_path / "one")
    recs = ld.collect_records(run, ld.labels_from_run(run), top_n=32)
    for fn in (ld.argmax_concentration, ld.decision_boundary, ld.gap_distributions, ld.later_iter_computation):
        assert isinstance(fn(recs), NotApplicable)
    assert isinstance(ld.reorg_argmax(recs, "stable"), NotApplicable)
    assert isinstance(ld.basin_shift_activity(pd.DataFrame(columns=list(ld.LABEL_COLUMNS))), NotApplicable)


def test_no_labels_not_applicable(planted):
    _, run, _, _ = planted
    recs = ld.collect_records(run, None, top_n=32, question_ids=["syn0000", "syn0001"])
    assert isinstance(ld.argmax_concentration(recs), NotApplicable)
    assert isinstance(ld.reorg_all(recs, "low_overlap"), NotApplicable)
    assert not isinstance(ld.decision_boundary(recs), NotApplicable) or recs.records["changed"].sum() == 0
    with pytest.raises(UsageError):
        ld.reorg_all(recs, "medium")

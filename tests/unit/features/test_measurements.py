"""The dictionaries' measurements through study.open(run, dictionary=PATH): each equals what it is defined from
(encode_run's activations, the suite's within-run top-k overlap, scipy's Spearman), on the planted run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sst_interp import study
from sst_interp.analyses.availability import NotAvailable
from sst_interp.analyses.overlap import within_run_overlap
from sst_interp.features import DictionarySet
from sst_interp.reporting.artefacts import ArtefactData
from sst_interp.reporting.fig_features import draw_trajectories


@pytest.fixture(scope="module")
def analysis(planted_run: Path, shared_dictionary: Path):
    return study.open(planted_run, dictionary=shared_dictionary)


@pytest.fixture(scope="module")
def encoded(planted_run: Path, shared_dictionary: Path):
    return DictionarySet.load(shared_dictionary).encode_run(planted_run)


def _dense(encoded) -> dict[tuple, np.ndarray]:
    rows, dense = encoded.rows, encoded.activations.toarray()
    return {(q, int(t), int(p), int(i)): dense[n] for n, (q, t, p, i) in
            enumerate(zip(rows["question_id"], rows["turn"], rows["position"], rows["iteration"]))}


def test_feature_sets_are_encode_runs_active_features(analysis, encoded) -> None:
    frame = analysis.feature_sets()
    expected = encoded.tidy()
    assert list(frame.columns) == ["question_id", "depth", "turn", "position", "iteration", "feature", "activation"]
    assert (frame["depth"] == 2).all()
    pd.testing.assert_frame_equal(frame.drop(columns="depth"), expected[list(frame.columns.drop("depth"))])
    table = analysis.table("feature_sets")
    assert table["iteration"].tolist() == [1, 2]
    assert table["states"].tolist() == [2000, 2000]  # 250 questions x 8 positions
    per_state = expected.groupby(["question_id", "position", "iteration"]).size()
    assert table["l0_mean"].tolist() == pytest.approx(per_state.groupby(level="iteration").sum().to_numpy() / 2000)


def test_basin_shifts_are_jaccard_of_active_sets_beside_the_topk_overlap(analysis, encoded, planted_run) -> None:
    frame = analysis.feature_basin_shifts()
    dense = _dense(encoded)
    assert len(frame) == 2000 and (frame["iteration_a"] == 1).all() and (frame["iteration_b"] == 2).all()
    overlap = within_run_overlap(analysis.run, depth=2, iteration_a=1, iteration_b=2, positions=list(range(8)))
    q_at = {q: n for n, q in enumerate(overlap.question_ids)}
    for row in frame.sample(60, random_state=0).itertuples():
        a = set(np.flatnonzero(dense[(row.question_id, row.turn, row.position, 1)]))
        b = set(np.flatnonzero(dense[(row.question_id, row.turn, row.position, 2)]))
        assert (row.active_a, row.active_b, row.shared) == (len(a), len(b), len(a & b))
        assert row.jaccard_distance == pytest.approx(1 - len(a & b) / len(a | b))
        assert row.topk_overlap == pytest.approx(overlap.values[q_at[row.question_id], row.position, 0])
    table = analysis.table("feature_basin_shifts")
    assert len(table) == 1  # one pair of iterations: no all-pairs row
    rho = stats.spearmanr(frame["jaccard_distance"], frame["topk_overlap"])
    assert table["spearman_rho"].iloc[0] == pytest.approx(rho.statistic)
    assert table["spearman_p"].iloc[0] == pytest.approx(rho.pvalue)
    assert table["jaccard_distance_mean"].iloc[0] == pytest.approx(frame["jaccard_distance"].mean())


def test_trajectories_follow_each_states_top_features(analysis, encoded) -> None:
    frame = analysis.feature_trajectories()
    dense = _dense(encoded)
    assert set(frame["rank"]) == set(range(5))
    for (question, turn, position), state in list(frame.groupby(["question_id", "turn", "position"]))[:25]:
        peaks = np.maximum(dense[(question, turn, position, 1)], dense[(question, turn, position, 2)])
        order = sorted(np.flatnonzero(peaks), key=lambda f: (-peaks[f], f))[:5]
        assert state.sort_values(["rank", "iteration"])["feature"].unique().tolist() == order
        for row in state.itertuples():
            assert row.activation == pytest.approx(dense[(question, turn, position, row.iteration)][row.feature])


def test_without_a_dictionary_each_says_how_to_give_one(planted_run: Path) -> None:
    available = study.open(planted_run).available().set_index("measurement")
    for name in ("feature_sets", "feature_basin_shifts", "feature_trajectories"):
        assert not available.loc[name, "available"]
        assert "dictionary=PATH" in available.loc[name, "reason"]
    with pytest.raises(NotAvailable, match="--dictionary PATH"):
        study.open(planted_run).feature_sets()


def test_per_iteration_dictionaries_refuse_feature_identity(planted_run: Path, per_iteration: Path) -> None:
    a = study.open(planted_run, dictionary=per_iteration)
    assert len(a.feature_sets()) > 0
    with pytest.raises(NotAvailable, match="--layout shared"):
        a.feature_basin_shifts()
    with pytest.raises(NotAvailable, match="--layout shared"):
        a.feature_trajectories()


def test_the_figure_draws_both_panels(analysis) -> None:
    result = analysis.result("feature_trajectories")
    figure = draw_trajectories(ArtefactData(dict(result.tables), dict(result.meta)))
    heatmap, scatter = figure.axes[0], figure.axes[1]  # axes[2] is the heat map's colour bar
    assert len(heatmap.get_yticklabels()) == len(result.tables["common"]["feature"].unique())
    assert sum(len(c.get_offsets()) for c in scatter.collections) == len(result.tables["shifts"])

"""Sparse dictionaries against the organism's mechanism (experiments.feature_validation), on the shipped weights
with small dictionaries trained live for a few hundred steps (the measured table with full settings is in
docs/organism.md, "Features against the mechanism")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sst_interp.cli.organism import main as organism_main
from sst_interp.experiments import feature_validation as fv
from sst_interp.features.dictionary import Dictionary
from sst_interp.features.live_train import load_organism, train_live
from sst_interp.features.options import TrainOptions
from sst_interp.organism.task import split_items
from tests.unit.conftest import fails_with_one_error_line

pytest.importorskip("sae_lens")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


def _dictionaries(root, **control) -> dict[int, Dictionary]:
    torch.set_num_threads(1)
    out = {}
    for layer in (0, 1):
        train_live(TrainOptions(live="hops-organism", layer=layer, layout="shared", questions=100, depth=2, width=256,
                                k=8, steps=150, batch_size=256, lr=3e-3, device="cpu", out=root / f"layer{layer}",
                                **control))
        out[layer] = Dictionary.load(root / f"layer{layer}")
    return out


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    root = tmp_path_factory.mktemp("feature-dictionaries")
    model, spec, _ = load_organism("hops-organism")
    questions = split_items(spec, "test", 200)
    trained = fv.feature_rows(model, _dictionaries(root / "trained"), questions, 2, "trained", folds=3,
                             max_hop=2)
    shuffled = fv.feature_rows(model, _dictionaries(root / "shuffled", shuffle_dims=True), questions, 2, "shuffled",
                               folds=3, max_hop=2)
    untrained_model, _, _ = load_organism("hops-organism", untrained=True)
    untrained = fv.feature_rows(untrained_model, _dictionaries(root / "untrained", untrained=True), questions, 2,
                                "untrained", folds=3, max_hop=2)
    return {**trained, **shuffled, **untrained}


def _cell(rows, label, block, hop, iteration):
    frame = rows[f"features_pointer_{label}"].detail
    return frame[(frame["block"] == block) & (frame["hop"] == hop) & (frame["iteration"] == iteration)].iloc[0]


def test_the_trained_features_read_hop_one_where_the_probe_does(rows):
    cell = _cell(rows, "trained", "L", 1, 1)
    # measured (200 questions, 3 folds, 150-step dictionaries): the probe reads hop 1 at about 0.98 and a few
    # features per value nearly as well; the margin leaves room for the small dictionaries
    assert cell["probe_accuracy"] >= 0.9
    assert cell["best4_accuracy"] >= 0.8 and cell["best1_auc"] >= 0.9
    assert cell["best4_accuracy"] > cell["majority"] + 0.5


def test_the_untrained_organism_reads_no_pointer(rows):
    cell = _cell(rows, "untrained", "L", 1, 1)
    trained = _cell(rows, "trained", "L", 1, 1)
    assert cell["best4_accuracy"] < trained["best4_accuracy"] - 0.3
    assert not rows["features_pointer_untrained"].recovered  # a chance read-out beside a chance probe reads nothing


def test_the_basin_row_scores_both_measures_on_the_same_questions(rows):
    for label in ("trained", "shuffled", "untrained"):
        frame = rows[f"features_basin_{label}"].detail
        assert len(frame) == 200 and frame["feature_change"].between(0, 1).all()
    trained = rows["features_basin_trained"].detail
    shuffled = rows["features_basin_shuffled"].detail
    np.testing.assert_array_equal(trained["topk_overlap"], shuffled["topk_overlap"])  # same states, same baseline


def test_jaccard_distance_and_feature_aucs_on_known_values():
    a = np.array([[1.0, 0, 2, 0], [0, 0, 0, 0]])
    b = np.array([[1.0, 3, 0, 0], [0, 0, 0, 0]])
    np.testing.assert_allclose(fv.jaccard_distance(a, b), [1 - 1 / 3, 0.0])
    acts = np.array([[0.0, 1], [0, 2], [1, 0], [2, 0]])
    np.testing.assert_allclose(fv.feature_aucs(acts, np.array([False, False, True, True])), [1.0, 0.0])


def test_validate_refuses_a_features_folder_without_trained_dictionaries(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, organism_main, ["validate", "--run", str(run), "--out", str(out), "--features",
                                                      str(tmp_path / "feats")], "holds no trained/layer0 dictionary")
    assert not out.exists()

"""A planted-truth synthetic run of a non-SST loop shape (a looped block of 3 of 6 layers, passes per token) comes
back through ``report`` with the planted values: the carried state's top-k overlap and relative L2 change per pass
transition, accuracy and staged capacity per depth, and the per-layer top-k overlap between any two passes (NaN
where a layer outside the loop was never visited). Its halting probe sweeps the layers visited at every pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sst_interp.analyses.overlap import within_run_overlap
from sst_interp.kernels.errors import UsageError
from sst_interp.model.loops import INKLING2_LOOP
from sst_interp.reporting import ReportConfig, build_report
from sst_interp.store import Run
from sst_interp.synthetic.loop_shape import LoopShapeSpec, LoopShapeTruth, write_loop_shape_run

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LoopShapeTruth]:
    path = tmp_path_factory.mktemp("loop_shape") / "run"
    return path, write_loop_shape_run(path)


def _data(result, name: str):
    outcome = next(o for o in result.outcomes if o.artefact.name == name)
    assert outcome.status == "ok", (name, outcome.reason)
    return outcome.data.tables["main"]


def test_family_loop_shape_run_comes_back_through_report_with_the_planted_values(planted, tmp_path: Path) -> None:
    path, truth = planted
    result = build_report(ReportConfig(runs=(path,), out=tmp_path / "report", only=("fig_family_*",),
                                       progress=False))
    assert result.names("failed") == []
    state = _data(result, "fig_family_state").set_index("iteration")
    spec = truth.spec
    assert state.index.tolist() == list(range(2, max(spec.depths) + 1))
    assert (state["family"] == "looped_block").all()
    assert (state["n_positions"] == spec.n_questions * spec.full_positions).all()
    for i in state.index:
        assert state.loc[i, "overlap"] == truth.overlap[(i - 1, i)]  # exact: whole dimensions cross the boundary
        # planted in float64, stored as float32
        assert state.loc[i, "relative_change"] == pytest.approx(truth.relative_change[i], rel=1e-6)
    capacity = _data(result, "fig_family_capacity").set_index("depth")
    assert capacity["accuracy_pct"].tolist() == pytest.approx(truth.accuracy_pct(), abs=1e-12)
    assert capacity["staged_capacity_pct"].tolist() == pytest.approx(truth.staged_capacity_pct(), abs=1e-12)
    # the plants are not degenerate: the state settles (the overlap rises, the change falls), the depths disagree
    assert state["overlap"].is_monotonic_increasing and state["relative_change"].is_monotonic_decreasing
    assert len(set(truth.accuracy_pct())) > 1


def test_family_loop_shape_overlap_between_any_two_passes_is_planted_and_nan_outside_the_loop(planted) -> None:
    path, truth = planted
    run, spec = Run.open(path), truth.spec
    assert run.manifest["family"] == "looped_block" and run.manifest["loop"]["state_layer"] == spec.loop_end - 1
    looped = list(range(spec.loop_start, spec.loop_end))
    outside = [layer for layer in range(spec.num_layers) if layer not in looped]
    deepest = max(spec.depths)
    for a, b in [(1, 2), (1, deepest), (2, 3)]:
        result = within_run_overlap(run, deepest, a, b)  # the analyses' default k, the one planted
        assert result.k == spec.k
        assert (result.values[:, :, looped] == truth.overlap[(a, b)]).all()
        assert np.isnan(result.values[:, :, outside]).all()
        assert result.valid.all()  # every question has every recorded position


def test_family_loop_shape_manifest_loop_has_the_declarations_keys(planted) -> None:
    path, truth = planted
    from tests.unit.conftest import tiny_backbone

    declared = INKLING2_LOOP.describe(tiny_backbone("inkling2_loop").config, [1, 2])
    loop = Run.open(path).manifest["loop"]
    assert set(loop) == set(declared)
    assert loop["iterations_per_layer"]["4"] == [1, 1, 4, 4, 4, 1]


def test_family_loop_shape_halting_probe_sweeps_the_layers_visited_at_every_pass(planted) -> None:
    from sst_interp import study
    from sst_interp.probe.steps import probe_sweep

    path, truth = planted
    sweep = probe_sweep(study.open(path))
    assert list(sweep.layers) == list(range(truth.spec.loop_start, truth.spec.loop_end))


@pytest.mark.parametrize("change, phrase", [
    (dict(overlap=(0.5, 0.7, 0.9)), "a multiple of 1/k"),
    (dict(overlap=(0.5,)), "one value per transition"),
    (dict(relative_change=(0.4, 0.2, 0.001)), None),
])
def test_family_loop_shape_refuses_plants_it_cannot_hold(tmp_path: Path, change: dict, phrase: str | None) -> None:
    if phrase is not None:
        with pytest.raises(UsageError, match=phrase):
            LoopShapeSpec(**change)
        return
    with pytest.raises(UsageError, match="too small for 1 swaps"):  # 11/12 overlap: one swap moves more than that
        write_loop_shape_run(tmp_path / "run", LoopShapeSpec(**change))


def test_family_loop_shape_regime_labels_read_the_layers_visited_at_both_iterations(planted) -> None:
    from sst_interp.analyses.logit_dynamics.regimes import labels_from_run, needed_pairs

    path, truth = planted
    run, spec = Run.open(path), truth.spec
    labels = labels_from_run(run)
    # every (question, position) of every compared pair is labelled, from the looped layers (the others hold
    # iteration 1 only); every planted overlap is below the paper's crossover 0.976: all low-overlap
    assert len(labels) == spec.n_questions * spec.full_positions * len(needed_pairs(run.depths))
    assert labels["low_overlap"].all()
    threshold = truth.overlap[(1, 2)]  # 0.5: the pairs further apart are below it, 1 -> 2 itself is not
    for (a, b), group in labels_from_run(run, threshold=threshold).groupby(["iter_a", "iter_b"]):
        assert (group["low_overlap"] == (truth.overlap[(a, b)] < threshold)).all(), (a, b)

"""The measurement registry: one entry per measurement, the API generated from it, tidy frames with documented
columns, available() (cheap where the declared requirements refuse), and the report's tables from the same entries."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp import analyses, study
from sst_interp.analyses import tidy
from sst_interp.catalogue import REQUIREMENTS, all_measurements, lookup
from sst_interp.kernels.errors import UsageError
from sst_interp.store import integrity
from sst_interp.reporting.registry import all_specs
from tests.unit.reporting.builders import CORRECT, few_permutations, write_baseline_run, write_sst_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    write_sst_run(root / "sst")
    write_baseline_run(root / "base")
    write_sst_run(root / "flat", depths=(1,))
    return root


def test_every_entry_is_declared_once_and_backs_one_report_table():
    measurements = all_measurements()
    names = [m.name for m in measurements]
    assert len(names) == len(set(names))
    assert all(set(m.requires) <= set(REQUIREMENTS) for m in measurements)
    assert any(m.label == "tab:halting_probe" for m in measurements)  # the probe's extension registered
    specs = {spec.name: spec for spec in all_specs()}
    for measurement in measurements:
        spec = specs[measurement.artefact]
        assert spec.label == measurement.label and spec.kind == measurement.kind
        assert spec.scope == measurement.scope or spec.scope == "report", spec.name
        if spec.scope != "report":
            assert spec.compute.__module__ == "sst_interp.reporting.measured", spec.name
    assert lookup("tab:overthinking") is lookup("overthinking") is lookup("tab_overthinking")
    assert lookup("fig:overlap_heatmap").kind == "figure"
    with pytest.raises(UsageError, match="unknown measurement 'tab:nope'"):
        lookup("tab:nope")


def test_each_report_table_and_figure_has_exactly_one_registry_entry():
    # run-, checkpoint- and training-scoped artefacts are adapters over the entry of their name; the report-scoped
    # tables (tab:main_results, tab:staged_breakdown, tab:repetition) stack the entry of their label over runs
    measurements = all_measurements()
    for spec in all_specs():
        backing = [m for m in measurements if m.artefact == spec.name or (spec.scope == "report" and spec.label
                                                                          and m.label == spec.label)]
        assert len(backing) == 1, (spec.name, [m.name for m in backing])


def test_available_checks_declared_requirements_only_and_never_raises(runs, monkeypatch):
    a = study.open(runs / "flat")
    # what made it cheap, counted rather than timed: no table or shard of the run is read, nothing is computed
    reads: list[str] = []
    for name in ("read_table", "read_row_group", "open_parquet", "scan_pages"):
        monkeypatch.setattr(integrity, name, _counted(getattr(integrity, name), name, reads))
    support = a.available().set_index("measurement")
    assert reads == []
    assert a._memo == {}
    assert list(support.columns) == ["label", "available", "reason"]
    assert not support.loc["argmax_concentration", "available"]
    assert "needs a depth >= 2" in support.loc["argmax_concentration", "reason"]
    assert not support.loc["main_results", "available"] and "baseline" in support.loc["main_results", "reason"]
    assert not support.loc["episode_conduct", "available"]
    with pytest.raises(analyses.NotAvailable, match="tab:argmax_concentration: run has depths"):
        a.argmax_concentration()


def _counted(function, name: str, calls: list[str]):
    """``function``, appending ``name`` to ``calls`` on every call."""

    def counted(*args, **kwargs):
        calls.append(name)
        return function(*args, **kwargs)

    return counted


@few_permutations()
def test_every_tidy_frame_has_its_documented_columns(runs):
    a = study.open(runs / "sst", baseline=runs / "base")
    tested = set()
    for measurement in (m for m in all_measurements() if m.scope == "run"):
        if not a.available().set_index("measurement").loc[measurement.name, "available"]:
            continue
        tested.add(measurement.name)
        frame = a.data(measurement.key)
        assert list(frame.columns) == list(measurement.columns), measurement.name
        assert len(frame) > 0
        assert not any(frame[c].dtype == object for c in frame.columns), measurement.name
        pd.testing.assert_frame_equal(getattr(a, measurement.name)(), frame)
    assert {"halting_probe_loocv", "feature_position_grid", "overlap_heatmap"} <= tested


def test_checkpoint_and_training_measurements_have_their_documented_columns(tmp_path):
    from tests.unit.reporting.builders import theta_matrix, write_checkpoint, write_training_logs

    checkpoint = study.open_checkpoint(write_checkpoint(tmp_path / "ckpt", theta_matrix()))
    training = study.open_training(*write_training_logs(tmp_path))
    for analysis in (checkpoint, training):
        support = analysis.available()
        assert support["available"].all(), support
        for measurement in analysis._scope_entries():
            frame = analysis.data(measurement.key)
            assert list(frame.columns) == list(measurement.columns), measurement.name
            assert len(frame) > 0 and not any(frame[c].dtype == object for c in frame.columns)
    assert set(training.data("fig:sst_vs_baseline_loss")["model"]) == {"sst", "baseline"}
    ribbon = checkpoint.alpha_quantile_ribbon()
    alpha = checkpoint.alpha_matrix().alpha
    assert ribbon["p50"].to_numpy() == pytest.approx(np.median(alpha, axis=1), rel=1e-12)
    with pytest.raises(UsageError, match="measurement of a run, not of a checkpoint"):
        checkpoint.data("tab:overthinking")
    nothing = study.open_training()
    assert set(nothing.available()["reason"]) == {"no --training-log given"}


def test_tidy_staged_breakdown_holds_the_planted_capacity(runs):
    staged = study.open(runs / "sst").staged_breakdown()
    assert list(staged["stage"]) == [1, 2, 3, 4]
    solved = [CORRECT[:, :stage].any(axis=1).mean() * 100 for stage in (1, 2, 3, 4)]
    assert staged["cumulative_accuracy_pct"].tolist() == pytest.approx(solved)
    assert set(staged["n_questions"]) == {len(CORRECT)}


def test_tidy_quantities_fold_units_and_bounds_and_keep_every_number(runs):
    a = study.open(runs / "sst")
    paper, tidy_frame = a.table("tab:argmax_concentration"), a.data("tab:argmax_concentration")
    assert len(tidy_frame) == len(paper) * 3  # low_overlap, stable, total
    row = tidy_frame[(tidy_frame.regime == "stable") & (tidy_frame.quantity == "argmax_change_rate")]
    assert set(row["statistic"]) == {"value", "ci_low", "ci_high"} and set(row["unit"]) == {"percent"}
    expected = paper.set_index("quantity").loc["argmax change rate CI low (%)", "stable"]
    assert float(row.loc[row.statistic == "ci_low", "value"].iloc[0]) == expected
    assert tidy.parse_quantity("top-1 log-prob shift mean at non-changes (nats)") == (
        "top_1_log_prob_shift_mean_at_non_changes", "value", "nats")
    assert tidy.parse_quantity("exact tie rate CI high (%)") == ("exact_tie_rate", "ci_high", "percent")


def test_report_tables_equal_the_api_paper_layout_and_notes(runs, tmp_path):
    from sst_interp.reporting import ReportConfig, build_report

    keys = ("tab:overthinking", "tab:gap_distributions", "tab_gmm", "tab:precision_proof")
    # the four tables only: the whole report (tests/unit/reporting/test_report_end_to_end.py builds it) took 73 s
    config = ReportConfig(runs=(runs / "sst",), baselines=(runs / "base",), out=tmp_path / "out", progress=False,
                          only=tuple(f"tab_{lookup(key).name}" for key in keys))
    result = build_report(config)
    assert sorted(o.artefact.name for o in result.outcomes) == sorted(config.only)
    a = study.open(runs / "sst", baseline=runs / "base")
    for key in keys:
        name = f"tab_{lookup(key).name}"
        written = pd.read_csv(tmp_path / "out" / f"{name}.csv")
        expected = a.table(key).reset_index(drop=True)
        pd.testing.assert_frame_equal(written, expected, check_dtype=False, rtol=1e-12, atol=0)
        outcome = next(o for o in result.outcomes if o.artefact.name == name)
        assert outcome.status == "ok"
    assert any("overlap threshold" in note for note in a.notes("tab:gap_distributions"))


def test_the_openers_refuse_what_is_not_their_input_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for call, pattern in ((lambda: study.open_checkpoint(tmp_path / "none"), "is not a folder"),
                          (lambda: study.open_training(sst=tmp_path / "empty"), "has no train_log.csv"),
                          (lambda: study.open_experiment(tmp_path / "none"), "is not a folder")):
        with pytest.raises(UsageError, match=pattern) as info:
            call()
        assert "\n" not in str(info.value)
    # an experiment folder without the experiment: unavailable with the reason, nothing raised until asked
    experiment = study.open_experiment(tmp_path / "empty")
    assert not experiment.available()["available"].any()
    with pytest.raises(analyses.NotAvailable, match="holds no window experiment"):
        experiment.data("tab_intervention_window")

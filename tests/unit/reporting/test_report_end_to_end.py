"""The whole report on a planted synthetic run: every artefact produced, tables equal to the analyses and to the
planted truth, the cache, failures listed without stopping the report, and a single-depth run listing its skips."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest

from sst_interp.analyses import convergent, evaluation, sections
from sst_interp.analyses import logit_dynamics as ld
from sst_interp.analyses.basin_profiles import punctuated_equilibrium
from sst_interp.reporting import ReportConfig, build_report
from sst_interp.reporting import build as build_module
from sst_interp.reporting.registry import UNSUPPORTED, all_specs
from sst_interp.analyses.checkpoint_figures import read_alpha
from sst_interp.kernels.glossary import terms_for
from sst_interp.store import Run
from tests.unit.reporting.builders import (
    A_MAX,
    A_MIN,
    CORRECT,
    theta_matrix,
    write_checkpoint,
    write_sst_run,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(planted_report):
    """The planted report (tests/conftest.py), with the runs opened."""
    root = planted_report["root"]
    return dict(planted_report, run=Run.open(root / "runs" / "sst"), baseline=Run.open(root / "runs" / "base"))


def csv(report, name: str) -> pd.DataFrame:
    return pd.read_csv(report["config"].out / f"{name}.csv")


def same(frame: pd.DataFrame, expected: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(frame, expected.reset_index(drop=True), check_dtype=False, check_exact=False,
                                  rtol=1e-12, atol=0)


def test_every_planned_artefact_is_produced_and_non_empty(report):
    result, out = report["result"], report["config"].out
    # the synthetic run is a completion run: the CodeACT episode table is the one run artefact it cannot have; the
    # intervention experiments' artefacts need report --experiment folders, which this report is not given
    experiments = [s.name for s in all_specs() if s.family == sections.INTERVENTIONS]
    assert experiments == ["tab_intervention_window", "tab_intervention_trace", "fig_intervention_trace_heatmap",
                           "tab_intervention_steer", "tab_intervention_attribution"]
    # one SST run and bare training logs: no ablation pair, no --external, no saved training configs
    comparisons = {"tab_alpha_init_ablation", "tab_ema_variant_ablation", "tab_hyperparameters", "fig_sst_vs_nobias_loss",
                   "tab_external_gsm8k", "tab_external_gpqa", "tab_external_comparison"}
    # the planted run recorded no attention, and the report is given no --dictionary
    recorded_or_given = {"tab_attention", "tab_feature_sets", "tab_feature_basin_shifts", "fig_feature_trajectories"}
    unsupplied = {"tab_episode_conduct", *experiments, *comparisons, *recorded_or_given}
    planned = [s.name for s in all_specs() if s.name not in unsupplied]
    assert result.names("failed") == []
    assert result.names("skipped") == [s.name for s in all_specs() if s.name in unsupplied]
    skipped = next(o for o in result.outcomes if o.artefact.name == "tab_episode_conduct")
    assert "--protocol completion" in skipped.reason
    assert result.names("ok") == planned
    assert set(result.unsupported) == set(UNSUPPORTED)
    for outcome in result.outcomes:
        name = outcome.artefact.name
        if outcome.status == "skipped":
            continue
        if outcome.artefact.spec.kind == "table":
            assert [p.name for p in outcome.files] == [f"{name}.md", f"{name}.csv", f"{name}.tex"]
            assert len(pd.read_csv(out / f"{name}.csv")) > 0, name
            assert "\\toprule" in (out / f"{name}.tex").read_text()
            assert (out / f"{name}.md").read_text().count("\n|") >= 2
        else:
            png, pdf = out / f"{name}.png", out / f"{name}.pdf"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, name
            assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000, name


def test_evaluation_tables_hold_the_planted_correctness(report):
    n = len(CORRECT)
    staged = csv(report, "tab_staged_breakdown")
    solved = np.maximum.accumulate(CORRECT, axis=1).sum(axis=0)
    assert staged[["stage_1", "stage_2", "stage_3", "stage_4"]].iloc[0].tolist() == pytest.approx(100 * solved / n)
    main = csv(report, "tab_main_results").iloc[0]
    baseline = (np.arange(n) % 2 == 0).sum()
    assert (main["baseline"], main["sst"]) == pytest.approx((100 * baseline / n, 100 * CORRECT.any(axis=1).mean()))
    assert main["error_correction"] == pytest.approx(100 * (CORRECT.any(axis=1).sum() - baseline) / (n - baseline))
    over = csv(report, "tab_overthinking")
    over = over[over["compared_with"] == "flat depth 1"].set_index("condition")
    for depth in (2, 3, 4):
        assert over.loc[f"flat depth {depth}", "accuracy"] == pytest.approx(100 * CORRECT[:, depth - 1].mean())
    assert over.loc["matched baseline", "accuracy"] == pytest.approx(100 * baseline / n)
    probe = csv(report, "tab_halting_probe")
    assert probe["correct"].iloc[0] == CORRECT[:, 0].sum()
    assert probe["correct"].iloc[2] == CORRECT.any(axis=1).sum()


def must_halt_counts(correct: np.ndarray) -> tuple[int, int]:
    """(MUST HALT, SAFE) timesteps by the paper's rule, computed by hand from the correctness matrix."""
    must, safe = 0, 0
    for row in correct:
        if not row.any():
            continue
        c = int(np.argmax(row)) + 1
        for d in range(1, c + 1):
            if d == c and d < len(row) and not row[d]:
                must += 1
            else:
                safe += 1
    return must, safe


def test_probe_detection_totals_follow_the_label_rule(report):
    per_iter = csv(report, "tab_halting_probe_per_iter").set_index("depth")
    must, safe = must_halt_counts(CORRECT)
    assert (must, safe) == (6, 13)
    assert (per_iter.loc["Total", "must_halt_total"], per_iter.loc["Total", "safe_total"]) == (must, safe)
    assert len(csv(report, "tab_halting_probe_loocv")) == 1


def test_tables_parse_back_to_the_analysis_values(report):
    run, base = report["run"], report["baseline"]
    same(csv(report, "tab_overthinking"), evaluation.overthinking(run, base, 1).table())
    same(csv(report, "tab_staged_breakdown"), evaluation.staged_breakdown({"sst": run}).table())
    same(csv(report, "tab_convergent_reasoning"), convergent.convergent_reasoning(run).table())
    pe = punctuated_equilibrium(run)
    same(csv(report, "tab_gmm"), pe.gmm.table())
    same(csv(report, "tab_causal_ordering"), pe.causal.table())
    same(csv(report, "tab_pos0_divergence"), pe.pos0_divergence.table())
    same(csv(report, "tab_basin_position_rates"), pe.summary.position_table())
    labels = ld.labels_from_run(run, threshold=pe.gmm.threshold)
    recs = ld.collect_records(run, labels, max_positions=6, top_n=32)
    same(csv(report, "tab_argmax_concentration"), ld.argmax_concentration(recs).table())
    same(csv(report, "tab_reorg_lo_argmax"), ld.reorg_argmax(recs, ld.LOW).table())
    same(csv(report, "tab_basin_shift_activity"), ld.basin_shift_activity(labels).table())


def test_notes_and_captions_reach_markdown_latex_and_html(report):
    out = report["config"].out
    md = (out / "tab_causal_ordering.md").read_text()
    assert md.startswith("**Order of the first low-overlap position")
    assert "- exceptions: " in md
    assert "\\label{tab:causal_ordering}" in (out / "tab_causal_ordering.tex").read_text()
    page = (out / "index.html").read_text()
    for outcome in report["result"].outcomes:
        assert f'id="{outcome.artefact.name}"' in page
    for name in UNSUPPORTED:
        assert f'id="{name}"' in page


def test_each_artefact_links_to_its_glossary_terms(report):
    """(Before the tests that rebuild the report with --only.) Every term an ok artefact uses has one glossary entry on the page, and the artefact links to it; terms no
    produced artefact uses are not listed."""
    page = (report["config"].out / "index.html").read_text()
    used = {term.anchor for o in report["result"].outcomes if o.status == "ok" and o.artefact.spec.label
            for term in terms_for(o.artefact.label)}
    assert {"overthinking", "top-k-overlap", "gmm-crossover"} <= used
    listed = set(re.findall(r'<dt id="g-([a-z0-9-]+)">', page))
    assert listed == used
    overthinking = page[page.index('id="tab_overthinking"'):]
    overthinking = overthinking[:overthinking.index("</section>")]
    assert '<a href="#g-overthinking">' in overthinking
    assert "McNemar" in page[page.index('id="g-overthinking"'):]


def test_alpha_is_read_from_the_checkpoint(report):
    alpha = read_alpha(report["config"].checkpoint)
    theta = theta_matrix().astype(np.float64)
    np.testing.assert_allclose(alpha.alpha, A_MIN + (A_MAX - A_MIN) / (1 + np.exp(-theta)), rtol=1e-6)
    assert alpha.alpha_init == pytest.approx(A_MIN + (A_MAX - A_MIN) / (1 + np.exp(1.8)))


def test_rerun_uses_the_cache_and_redraws_nothing(report):
    config = report["config"]
    pngs = {p: p.stat().st_mtime_ns for p in config.out.glob("*.png")}
    again = build_report(config)
    assert all(o.cached for o in again.outcomes)
    assert [o.status for o in again.outcomes] == [o.status for o in report["result"].outcomes]
    assert {p: p.stat().st_mtime_ns for p in config.out.glob("*.png")} == pngs


def test_changed_checkpoint_recomputes_only_what_reads_it(report):
    config = report["config"]
    write_checkpoint(config.checkpoint, theta_matrix(seed=4))
    again = build_report(dataclasses.replace(config, only=("fig_alpha_quantile_ribbon", "tab_gmm")))
    assert [(o.artefact.name, o.cached) for o in again.outcomes] == [("tab_gmm", True),
                                                                     ("fig_alpha_quantile_ribbon", False)]


def test_a_failing_artefact_is_listed_and_the_rest_is_produced(report, monkeypatch, tmp_path):
    def boom(ctx, target):
        raise RuntimeError("planted failure")

    specs = all_specs()
    broken = dataclasses.replace(next(s for s in specs if s.name == "tab_gmm"), compute=boom)
    monkeypatch.setattr(build_module, "all_specs", lambda: [broken if s.name == "tab_gmm" else s for s in specs])
    config = dataclasses.replace(report["config"], out=tmp_path / "out", only=("tab_gmm", "tab_staged_breakdown"))
    result = build_report(config)
    assert result.names("failed") == ["tab_gmm"] and result.names("ok") == ["tab_staged_breakdown"]
    assert result.outcome("tab_gmm").reason == "RuntimeError: planted failure"
    page = result.index.read_text()
    assert "RuntimeError: planted failure" in page and 'id="tab_staged_breakdown"' in page


def test_single_depth_run_lists_its_skips(tmp_path):
    write_sst_run(tmp_path / "flat", depths=(1,))
    result = build_report(ReportConfig(runs=(tmp_path / "flat",), out=tmp_path / "out", progress=False))
    assert result.names("failed") == []
    reasons = {o.artefact.name: o.reason for o in result.outcomes if o.status == "skipped"}
    assert "single depth" in reasons["tab_staged_breakdown"]
    assert "single depth" in reasons["tab_overthinking"]
    assert "needs a depth >= 2" in reasons["fig_overlap_heatmap"]
    assert "needs a depth >= 2" in reasons["tab_argmax_concentration"]
    assert "the probe needs two or more" in reasons["tab_halting_probe"]
    assert "no --baseline" in reasons["tab_main_results"]
    assert "names no SST checkpoint" in reasons["fig_alpha_quantile_ribbon"]
    assert "no --training-log" in reasons["fig_sst_vs_baseline_loss"]
    assert result.names("ok") == ["tab_repetition"]
    page = result.index.read_text()
    assert all(f'id="{name}"' in page for name in reasons)
    assert "single depth" in page


def test_a_saved_probe_is_evaluated_instead_of_training_one(report, tmp_path):
    from sst_interp.probe import (
        ProbeConfig,
        ProbeMeta,
        TrainConfig,
        evaluate_probe,
        load_probe_data,
        save_probe,
        train_probe,
    )

    data = load_probe_data(report["run"], 2)  # not the default layer, so the saved probe's layer is what is used
    probe, _ = train_probe(data.x, data.y, ProbeConfig(data.hidden_size, hidden=6), TrainConfig(epochs=20, seed=3))
    saved = save_probe(tmp_path / "probe", probe, ProbeMeta(layer=2, threshold=0.5, max_depth=4))
    config = dataclasses.replace(report["config"], probe=saved, out=tmp_path / "out",
                                 only=("tab_halting_probe", "tab_halting_probe_per_iter"))
    result = build_report(config)
    assert result.names("ok") == ["tab_halting_probe", "tab_halting_probe_per_iter"]
    expected = evaluate_probe(probe, data, 0.5)
    same(pd.read_csv(config.out / "tab_halting_probe.csv"), expected.outcome.table())
    same(pd.read_csv(config.out / "tab_halting_probe_per_iter.csv"), expected.detection.table())
    assert any(f"--probe {saved} (layer 2)" in n for n in result.outcome("tab_halting_probe").data.notes)


def test_several_runs_share_report_tables_and_get_suffixed_run_artefacts(report, tmp_path):
    from tests.unit.reporting.builders import write_tiny_run

    write_tiny_run(tmp_path / "second", depths=(1, 2, 3), n_questions=4)
    config = dataclasses.replace(report["config"], runs=(report["root"] / "runs" / "sst", tmp_path / "second"),
                                 out=tmp_path / "out", only=("tab_staged_breakdown", "tab_convergent_reasoning"))
    result = build_report(config)
    assert [o.artefact.name for o in result.outcomes] == [
        "tab_staged_breakdown", "tab_convergent_reasoning-sst", "tab_convergent_reasoning-second"]
    staged = pd.read_csv(config.out / "tab_staged_breakdown.csv")
    assert staged["benchmark"].tolist() == ["sst", "second"] and staged["N"].tolist() == [12, 4]
    assert staged["stage_4"].isna().tolist() == [False, True]  # the second run stops at depth 3


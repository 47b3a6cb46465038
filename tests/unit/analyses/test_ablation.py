"""Architectural ablations (tab:alpha_init_ablation, tab:ema_variant_ablation) on planted runs: staged accuracies,
deltas and exact McNemar p-values equal values computed by hand; roles come from the runs' SST configs, not their
names; runs recorded under other conditions are refused with one line naming the difference."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sst_interp.analyses import ablation
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run
from sst_interp.study import ComparisonAnalysis
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run

SMALL = dict(num_layers=2, hidden_size=32, full_positions=1, top_k=8, vocab_size=256, extra_tokens=1,
             n_questions=10, batch_questions=10, halting_dims=())
MAIN_SST = {"theta_init": -1.8, "update": "direct", "a_min": 0.015, "a_max": 0.1, "state_scale": "unit"}
NOBIAS = {**MAIN_SST, "theta_init": 0.0}
EMA = {**MAIN_SST, "update": "ema_linked"}

# Flat correctness [questions, depths 1..3] of each planted run.
MAIN_FLAT = np.array([[1, 1, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0],
                      [1, 1, 1], [0, 1, 1], [0, 0, 0], [1, 0, 1], [0, 0, 0]], bool)
VARIANT_FLAT = np.array([[0, 0, 0], [1, 1, 1], [0, 0, 0], [0, 0, 0], [0, 1, 0],
                         [1, 1, 1], [0, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]], bool)
BASELINE_FLAT = np.array([[1], [1], [0], [0], [0], [1], [1], [0], [0], [1]], bool)


def _write(path: Path, correct: np.ndarray, sst: dict | None, depths=(1, 2, 3), **extra) -> Run:
    spec = SyntheticSpec(**{**SMALL, **extra}, depths=depths, correct=correct, sst=sst)
    write_synthetic_run(path, spec)
    return Run.open(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("ablation")
    # names that say the opposite of the configs: roles must come from the configs
    return {"nobias": _write(root / "nobias", MAIN_FLAT, MAIN_SST, seed=1),
            "main": _write(root / "main", VARIANT_FLAT, NOBIAS, seed=2),
            "ema": _write(root / "ema", VARIANT_FLAT, EMA, seed=3),
            "base": _write(root / "base", BASELINE_FLAT, None, depths=(1,), seed=4)}


def _mcnemar_by_hand(b: int, c: int) -> float:
    """Two-sided exact McNemar: twice the smaller binomial tail at 1/2, capped at 1."""
    if b + c == 0:
        return 1.0
    n, k = b + c, min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def test_roles_come_from_the_sst_config_not_the_name(runs):
    pairs = ablation.pair_runs({k: v for k, v in runs.items()})
    assert pairs.roles == {"nobias": "main", "main": "alpha_init", "ema": "ema_variant"}
    assert pairs.pairs == {"alpha_init": ("main", "nobias"), "ema_variant": ("ema", "nobias")}


def test_alpha_init_table_equals_hand_computed_values(runs):
    c = ComparisonAnalysis({k: runs[k] for k in ("nobias", "main", "ema")}, {"nobias": runs["base"]})
    result = c.result("tab:alpha_init_ablation")
    stages = result.stages().set_index("stage")
    main_staged = np.logical_or.accumulate(MAIN_FLAT, axis=1)
    var_staged = np.logical_or.accumulate(VARIANT_FLAT, axis=1)
    base = BASELINE_FLAT[:, 0]
    # by hand: main staged = 4, 6, 7 of 10; variant staged = 2, 3, 4 of 10; baseline 5 of 10
    assert list(main_staged.sum(axis=0)) == [4, 6, 7]
    assert list(var_staged.sum(axis=0)) == [2, 3, 4]
    assert list(stages["main_accuracy_pct"]) == pytest.approx([40.0, 60.0, 70.0])
    assert list(stages["variant_accuracy_pct"]) == pytest.approx([20.0, 30.0, 40.0])
    assert list(stages["delta_vs_main_pp"]) == pytest.approx([-20.0, -30.0, -30.0])
    assert list(stages["delta_vs_baseline_pp"]) == pytest.approx([-30.0, -20.0, -10.0])
    # paired flips by hand: stage 1 variant-only = {}, main-only = {q0, q8}; stage 2 {q4} and {q0, q2, q6, q8};
    # stage 3 {q4, q7} and {q0, q2, q3, q6, q8}
    assert list(stages["variant_only_vs_main"]) == [0, 1, 2]
    assert list(stages["main_only"]) == [2, 4, 5]
    for stage, (b, c_) in zip((1, 2, 3), ((0, 2), (1, 4), (2, 5))):
        assert stages.loc[stage, "mcnemar_exact_p_vs_main"] == pytest.approx(_mcnemar_by_hand(b, c_), rel=1e-12)
    flips_base = [(int((var_staged[:, j] & ~base).sum()), int((base & ~var_staged[:, j]).sum())) for j in range(3)]
    assert flips_base == [(0, 3), (1, 3), (2, 3)]  # baseline right = {q0, q1, q5, q6, q9}
    for stage, (b, c_) in zip((1, 2, 3), flips_base):
        assert stages.loc[stage, "mcnemar_exact_p_vs_baseline"] == pytest.approx(_mcnemar_by_hand(b, c_))
    assert _mcnemar_by_hand(1, 3) == pytest.approx(0.625)  # the hand formula itself: 2 * (1 + 4) / 16
    assert stages.loc[1, "mcnemar_exact_p_vs_main"] == pytest.approx(0.5)  # 0 vs 2: 2 * (1/4)

    table = c.table("tab:alpha_init_ablation")
    assert list(table.columns) == ["condition", "iter=1", "iter=2", "staged i_max=3"]
    assert table.iloc[0, 0] == "SST (theta_init=-1.8, direct update)"
    assert table.iloc[1, 0] == "SST (no bias) (theta_init=0, direct update)"
    assert list(table.iloc[2, 1:].isna()) == [False, True, True]  # the baseline under its own depth only
    assert table.iloc[2, 1] == pytest.approx(50.0)
    notes = c.notes("tab:alpha_init_ablation")
    assert any("main SST: run nobias" in n for n in notes)


def test_ema_table_shows_the_first_two_stages_and_the_last(runs, tmp_path):
    deep = {name: _write(tmp_path / name, np.c_[flat, flat[:, -1]], cfg, depths=(1, 2, 3, 4), seed=s)
            for name, flat, cfg, s in (("m", MAIN_FLAT, MAIN_SST, 5), ("e", VARIANT_FLAT, EMA, 6))}
    c = ComparisonAnalysis(deep)
    table = c.table("tab:ema_variant_ablation")
    assert list(table.columns) == ["condition", "iter=1", "iter=2", "staged i_max=4"]
    assert table.iloc[1, 0].startswith("Linked blend EMA variant")
    assert list(table.iloc[0, 1:]) == pytest.approx([40.0, 60.0, 70.0])
    assert "Matched fine-tuned baseline" not in " ".join(table["condition"])  # no baseline given
    assert len(c.data("tab:ema_variant_ablation")) == 4  # every stage in the tidy data


def test_missing_variant_is_listed_with_a_reason(runs):
    c = ComparisonAnalysis({k: runs[k] for k in ("nobias", "main")})
    available = c.available().set_index("label")
    assert bool(available.loc["tab:alpha_init_ablation", "available"])
    reason = available.loc["tab:ema_variant_ablation", "reason"]
    assert "needs an ablation pair" in reason and "--update ema_linked" in reason


@pytest.mark.parametrize("change, phrase", [
    (dict(n_questions=9), "differ in questions (10 vs 9"),
    (dict(depths=(1, 2)), "differ in depths ([1, 2, 3] vs [1, 2])"),
])
def test_runs_recorded_under_other_conditions_are_refused(runs, tmp_path, change, phrase):
    depths = change.pop("depths", (1, 2, 3))
    n = change.get("n_questions", 10)
    other = _write(tmp_path / "other", VARIANT_FLAT[:n, :len(depths)], NOBIAS, depths=depths, seed=9, **change)
    with pytest.raises(UsageError, match=r"ablation run other \(theta_init=0, direct update\) and the main SST run "
                                         r"main " + phrase.replace("(", r"\(").replace(")", r"\)")
                                         .replace("[", r"\[").replace("]", r"\]")):
        ablation.pair_runs({"main": runs["nobias"], "other": other})

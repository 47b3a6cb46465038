"""Clean vs intervened comparison on planted synthetic runs: flips, McNemar's exact p from the counts, staged
capacity, and the first-token log-prob change (zero when the runs' logits are the same)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from sst_interp import study
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run
from tests.unit.reporting.builders import CORRECT, sst_spec, write_sst_run


def test_flips_mcnemar_and_capacity_match_the_planted_verdicts(tmp_path):
    write_sst_run(tmp_path / "clean")
    changed = CORRECT.copy()
    changed[[0, 6, 9], 0] = False   # right -> wrong at depth 1: broken
    changed[[5, 8], 0] = True       # wrong -> right: fixed (question 8 was wrong at depth 1)
    spec = sst_spec()
    write_synthetic_run(tmp_path / "intervened", SyntheticSpec(**{**spec.__dict__, "correct": changed}))
    effect = study.open(tmp_path / "intervened").intervention_effect(tmp_path / "clean").set_index("depth")
    broken = int((CORRECT[:, 0] & ~changed[:, 0]).sum())
    fixed = int((~CORRECT[:, 0] & changed[:, 0]).sum())
    assert (effect.loc[1, "broken"], effect.loc[1, "fixed"]) == (broken, fixed) == (3, 2)
    assert effect.loc[1, "mcnemar_exact_p"] == pytest.approx(binomtest(2, 5, 0.5).pvalue)
    assert effect.loc[2, "broken"] == effect.loc[2, "fixed"] == 0 and effect.loc[2, "mcnemar_exact_p"] == 1.0
    assert effect.loc[1, "clean_accuracy_pct"] == pytest.approx(100 * CORRECT[:, 0].mean())
    assert effect.loc[1, "intervened_accuracy_pct"] == pytest.approx(100 * changed[:, 0].mean())
    assert effect.loc[4, "intervened_staged_pct"] == pytest.approx(100 * changed.any(axis=1).mean())
    compared = effect["first_token_compared"] + effect["first_token_censored"]
    assert (compared == len(CORRECT)).all()


def test_the_same_run_changes_nothing(tmp_path):
    write_sst_run(tmp_path / "clean")
    write_sst_run(tmp_path / "again")
    effect = study.open(tmp_path / "again").intervention_effect(tmp_path / "clean")
    assert (effect["broken"] == 0).all() and (effect["fixed"] == 0).all()
    assert np.allclose(effect["first_token_logprob_change_mean"], 0.0)
    assert (effect["first_token_compared"] == len(CORRECT)).all()

"""mean and resample: a reference run's recorded states at the same site (the mean over its questions, or another
question's drawn with a seed), and reference runs that cannot serve the site refused before anything runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.interventions import Operation, Site, check_spec, patch_runs
from sst_interp.interventions.apply import Intervener
from tests.unit.interventions.test_interventions import (DEPTH, FULL, IDS, hidden_by_site, recorded, spec, sst_model,
                                                          write_run)

SITE = dict(positions=[0, 1], iterations=[2], layers=[1])


def test_mean_is_the_reference_runs_mean_at_the_same_site(tmp_path):
    sst = sst_model(torch.float32)
    _, clean = recorded(sst)
    write_run(tmp_path / "ref", sst, clean)
    before = hidden_by_site(clean)
    tokens, columns = recorded(sst, interventions=spec((Site("layer_out", **SITE),
                                                        Operation("mean", run=str(tmp_path / "ref")))))
    after = hidden_by_site(columns)
    for position in (0, 1):
        expected = np.mean([before[(q, position, 2, 1)] for q in IDS], axis=0)
        for question in IDS:
            np.testing.assert_allclose(after[(question, position, 2, 1)], expected, rtol=0, atol=1e-6)
    for question in IDS:  # what came before the first site is untouched: iteration 1, and layer 0 at iteration 2
        np.testing.assert_array_equal(after[(question, 0, 1, 1)], before[(question, 0, 1, 1)])
        np.testing.assert_array_equal(after[(question, 0, 2, 0)], before[(question, 0, 2, 0)])
    # the two questions' states differ, so the mean changed each of them
    assert not np.allclose(before[(IDS[0], 0, 2, 1)], before[(IDS[1], 0, 2, 1)])


def test_resample_takes_another_questions_state_with_a_fixed_seed(tmp_path):
    sst = sst_model(torch.float32)
    _, clean = recorded(sst)
    write_run(tmp_path / "ref", sst, clean)
    before = hidden_by_site(clean)
    resample = spec((Site("layer_out", **SITE), Operation("resample", run=str(tmp_path / "ref"), seed=3)))
    _, columns = recorded(sst, interventions=resample, question_ids=IDS)
    after = hidden_by_site(columns)
    other = {IDS[0]: IDS[1], IDS[1]: IDS[0]}  # two questions: each draws the other
    for question in IDS:
        np.testing.assert_array_equal(after[(question, 0, 2, 1)], before[(other[question], 0, 2, 1)])
    _, again = recorded(sst, interventions=resample, question_ids=IDS)
    assert torch.equal(again["hidden"]["values"], columns["hidden"]["values"])
    assert list(patch_runs(resample)) == [str((tmp_path / "ref").resolve())]  # part of the run identity


def test_resample_draws_are_seeded_and_never_the_question_itself(tmp_path):
    sst = sst_model(torch.float32)
    _, clean = recorded(sst)
    write_run(tmp_path / "ref", sst, clean)
    intervener = Intervener(sst, spec((Site("layer_out", **SITE), Operation("resample", run=str(tmp_path / "ref")))),
                            IDS)
    source = next(iter(intervener._patches.values()))
    source._questions = [f"q{i}" for i in range(20)]  # a larger reference run's question list
    draws = [source.other("q3", seed) for seed in range(30)]
    assert "q3" not in draws and len(set(draws)) > 5
    assert draws == [source.other("q3", seed) for seed in range(30)]


@pytest.mark.parametrize("kind", ["mean", "resample", "patch"])
def test_a_reference_that_cannot_serve_the_site_is_refused(tmp_path, kind):
    sst = sst_model(torch.float32)
    _, clean = recorded(sst)
    write_run(tmp_path / "ref", sst, clean)
    run = str(tmp_path / "ref")
    with pytest.raises(UsageError, match=f"holds hidden states only at positions 0-{FULL - 1}"):
        check_spec(spec((Site("layer_out", positions=[FULL]), Operation(kind, run=run))), sst.num_layers,
                   sst.hidden_size)
    with pytest.raises(UsageError, match="holds states of d = 32; this model's are d = 64"):
        check_spec(spec((Site("layer_out", positions=[0]), Operation(kind, run=run))), sst.num_layers, 64)
    with pytest.raises(UsageError, match=f"holds iterations 1-{DEPTH}"):
        check_spec(spec((Site("layer_out", positions=[0], iterations=[DEPTH + 1]), Operation(kind, run=run))),
                   sst.num_layers, sst.hidden_size)
    manifest = tmp_path / "ref" / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(dict(data, full_positions=0)))
    with pytest.raises(UsageError, match="recorded no hidden states"):
        check_spec(spec((Site("layer_out", positions=[0]), Operation(kind, run=run))), sst.num_layers,
                   sst.hidden_size)


def test_mean_and_resample_need_a_run():
    for kind in ("mean", "resample"):
        with pytest.raises(UsageError, match=f"a '{kind}' intervention needs run"):
            Operation(kind)


class _RaggedRun:
    """A reference run whose answers ended at different lengths: question a recorded positions 0-2, b only 0-1 and
    c only position 0 (one iteration, one layer, d = 2; values planted so every mean is known)."""

    path, depths = "ragged", [2]
    blocks = {"a": np.array([[[[1.0, 1.0]]], [[[2.0, 2.0]]], [[[3.0, 3.0]]]]),
              "b": np.array([[[[5.0, 7.0]]], [[[6.0, 8.0]]]]), "c": np.array([[[[9.0, 0.0]]]])}

    def hidden(self, depth, question_ids=None, turn=0):
        from types import SimpleNamespace

        for question, values in self.blocks.items():
            if question_ids is None or question in question_ids:
                yield SimpleNamespace(values=values, positions=np.arange(len(values)), iterations=np.array([2]),
                                      layers=np.array([1]))


def test_mean_over_a_ragged_run_averages_the_questions_that_reached_each_position():
    from sst_interp.interventions.references import MeanSource

    source = MeanSource.__new__(MeanSource)
    source.run, source.depth, source._means = _RaggedRun(), None, {}
    np.testing.assert_array_equal(source.value(2, 0, 0, 2, 1).numpy(), [5.0, 8.0 / 3])  # a, b and c
    np.testing.assert_array_equal(source.value(2, 0, 1, 2, 1).numpy(), [4.0, 5.0])  # a and b
    np.testing.assert_array_equal(source.value(2, 0, 2, 2, 1).numpy(), [3.0, 3.0])  # a alone
    with pytest.raises(UsageError, match="no hidden state at turn 0, position 3"):
        source.value(2, 0, 3, 2, 1)


def test_resample_draws_a_question_that_recorded_the_position():
    from sst_interp.interventions.references import PatchSource

    source = PatchSource.__new__(PatchSource)
    source.run, source.depth, source._cache, source._questions = _RaggedRun(), None, {}, ["a", "b", "c"]
    for seed in range(20):
        assert source.other("c", seed, 2, 0, 2) == "a"  # only a reached position 2
        assert source.other("c", seed, 2, 0, 0) == source.other("c", seed)  # position 0: the plain draw
    assert {source.other("c", seed, 2, 0, 1) for seed in range(20)} <= {"a", "b"}
    with pytest.raises(UsageError, match="no other question .* recorded position 2"):
        source.other("a", 0, 2, 0, 2)

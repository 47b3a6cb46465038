"""mean and resample on ``state_in``: the blend of iteration i reads S(C_ref), C_ref the state the reference run
carried into iteration i (its ``layer_out`` of iteration i - 1), and nothing else moves (the window experiment's
mean and resample baselines)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.interventions import Intervention, Operation, Site
from tests.unit.interventions import test_interventions as base
from tests.unit.interventions.test_interventions import IDS, hidden_by_site, recorded, spec, sst_model, write_run

pytestmark = pytest.mark.usefixtures("one_thread")

SITE = dict(layers=[1], iterations=[2, 3], positions=[0, 1])


@pytest.mark.parametrize("kind", ["mean", "resample"])
def test_a_reference_of_the_same_states_reproduces_the_clean_run_exactly(tmp_path, monkeypatch, kind):
    # Two rows with one prompt: the mean over the questions, and the other question's state, are each row's own
    # carried state, so reading them (at iteration - 1, through S with this pass's h) changes nothing. Reading the
    # reference at the wrong iteration, or skipping S, would.
    monkeypatch.setattr(base, "PROMPTS", [base.PROMPTS[0], list(base.PROMPTS[0])])
    sst = sst_model(torch.float32)
    _, clean = recorded(sst)
    write_run(tmp_path / "ref", sst, clean)
    operation = Operation(kind, run=str(tmp_path / "ref"), seed=1 if kind == "resample" else None)
    _, columns = recorded(sst, interventions=spec((Site("state_in", **SITE), operation)), question_ids=IDS)
    assert torch.equal(columns["hidden"]["values"], clean["hidden"]["values"])
    # the same reference read by layer_out at iteration 2 is iteration 2's own output: also the clean run, while
    # iteration 1's output in its place (what an off-by-one would read) is not
    shifted = Operation("patch", run=str(tmp_path / "ref"), source_iteration=1)
    _, moved = recorded(sst, interventions=spec((Site("layer_out", layers=[1], iterations=[2], positions=[0]),
                                                 shifted)), question_ids=IDS)
    assert not torch.equal(moved["hidden"]["values"], clean["hidden"]["values"])


def test_mean_on_state_in_moves_only_what_reads_the_stream_at_the_site(tmp_path):
    sst = sst_model(torch.float32)
    _, clean = recorded(sst)
    write_run(tmp_path / "ref", sst, clean)
    site = Site("state_in", layers=[1], iterations=[2], positions=[0])
    _, columns = recorded(sst, interventions=spec((site, Operation("mean", run=str(tmp_path / "ref")))))
    _, zeroed = recorded(sst, interventions=spec((site, Operation("zero"))))
    before, after, zero = hidden_by_site(clean), hidden_by_site(columns), hidden_by_site(zeroed)
    for question in IDS:
        # iteration 1, and layer 0 of iteration 2 (below the site), are untouched
        np.testing.assert_array_equal(after[(question, 0, 1, 1)], before[(question, 0, 1, 1)])
        np.testing.assert_array_equal(after[(question, 0, 2, 0)], before[(question, 0, 2, 0)])
        # the site's layer reads another state: its output moves, and not as with S = 0
        assert not np.allclose(after[(question, 0, 2, 1)], before[(question, 0, 2, 1)], atol=1e-6)
        assert not np.allclose(after[(question, 0, 2, 1)], zero[(question, 0, 2, 1)], atol=1e-6)


def test_state_in_references_are_refused_where_they_cannot_hold(tmp_path):
    with pytest.raises(UsageError, match="list iterations >= 2, got all"):
        Intervention(Site("state_in"), Operation("mean", run="r"))
    with pytest.raises(UsageError, match="list iterations >= 2, got \\[1, 2\\]"):
        Intervention(Site("state_in", iterations=[1, 2]), Operation("resample", run="r"))
    with pytest.raises(UsageError, match="source_iteration does not apply"):
        Intervention(Site("state_in", iterations=[2]), Operation("resample", run="r", source_iteration=1))
    with pytest.raises(UsageError, match="applies to the stream"):
        Intervention(Site("state_in", iterations=[2]), Operation("patch", run="r"))
    ema = sst_model(torch.float32, update="ema_linked")
    _, clean = recorded(ema)
    write_run(tmp_path / "ref", ema, clean)
    with pytest.raises(UsageError, match="only under the update 'direct'"):
        recorded(ema, interventions=spec((Site("state_in", iterations=[2]),
                                          Operation("mean", run=str(tmp_path / "ref")))))

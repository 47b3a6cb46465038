"""Feature-level attribution patching (issue 55 item 5) on the tiny float64 SST with a planted dictionary: feature 0's
decoder direction is the gradient of the answer's log-probability at the site, every other feature's is orthogonal
to it. So the answer depends, to first order, on feature 0 alone: it ranks first, its estimate is the hand-computed
(a'_0 - a_0) |dM/dx|, the others' estimates vanish, and real feature patching agrees (feature 0's effect close to its
estimate, the orthogonal features' effects second order)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("sae_lens")

from sst_interp.experiments.attribution import attribution_pass  # noqa: E402
from sst_interp.experiments.feature_attribution import feature_attribution  # noqa: E402
from sst_interp.experiments.trace import Target  # noqa: E402
from sst_interp.kernels.errors import UsageError  # noqa: E402
from sst_interp.model.generation import GenerationConfig  # noqa: E402
from tests.unit.interventions.feature_dictionary import write_dictionary  # noqa: E402
from tests.unit.interventions.test_interventions import sst_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

CLEAN, COUNTERFACTUAL = [2, 5, 6, 7, 8, 9], [2, 5, 6, 11, 8, 9]
TARGET = Target("clean", position=0, token=17, prefix=())
CONFIG = GenerationConfig(max_new_tokens=1)
DEPTH, LAYER, POSITION, ITERATION, WIDTH = 3, 1, 0, 2, 12


def test_the_planted_feature_ranks_first_and_real_patching_agrees(tmp_path):
    sst = sst_model()
    probe = attribution_pass(sst, [CLEAN, COUNTERFACTUAL], [TARGET, TARGET], DEPTH, CONFIG, layers=[LAYER],
                             question_ids=["clean", "counterfactual"])
    key = (POSITION, ITERATION, LAYER)
    grad, states = probe.grads[key][0], probe.states[key]
    generator = torch.Generator().manual_seed(3)
    unit = grad / grad.norm()
    others = torch.randn(WIDTH - 1, grad.shape[0], generator=generator, dtype=torch.float64)
    others = others - (others @ unit)[:, None] * unit  # orthogonal to the gradient
    decoder = torch.cat([unit[None], others / others.norm(dim=-1, keepdim=True)])
    encoder = 0.02 * torch.randn(grad.shape[0], WIDTH, generator=generator, dtype=torch.float64)
    folder = write_dictionary(tmp_path / "planted", grad.shape[0], WIDTH, layer=LAYER, iterations=(ITERATION,),
                              W_dec=decoder, W_enc=encoder, b_enc=1.0)
    table = feature_attribution(sst, folder, CLEAN, COUNTERFACTUAL, TARGET, DEPTH, CONFIG, LAYER, POSITION, ITERATION,
                                verify=3)
    features = table[table.feature >= 0]
    assert len(features) == WIDTH  # b_enc 1: every feature is active
    top = features.iloc[0]
    assert top.feature == 0
    # by hand, from the saved float32 weights the dictionary encodes with
    acts = torch.relu(states.float() @ encoder.float() + 1.0).double()
    expected = float((acts[1, 0] - acts[0, 0]) * (decoder[0].float().double() @ grad))
    assert top.estimate == pytest.approx(expected, rel=1e-4)
    assert abs(top.estimate) > 1e-5  # the tiny random model's gradient at the site is small (|dM/dx| ~ 3e-3)
    assert features.estimate.iloc[1:].abs().max() < 1e-5 * abs(top.estimate)
    assert top.real == pytest.approx(top.estimate, rel=0.1)
    verified = features.iloc[1:3]
    assert verified.real.notna().all() and verified.real.abs().max() < 0.05 * abs(top.real)
    assert features.real.iloc[3:].isna().all()
    together = table[table.feature == -1].iloc[0]
    assert together.real == pytest.approx(top.real, rel=0.1)


def test_a_site_after_the_target_is_one_error_line(tmp_path):
    sst = sst_model()
    folder = write_dictionary(tmp_path / "d", 32, WIDTH, layer=LAYER, iterations=(ITERATION,))
    with pytest.raises(UsageError, match="at or before the target") as err:
        feature_attribution(sst, folder, CLEAN, COUNTERFACTUAL, TARGET, DEPTH, CONFIG, LAYER, 1, ITERATION)
    assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match="trained on layer 1"):
        feature_attribution(sst, folder, CLEAN, COUNTERFACTUAL, TARGET, DEPTH, CONFIG, 0, POSITION, ITERATION)

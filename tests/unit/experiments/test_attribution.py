"""Attribution patching: the gradient estimate of a site's patching effect equals the real patching effect to first
order (the error falls quadratically with the patch size), on a tiny float64 Gemma 3, in every prompt mode; the
clean pass is unchanged by the gradient leaves; one gradient serves every source iteration; and gradients through
a quantised model without LoRA are refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from sst_interp.experiments.attribution import (attribution_pass, check_gradients, estimates, metric_values,
                                                patch_effects)
from sst_interp.experiments.trace import Target
from sst_interp.interventions import Operation
from sst_interp.kernels.errors import UsageError
from sst_interp.model import generate
from tests.unit.interventions.test_interventions import CONFIG, IDS, PROMPTS, recorded, sst_model, write_run

pytestmark = pytest.mark.usefixtures("one_thread")

EPS = (0.02, 0.01, 0.005)
KEYS = ["question_id", "layer", "position", "iteration", "source_iteration"]


def _setup(tmp_path, prompt_mode: str = "two_pass", depth: int = 2, target: int = 2):
    """The model, a recorded depth-3 reference run, a generation config and each row's target (depth ``depth``'s
    greedy token at position ``target``, the tokens before it forced)."""
    sst = sst_model(torch.float64)
    config = dataclasses.replace(CONFIG, prompt_mode=prompt_mode, logits_every_iteration=False)
    _, clean = recorded(sst, config=config)
    write_run(tmp_path / "ref", sst, clean)
    tokens = generate(sst, PROMPTS, depth, config).token_ids
    targets = [Target(q, target, int(t[target]), tuple(int(x) for x in t[:target])) for q, t in zip(IDS, tokens)]
    return sst, config, targets


def _errors(sst, config, targets, operation, estimate: pd.DataFrame, sites, depth: int = 2):
    """Per eps: (|real - eps * estimate| summed over sites and rows, the largest |real / (eps * estimate) - 1|)."""
    total, worst = [], []
    for eps in EPS:
        real = patch_effects(sst, PROMPTS, targets, depth, config, dataclasses.replace(operation, scale=eps), sites)
        both = real.merge(estimate, on=KEYS, validate="one_to_one")
        assert len(both) == len(sites) * len(IDS)
        predicted = eps * both["estimate"]
        total.append(float((both["real"] - predicted).abs().sum()))
        worst.append(float((both["real"] / predicted - 1).abs().max()))
    return np.array(total), np.array(worst)


@pytest.mark.parametrize("prompt_mode", ["two_pass", "sequential", "none"])
def test_the_estimate_is_the_patching_effect_to_first_order(tmp_path, prompt_mode):
    sst, config, targets = _setup(tmp_path, prompt_mode)
    gradients = attribution_pass(sst, PROMPTS, targets, 2, config)
    # the leaves add zero: the attribution pass measures exactly what the plain forced pass does
    assert np.array_equal(gradients.metric, metric_values(sst, PROMPTS, targets, 2, config))
    # every (layer, position <= target, iteration) site has a gradient
    assert set(gradients.grads) == {(p, i, layer) for p in range(3) for i in (1, 2) for layer in range(3)}
    resample = Operation("resample", run=str(tmp_path / "ref"), depth=3, seed=0)
    estimate = estimates(gradients, resample, targets, sst)
    # the four sites the estimate ranks highest (whatever they are), checked by real patching scaled by eps
    ranked = estimate.assign(size=estimate["estimate"].abs()).groupby(["layer", "position", "iteration"])["size"]
    top = ranked.min().sort_values(ascending=False).index[:4]
    sites = [(layer, position, iteration, iteration) for layer, position, iteration in top]
    total, worst = _errors(sst, config, targets, resample, estimate, sites)
    # error ~ eps^2: it falls by about 4 per halving of eps, and the real / estimated ratio tends to 1
    ratios = total[:-1] / total[1:]
    assert np.all((ratios > 3.4) & (ratios < 4.6)), (total, ratios)
    assert np.all(worst[1:] < worst[:-1] / 1.6) and worst[-1] < 0.1, worst


def test_one_gradient_estimates_every_source_iteration(tmp_path):
    # trace's setting: depth 3's states at iteration j patched into iteration 1 of a depth-1 pass; one gradient
    # (at iteration 1) gives the layer x position x source-iteration cube
    sst, config, targets = _setup(tmp_path, depth=1)
    gradients = attribution_pass(sst, PROMPTS, targets, 1, config, layers=[0, 1])
    assert {key[2] for key in gradients.grads} == {0, 1} and {key[1] for key in gradients.grads} == {1}
    patch = Operation("patch", run=str(tmp_path / "ref"), depth=3)
    estimate = estimates(gradients, patch, targets, sst, source_iterations=(1, 2, 3))
    assert sorted(estimate["source_iteration"].unique()) == [1, 2, 3]
    cube = estimate.groupby(["layer", "position", "source_iteration"])["estimate"].count()
    assert len(cube) == 2 * 3 * 3 and (cube == len(IDS)).all()
    sites = [(1, 2, 1, j) for j in (1, 2, 3)]
    real = patch_effects(sst, PROMPTS, targets, 1, config, dataclasses.replace(patch, scale=EPS[-1]), sites)
    both = real.merge(estimate, on=KEYS, validate="one_to_one")
    np.testing.assert_allclose(both["real"], EPS[-1] * both["estimate"], rtol=0.05, atol=1e-9)
    # depth 3's iteration 1 at a later position differs from depth 1's (the contexts differ): not all zero
    assert (both["estimate"].abs() > 1e-6).all()


def test_a_logit_difference_metric_has_its_own_gradient(tmp_path):
    sst, config, targets = _setup(tmp_path)
    foils = [(t.token + 1) % 128 for t in targets]
    gradients = attribution_pass(sst, PROMPTS, targets, 2, config, foils=foils)
    np.testing.assert_array_equal(gradients.metric, metric_values(sst, PROMPTS, targets, 2, config, foils=foils))
    mean = Operation("mean", run=str(tmp_path / "ref"), depth=3)
    estimate = estimates(gradients, mean, targets, sst)
    site = estimate.loc[estimate["estimate"].abs().idxmax()]
    key = (int(site["layer"]), int(site["position"]), int(site["iteration"]), int(site["iteration"]))
    real = patch_effects(sst, PROMPTS, targets, 2, config, dataclasses.replace(mean, scale=EPS[-1]), [key],
                         foils=foils)
    both = real.merge(estimate, on=KEYS)
    np.testing.assert_allclose(both["real"], EPS[-1] * both["estimate"], rtol=0.1, atol=1e-7)


def test_gradients_on_a_quantised_model_without_lora_are_refused():
    sst = sst_model(torch.float64)
    check_gradients(sst)  # float weights: fine
    sst.backbone.is_quantized = True
    with pytest.raises(UsageError, match="quantised without a LoRA adapter"):
        check_gradients(sst)
    with pytest.raises(UsageError, match="quantised without a LoRA adapter"):
        attribution_pass(sst, PROMPTS, [Target("q0", 0, 5, ())] * 2, 1, CONFIG)
    # with a LoRA adapter's parameters, the gradient has a path
    sst.backbone.register_parameter("lora_A", torch.nn.Parameter(torch.zeros(1)))
    check_gradients(sst)


# ---------------------------------------------------------------------------------------------- the experiment
def test_the_experiment_finds_only_the_planted_path_and_verifies_its_top_cells(tmp_path):
    from sst_interp.experiments.attribution import AttributionConfig, run_attribution
    from sst_interp.experiments.manifest import kinds_in, read_table
    from sst_interp.experiments.trace import find_targets
    from sst_interp.store import Run
    from tests.unit.experiments.test_trace import DEPTH, STAR, planted_setup

    tables = run_attribution(planted_setup(4), tmp_path, AttributionConfig(depth=DEPTH, positions=6, verify_top=3))
    effects = tables["attribution_effects"]
    assert len(effects) and set(effects["source_iteration"]) == set(range(1, DEPTH + 1))
    # the planted model passes information between positions only through layer STAR's stream, and depth k's
    # states below STAR are depth 1's: every other cell's estimate is exactly 0 (zero gradient or zero difference)
    found, _ = find_targets(Run.open(tmp_path / "runs" / "clean"), DEPTH, 6)
    target_of = {q: t.position for q, t in found.items()}
    effects = effects.assign(target=effects["question_id"].map(target_of))
    on_path = (effects["layer"] == STAR) | ((effects["layer"] > STAR) & (effects["position"] == effects["target"]))
    assert (effects.loc[~on_path, "estimate"] == 0).all()
    assert (effects.loc[on_path & (effects["source_iteration"] == DEPTH), "estimate"] != 0).any()
    verified = tables["attribution_verified"]
    assert len(verified) == 3 and (verified["n_questions"] > 0).all()
    assert (verified["real_mean"] != 0).all()  # the top-ranked cells are real effects, in the direction estimated
    assert (np.sign(verified["real_mean"]) == np.sign(verified["estimate_mean"])).all(), verified
    timing = tables["attribution_timing"]
    assert (timing["ratio"] > 0).all() and (timing["sites"] > 0).all()
    assert "attribute" in kinds_in(tmp_path)
    pd.testing.assert_frame_equal(read_table(tmp_path, "attribute", "attribution_verified"), verified)


def test_the_command_refuses_gradients_on_a_quantised_model(tmp_path, capsys, monkeypatch):
    from sst_interp.cli.intervene import main
    from sst_interp.experiments import setup as experiment_setup
    from tests.unit.conftest import fails_with_one_error_line, save_tiny_model

    model = save_tiny_model(tmp_path / "model")
    argv = ["attribute", "--out", str(tmp_path / "exp"), "--model", str(model), "--demo-preset", "--limit", "2",
            "--batch-size", "2", "--max-new-tokens", "4", "--full-positions", "3", "--positions", "3", "--top-k",
            "6", "--device", "cpu", "--depth", "2", "--verify-top", "1"]
    assert main(argv) == 0
    # the report shows the verified cells as written
    from sst_interp.cli.report import main as report

    assert report(["--run", str(tmp_path / "exp" / "runs" / "clean"), "--out", str(tmp_path / "rep"), "--quiet",
                   "--only", "tab_intervention_attribution", "--experiment", str(tmp_path / "exp")]) == 0
    shown = pd.read_csv(tmp_path / "rep" / "tab_intervention_attribution.csv")
    pd.testing.assert_frame_equal(shown.drop(columns="experiment"),
                                  pd.read_csv(tmp_path / "exp" / "attribution_verified.csv"))
    load = experiment_setup.load

    def quantised(base):
        setup = load(base)
        setup.sst.backbone.is_quantized = True  # as a 4-bit load would mark it
        return setup

    monkeypatch.setattr(experiment_setup, "load", quantised)
    argv[2] = str(tmp_path / "exp2")
    fails_with_one_error_line(capsys, main, argv, "quantised without a LoRA adapter")
    assert not (tmp_path / "exp2").exists()

"""The four intervention experiments on the natively looping families (HRM-Text, Inkling-2 Loop, Dory) and on a
bring-your-own model (the toy Huginn of ``tests/unit/byo``, ``--loop FILE.py:NAME --trust-remote-code``), on tiny
random configs.

- window: each condition is exactly the run ``record --intervention`` records with the condition's spec (tokens,
  hidden states and logits bit for bit), the family's window is a freeze of its carrying layers at iterations
  ``freeze_from .. k-1`` and its controls read the same visits, and the table has the SST's controls and statistics;
- trace: depth k's state is read at each layer's own last visit (Inkling-2 Loop's and Dory's layers outside the loop:
  iteration 1); layers whose depth-k states are depth 1's give exactly 0; on HRM-Text and Dory patching the last
  layer at the target gives exactly the total effect (the head reads the final norm of it);
- attribute: the gradient through the family's loop (every HRM-Text L visit included, every Dory loop) predicts a
  real patch scaled by eps to first order; a visit the forward runs without autograd is refused with the reason;
- steer: the probe's direction moves exactly the probe layer's state at iterations 2..k;
- what a family cannot take is one ``error:`` line, exit 2, nothing written.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from sst_interp.cli.intervene import main
from sst_interp.cli.record import main as record_main
from sst_interp.experiments import families
from sst_interp.experiments.attribution import attribution_pass, estimates, metric_values, patch_effects
from sst_interp.experiments.manifest import read_manifest
from sst_interp.experiments.trace import Target
from sst_interp.interventions import Operation
from sst_interp.kernels.errors import UsageError
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped
from sst_interp.store import Run
from sst_interp.model.loop_file import load_loop_file
from sst_interp.model.loop_model import load_loop_backbone
from tests.unit.byo import LOOP_FILE, save_toy_huginn
from tests.unit.conftest import fails_with_one_error_line, save_tiny_model, tiny_backbone

pytestmark = pytest.mark.usefixtures("one_thread")

DEPTH = 3
COMMON = ["--questions", "demo", "--limit", "4", "--batch-size", "2", "--max-new-tokens", "4", "--full-positions",
          "3", "--sketch-positions", "0", "--top-k", "6", "--device", "cpu", "--dtype", "float32"]
#: per family: its carrying layers (freeze_layers) and the iterations a window denies them at depth 3
CARRYING = {"hrm_text": ([1, 3, 5], [1, 2]), "inkling2_loop": ([2, 3], [2]), "dory": ([3], [1, 2]),
            "byo": ([2], [1, 2])}
#: trace's and attribute's --target-position where 2 has no target (the toy Huginn's depths 1 and 3 differ at
#: position 0 on every demo question, so a later target has no shared prefix)
TARGET = {"byo": 0}
#: what record and intervene are told for the bring-your-own model (its folder holds its own code)
BYO = ["--loop", f"{LOOP_FILE}:TOY_HUGINN", "--trust-remote-code"]


@pytest.fixture(scope="module", params=sorted(CARRYING))
def family(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def folder(family: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if family == "byo":
        return save_toy_huginn(tmp_path_factory.mktemp(family) / "model")
    return save_tiny_model(tmp_path_factory.mktemp(family) / "model", family)


def _model_flags(folder: Path) -> list[str]:
    """``--model FOLDER``, with the bring-your-own flags for the toy Huginn's folder."""
    return ["--model", str(folder), *(BYO if (folder / "modeling_toy_huginn.py").is_file() else [])]


def _model(family: str, folder: Path, dtype: torch.dtype) -> LoopModel:
    """The family's tiny model in ``dtype`` (the toy Huginn: loaded from its folder with its declaration)."""
    if family == "byo":
        loop = load_loop_file(BYO[1])
        return LoopModel(load_loop_backbone(str(folder), loop, dtype=dtype, trust_remote_code=True)[0], loop)
    return LoopModel(tiny_backbone(family, dtype=dtype))


def _experiment(kind: str, folder: Path, out: Path, *extra: str) -> int:
    return main([kind, "--out", str(out), *_model_flags(folder), *COMMON, "--depth", str(DEPTH), *extra])


def _by_question(run: Run, depth: int, table: str = "hidden") -> dict[str, np.ndarray]:
    if table == "hidden":
        return {block.question_id: np.asarray(block.values) for block in run.hidden(depth)}
    return {block.question_id: np.concatenate([block.top_logprobs.ravel(), block.top_ids.ravel().astype(float)])
            for block in run.logits(depth)}


# ------------------------------------------------------------------------------------------------ window
def test_window_conditions_are_the_runs_record_intervention_records(family: str, folder: Path,
                                                                    tmp_path: Path) -> None:
    layers, iterations = CARRYING[family]
    out = tmp_path / "exp"
    assert _experiment("window", folder, out, "--size", str(len(layers)), "--stride", "1", "--controls", "mean") == 0
    name = f"window-{layers[0]}-{layers[-1]}"
    table = pd.read_parquet(out / "window.parquet").set_index("condition")
    assert list(table.index) == ["clean depth 1", f"clean depth {DEPTH}", name, f"{name}-mean"]
    assert list(table["mode"]) == ["clean", "clean", "freeze", "mean"]
    assert set(table.loc[[name, f"{name}-mean"], "correction"]) == {"holm over 2 cells"}
    conditions = read_manifest(out, "window")["conditions"]
    freeze = conditions[name]["spec"]["interventions"][0]
    assert freeze["site"] == {"stream": "layer_out", "layers": layers, "iterations": iterations}
    assert freeze["operation"]["kind"] == "freeze"
    mean = conditions[f"{name}-mean"]["spec"]["interventions"][0]
    assert mean["site"] == {**freeze["site"], "positions": [0, 1, 2]}  # the same visits, at the full positions
    assert mean["operation"]["kind"] == "mean" and mean["operation"]["run"] == str(out / "runs" / "clean")
    clean = Run.open(out / "runs" / "clean")
    for condition in (name, f"{name}-mean"):
        mine = Run.open(out / "runs" / condition)
        again = tmp_path / f"record-{condition}"
        assert record_main([*_model_flags(folder), *COMMON, "--depths", str(DEPTH), "--intervention",
                            str(out / "specs" / f"{condition}.json"), "--out", str(again)]) == 0
        theirs = Run.open(again)
        columns = ["question_id", "token_ids", "correct"]
        pd.testing.assert_frame_equal(mine.generations()[columns].reset_index(drop=True),
                                      theirs.generations()[columns].reset_index(drop=True))
        for table_name in ("hidden", "logits"):
            a, b = _by_question(mine, DEPTH, table_name), _by_question(theirs, DEPTH, table_name)
            assert a.keys() == b.keys() and all(np.array_equal(a[q], b[q], equal_nan=True) for q in a)
        # and the condition did change the run: the comparison above can fail
        before, after = _by_question(clean, DEPTH), _by_question(mine, DEPTH)
        assert any(not np.array_equal(before[q], after[q], equal_nan=True) for q in before)
    # the report reads the family's experiment folder as an SST's
    from sst_interp.cli.report import main as report_main

    assert report_main(["--run", str(out / "runs" / "clean"), "--out", str(tmp_path / "report"), "--experiment",
                        str(out), "--only", "tab_intervention_window"]) == 0
    assert (tmp_path / "report" / "tab_intervention_window.csv").is_file()
    if family in ("dory", "byo"):
        # a looped block's window denies passes 2..k the state: each repeats pass 1, and the model answers exactly as
        # at depth 1
        frozen = Run.open(out / "runs" / name).generations().set_index(["question_id", "depth"])["token_ids"]
        gens = clean.generations().set_index(["question_id", "depth"])["token_ids"]
        questions = sorted({q for q, _ in gens.index})
        assert [list(frozen[(q, DEPTH)]) for q in questions] == [list(gens[(q, 1)]) for q in questions]
        assert [list(gens[(q, DEPTH)]) for q in questions] != [list(gens[(q, 1)]) for q in questions]


# ------------------------------------------------------------------------------------------------ trace
def test_trace_reads_each_layers_last_visit_and_finds_the_exact_cells(family: str, folder: Path,
                                                                      tmp_path: Path) -> None:
    out = tmp_path / "exp"
    target = TARGET.get(family, 2)
    assert _experiment("trace", folder, out, "--positions", "3", "--target-position", str(target)) == 0
    effects = pd.read_parquet(out / "trace_effects.parquet")
    targets = pd.read_parquet(out / "trace_targets.parquet")
    measured = targets[targets["skipped"] == ""].set_index("question_id")
    assert len(measured) >= 2
    model = _model(family, folder, torch.float32)
    visited = families.visited_iterations(model, DEPTH)
    grid = effects[effects["map"] == "layer_position"]
    assert {(int(r.layer), int(r.iteration)) for r in grid.itertuples()} == {
        (layer, its[-1]) for layer, its in visited.items()}
    by_iteration = effects[effects["map"] == "layer_iteration"]
    assert {(int(r.layer), int(r.iteration)) for r in by_iteration.itertuples()} == {
        (layer, i) for layer, its in visited.items() for i in its[:-1]}
    assert (grid["indirect_effect"] != 0).any()
    if family != "hrm_text":
        # the layers before the loop (Inkling-2 Loop's, Dory's input section) compute the same at every depth: their
        # patch changes nothing, exactly
        before = effects[effects["layer"] < model.loop.looped_layers(model.config)[0]]
        assert len(before) and (before["indirect_effect"][before["map"] != "layer_position_resampled"] == 0).all()
    if family != "inkling2_loop":
        # depth k's iteration 1 is depth 1's own (HRM-Text's cycle 1, Dory's first loop in its own KV slots); and the
        # head reads the last layer's output through the final norm (HRM-Text: z_H = norm(last H block); Dory: the
        # last output layer), so patching that layer at the target gives depth k's logits there: the total effect
        assert (by_iteration[by_iteration["iteration"] == 1]["indirect_effect"] == 0).all()
        last = grid[(grid["layer"] == model.num_layers - 1) & (grid["position"] == target)].set_index("question_id")
        np.testing.assert_allclose(last.loc[measured.index, "indirect_effect"], measured["total_effect"],
                                   rtol=0, atol=1e-6)
        assert (measured["total_effect"].abs() > 1e-5).all()


# ------------------------------------------------------------------------------------------------ attribute
PROMPTS = [[2, 17, 40, 9, 33, 5], [7, 7, 21, 60, 3, 11]]  # one length: no padding
IDS = ["demo-000", "demo-001"]
#: HRM-Text in float64 (its eager softmax still rounds in float32); Inkling-2 Loop in float32 (transformers' model
#: fails in float64), so its patches are larger for the first-order term to stand out of the rounding
EPS = {"hrm_text": (0.02, 0.01, 0.005), "inkling2_loop": (0.04, 0.02, 0.01), "dory": (0.02, 0.01, 0.005),
       "byo": (0.02, 0.01, 0.005)}
DTYPE = {"hrm_text": torch.float64, "inkling2_loop": torch.float32, "dory": torch.float64, "byo": torch.float64}


@pytest.fixture(scope="module")
def reference(folder: Path, family: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ref") / family
    assert record_main([*_model_flags(folder), *COMMON[:2], "--limit", "2", *COMMON[4:], "--depths", f"1,{DEPTH}",
                        "--out", str(out)]) == 0
    return out


def _targets(model: LoopModel, depth: int, position: int = 2) -> list[Target]:
    tokens = generate_looped(model, PROMPTS, depth, GenerationConfig(max_new_tokens=position + 1)).token_ids
    return [Target(q, position, int(t[position]), tuple(int(x) for x in t[:position])) for q, t in zip(IDS, tokens)]


def test_attribution_through_the_loop_is_the_patching_effect_to_first_order(family: str, folder: Path,
                                                                           reference: Path) -> None:
    model = _model(family, folder, DTYPE[family])
    config = GenerationConfig(max_new_tokens=3)
    targets = _targets(model, 2)
    gradients = attribution_pass(model, PROMPTS, targets, 2, config, question_ids=IDS)
    # the leaves add zero: the attribution pass measures exactly what the plain forced pass does
    assert np.array_equal(gradients.metric, metric_values(model, PROMPTS, targets, 2, config, question_ids=IDS))
    assert not np.isnan(gradients.metric).any()
    visits = model.loop.visits(model.config, 2)
    assert set(gradients.grads) == {(p, i, layer) for p in range(3) for i, layer in visits}
    # the gradient reaches the first visit of the first iteration at position 0 (HRM-Text: its first L visit, which
    # transformers runs without autograd unless told otherwise)
    first_iteration, first_layer = visits[0]
    assert float(gradients.grads[(0, first_iteration, first_layer)].abs().sum()) > 0
    patch = Operation("patch", run=str(reference), depth=DEPTH)
    estimate = estimates(gradients, patch, targets, model, source_iterations=(None,))
    ranked = estimate.assign(size=estimate["estimate"].abs()).groupby(["layer", "position", "iteration"])["size"]
    sites = [(layer, p, i, i) for layer, p, i in ranked.min().sort_values(ascending=False).index[:4]]
    keys = ["question_id", "layer", "position", "iteration", "source_iteration"]
    total, worst = [], []
    for eps in EPS[family]:
        real = patch_effects(model, PROMPTS, targets, 2, config, dataclasses.replace(patch, scale=eps), sites,
                             question_ids=IDS)
        both = real.merge(estimate, on=keys, validate="one_to_one")
        assert len(both) == len(sites) * len(IDS)
        predicted = eps * both["estimate"]
        total.append(float((both["real"] - predicted).abs().sum()))
        worst.append(float((both["real"] / predicted - 1).abs().max()))
    # error ~ eps^2: it falls by about 4 per halving of eps, and real / estimated tends to 1
    ratios = np.array(total[:-1]) / np.array(total[1:])
    assert np.all((ratios > 3.0) & (ratios < 5.0)), (total, ratios)
    assert worst[-1] < 0.1 and worst[-1] < worst[0], worst


def test_attribution_refuses_a_visit_the_forward_runs_without_autograd(monkeypatch: pytest.MonkeyPatch) -> None:
    # without its setting HRM-Text runs the early L visits under no_grad: the tap refuses instead of reporting a
    # gradient of 0 there
    model = LoopModel(tiny_backbone("hrm_text", dtype=torch.float64))
    monkeypatch.setattr(families, "GRADIENT_SETTINGS", {})
    with pytest.raises(UsageError, match="runs visit .* without autograd"):
        attribution_pass(model, PROMPTS, _targets(model, 2), 2, GenerationConfig(max_new_tokens=3),
                         question_ids=IDS)
    assert model.backbone.model.L_bp_cycles_padded == LoopModel(
        tiny_backbone("hrm_text", dtype=torch.float64)).backbone.model.L_bp_cycles_padded  # restored


def test_attribute_command_on_a_family(family: str, folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    assert _experiment("attribute", folder, out, "--positions", "3", "--target-position",
                       str(TARGET.get(family, 2)), "--verify-top", "2") == 0
    effects = pd.read_parquet(out / "attribution_effects.parquet")
    model = _model(family, folder, torch.float32)
    visited = families.visited_iterations(model, DEPTH)
    # a source iteration is estimated only where depth k visits the layer
    assert all(int(r.source_iteration) in visited[int(r.layer)] for r in effects.itertuples())
    verified = pd.read_parquet(out / "attribution_verified.parquet")
    assert len(verified) == 2 and (np.sign(verified["real_mean"]) == np.sign(verified["estimate_mean"])).all()


# ------------------------------------------------------------------------------------------------ steer
def _probe(path: Path, folder: Path, layer: int) -> Path:
    from sst_interp.probe.io import ProbeMeta, save_probe
    from sst_interp.probe.model import HaltingProbe, ProbeConfig

    torch.manual_seed(0)
    # the provenance a probe trained on a run of this family folder records (its run identity's model)
    provenance = {"identity": {"model": str(folder.resolve())}, "n_must_halt": 10}
    save_probe(path, HaltingProbe(ProbeConfig(input_size=32)), ProbeMeta(layer=layer, provenance=provenance))
    return path


def test_steering_a_family_moves_the_probe_layers_state_by_scale_times_radius(family: str, folder: Path,
                                                                               tmp_path: Path) -> None:
    model = _model(family, folder, torch.float32)
    layer = model.loop.state_layer(model.config)
    out = tmp_path / "exp"
    assert _experiment("steer", folder, out, "--probe", str(_probe(tmp_path / "probe", folder, layer)),
                       "--scales=2", "--random-directions", "1") == 0
    table = pd.read_parquet(out / "steer.parquet").set_index("condition")
    assert list(table.index) == ["clean", "scale+2", "random0+2"]
    shift = np.load(out / "direction.npy")
    clean, steered = _by_question(Run.open(out / "runs" / "clean"), DEPTH), _by_question(
        Run.open(out / "runs" / "scale+2"), DEPTH)
    visits = model.loop.visits(model.config, DEPTH)
    earlier = visits[:visits.index((2, layer))]  # every visit before the first steered one (iteration 2, layer)
    for question, before in clean.items():
        after = steered[question]
        for iteration, visited in earlier:
            np.testing.assert_array_equal(after[0, iteration - 1, visited], before[0, iteration - 1, visited])
        np.testing.assert_allclose(after[0, 1, layer] - before[0, 1, layer], 2 * shift, atol=1e-5)
        assert not np.allclose(after[0, 2, layer], before[0, 2, layer])  # the later iteration moved too


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("kind, extra, pattern", [
    ("window", ["--mode", "zero"], "zeroes state_in, the SST blend's input; hrm_text has no blend"),
    ("window", ["--controls", "zero"], "zeroes state_in"),
    ("window", ["--size", "4"], "--size 4 exceeds the 3 layers of hrm_text that carry a state"),
    ("window", ["--demo-preset"], "--demo-preset is the untrained SST preset"),
    ("trace", ["--layers", "9"], "layers [9] do not exist"),
])
def test_what_hrm_cannot_take_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture, kind: str,
                                                extra: list[str], pattern: str) -> None:
    folder = save_tiny_model(tmp_path / "model", "hrm_text")
    out = tmp_path / "exp"
    fails_with_one_error_line(capsys, main, [kind, "--out", str(out), "--model", str(folder), *COMMON,
                                             "--depth", str(DEPTH), *extra], pattern)
    assert not out.exists()


def test_what_inkling_cannot_take_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = save_tiny_model(tmp_path / "model", "inkling2_loop")
    out = tmp_path / "exp"
    argv = ["--out", str(out), "--model", str(folder), *COMMON]
    # pass 1 reads no messages: at depth 2 no pass is left to deny the state
    fails_with_one_error_line(capsys, main, ["window", *argv, "--depth", "2"], "use --depth >= 3")
    # a probe at a layer outside the loop: it has no iteration 2 to steer
    probe = _probe(tmp_path / "probe", folder, 0)
    fails_with_one_error_line(capsys, main, ["steer", *argv, "--depth", "3", "--probe", str(probe)],
                              "never loops layer 0")
    assert not out.exists()
    assert json.loads((folder / "config.json").read_text())["model_type"] == "inkling2_loop_text"


@pytest.mark.parametrize("kind, extra, pattern", [
    ("window", ["--mode", "zero"], "zeroes state_in, the SST blend's input; dory has no blend"),
    ("window", ["--size", "2"], "--size 2 exceeds the 1 layers of dory that carry a state ([3]"),
    ("steer", ["--probe", "PROBE0"], "never loops layer 0"),  # a probe at an input layer: no iteration 2 to steer
    ("steer", ["--probe", "PROBE5"], "never loops layer 5"),  # ... or at an output layer
])
def test_what_dory_cannot_take_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture, kind: str,
                                                 extra: list[str], pattern: str) -> None:
    folder = save_tiny_model(tmp_path / "model", "dory")
    extra = [str(_probe(tmp_path / "probe", folder, int(x[5:]))) if x.startswith("PROBE") else x for x in extra]
    out = tmp_path / "exp"
    fails_with_one_error_line(capsys, main, [kind, "--out", str(out), "--model", str(folder), *COMMON,
                                             "--depth", str(DEPTH), *extra], pattern)
    assert not out.exists()


@pytest.mark.parametrize("flags, pattern", [
    ([], "holds its own modelling code (config.json auto_map: AutoConfig, AutoModelForCausalLM); pass "
         "--trust-remote-code"),
    (["--trust-remote-code"], "is a model transformers does not ship (model_type 'toy_huginn'); declare its loop and "
                              "pass --loop FILE.py:NAME"),
])
def test_what_a_bring_your_own_model_needs_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                             flags: list[str], pattern: str) -> None:
    folder = save_toy_huginn(tmp_path / "model")
    out = tmp_path / "exp"
    fails_with_one_error_line(capsys, main, ["window", "--out", str(out), "--model", str(folder), *COMMON,
                                             "--depth", str(DEPTH), "--size", "1", *flags], pattern)
    assert not out.exists()


def test_attribute_with_no_target_writes_its_tables_and_exits_0(tmp_path: Path) -> None:
    # the toy Huginn's depths 1 and 3 differ at position 0 on every demo question: no question has a target at
    # position 2, so no pass is timed (the command divided by the zero total and exited with a traceback)
    folder = save_toy_huginn(tmp_path / "model")
    out = tmp_path / "exp"
    assert _experiment("attribute", folder, out, "--positions", "3", "--target-position", "2") == 0
    targets = pd.read_parquet(out / "attribution_timing.parquet")
    assert targets["clean_pass_s"].sum() == 0 and (out / "experiment-attribute.json").is_file()

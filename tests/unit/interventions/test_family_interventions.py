"""Interventions at (layer, iteration, position) on HRM-Text, Inkling-2 Loop, Dory and a bring-your-own looped block,
through the SST's spec.

Exactness: HRM-Text, Dory and the toy Huginn in float64, Inkling-2 Loop in float32 (its router stays float32); a spec that reads a recorded
run (patch, mean) runs at float32 for both, the dtype a run stores its states in.

- a no-op (add at scale 0 everywhere; patch with the run's own states) equals the clean run bit for bit;
- freeze keeps the carried state as the visit read it, with the consequence each family's loop implies:
  HRM-Text frozen z_H from cycle p on answers as at depth p - 1 (z_H of cycle p - 1 reaches the head; from cycle 1
  on, the scaled token embedding does), a frozen z_L makes the next L visit repeat the one it froze;
  Inkling-2 Loop frozen at passes p..P (or at one pass p < P) answers as at depth p (P - 1), and the pass after a
  frozen one repeats it: every pass restarts from the pre-loop state, so equal messages make an equal pass; a looped
  block (Dory in both KV cache modes, the bring-your-own toy Huginn) frozen at passes p..D - 1 (or at one pass
  p < D) answers as at depth p (D - 1): the next pass's first layer reads the input the frozen pass's did;
- zero and mean put exactly the intended state at the site, and nothing before it changes;
- a spec the family cannot take (a layer it never loops at that iteration, a freeze where no state is handed on,
  an SST-only stream) is one ``error:`` line, exit 2, nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoConfig

from sst_interp.cli.record import main as record_main
from sst_interp.hooks import RecordConfig, VisitRecorder
from sst_interp.interventions import InterventionSpec
from sst_interp.interventions.loops import intervene_loop
from sst_interp.interventions.sites import run_site_counts
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_file import load_loop_file
from sst_interp.model.loop_model import LoopModel, generate_looped, load_loop_backbone
from sst_interp.model.loops import loop_for_model_type
from sst_interp.model.observers import ObserverGroup
from sst_interp.model.testing import tiny_dory, tiny_hrm_text, tiny_inkling2_loop
from sst_interp.store import Run
from tests.unit.byo import LOOP_FILE, save_toy_huginn
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model
from tests.unit.observers import KeptLogits

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [2, 17, 40, 9, 33, 5]
NEW_TOKENS = 6
#: a looped layer of each tiny family, and the layer of its carried state (HRM: the last H block; Inkling: the
#: looped block's output)
LOOPED = {"hrm_text": 3, "inkling2_loop": 2}


@pytest.fixture(scope="module")
def hrm() -> LoopModel:
    return LoopModel(tiny_hrm_text(dtype=torch.float64))


@pytest.fixture(scope="module")
def inkling() -> LoopModel:
    return LoopModel(tiny_inkling2_loop())


def _spec(*rules: tuple[dict, dict]) -> InterventionSpec:
    return InterventionSpec.from_dict({"interventions": [{"site": site, "operation": op} for site, op in rules]})


def _generate(model: LoopModel, depth: int, spec: InterventionSpec | None = None, prompt: list[int] = PROMPT):
    """(tokens, logits [positions, V], hidden {(position, iteration, layer): [d] float64}, the intervener's site
    report) of one greedy generation with the recorder attached, the spec applied when given."""
    logits = KeptLogits()
    capture = RecordConfig(full_positions=NEW_TOKENS, sketch_positions=0, top_k=4)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS)
    report = None
    with VisitRecorder.for_model(model, ["q"], capture) as recorder:
        if spec is None:
            result = generate_looped(model, [prompt], depth, config, observer=ObserverGroup(recorder, logits))
        else:
            with intervene_loop(model, spec, ["q"]) as intervener:
                result = generate_looped(model, [prompt], depth, config,
                                         observer=ObserverGroup(intervener, recorder, logits))
            report = intervener.site_report()
    hidden = recorder.columns()["hidden"]
    values = hidden["values"].double().numpy()
    states = {(int(p), int(i), int(l)): values[n]
              for n, (p, i, l) in enumerate(zip(hidden["position"], hidden["iteration"], hidden["layer"]))}
    return result.token_ids[0], torch.stack(logits.logits), states, report


# ------------------------------------------------------------------------------------------------ no-op
@pytest.mark.parametrize("family", ["hrm_text", "inkling2_loop"])
def test_family_add_at_scale_zero_everywhere_equals_the_clean_run_bit_for_bit(family: str, hrm: LoopModel,
                                                                              inkling: LoopModel) -> None:
    model = hrm if family == "hrm_text" else inkling
    tokens, logits, states, _ = _generate(model, 2)
    noop = _spec(({"stream": "layer_out"}, {"kind": "add", "scale": 0.0, "direction": [1.0] * model.hidden_size}))
    after_tokens, after_logits, after_states, report = _generate(model, 2, noop)
    assert after_tokens == tokens and torch.equal(after_logits, logits)
    assert after_states.keys() == states.keys()
    assert all(np.array_equal(after_states[key], states[key]) for key in states)
    visits = len(model.loop.visits(model.config, 2))
    assert report[0]["sites"] == visits * NEW_TOKENS  # every visit of every position was changed by +0
    # the same direction at scale 1 does change the run: the comparison above can fail
    moved = _spec(({"stream": "layer_out", "positions": [0]}, {"kind": "add", "direction": [1.0] * model.hidden_size}))
    assert not torch.equal(_generate(model, 2, moved)[1][0], logits[0])


# ------------------------------------------------------------------------------------------------ freeze: HRM-Text
@pytest.mark.parametrize("depth, iterations, answers_as", [(2, [2], 1), (3, [3], 2), (3, [2, 3], 1)])
def test_hrm_freezing_z_h_from_cycle_p_answers_as_depth_p_minus_1(hrm: LoopModel, depth: int, iterations: list[int],
                                                                  answers_as: int) -> None:
    # z_H after cycles p..D is z_H of cycle p - 1, which only cycles 1..p-1 (their own KV slots) computed: the head
    # reads exactly what depth p - 1 gives it, at every position, so the generated tokens follow
    state = hrm.loop.state_layer(hrm.config)
    freeze = _spec(({"stream": "layer_out", "layers": [state], "iterations": iterations}, {"kind": "freeze"}))
    tokens, logits, states, report = _generate(hrm, depth, freeze)
    ref_tokens, ref_logits, _, _ = _generate(hrm, answers_as)
    assert tokens == ref_tokens and torch.equal(logits, ref_logits)
    assert report[0]["sites"] == len(iterations) * NEW_TOKENS
    clean_tokens, clean_logits, clean_states, _ = _generate(hrm, depth)
    assert not torch.equal(clean_logits, ref_logits)  # the clean depth D answers otherwise
    # the frozen block's own output is recorded unchanged: a freeze keeps the carried state, not the visit's output
    first = min(iterations)
    np.testing.assert_array_equal(states[(0, first, state)], clean_states[(0, first, state)])


def test_hrm_freezing_z_h_at_every_cycle_reads_the_scaled_token_embedding(hrm: LoopModel) -> None:
    state = hrm.loop.state_layer(hrm.config)
    freeze = _spec(({"stream": "layer_out", "layers": [state]}, {"kind": "freeze"}))
    tokens, logits, _, _ = _generate(hrm, 2, freeze)
    inputs = [PROMPT[-1], *tokens[:-1]]  # the token each call's last column reads
    inner = hrm.backbone.model
    with torch.no_grad():
        expected = hrm.backbone.lm_head(inner.embed_tokens(torch.tensor([inputs])) * inner.embedding_scale)[0]
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-12)
    assert tokens == [int(row.argmax()) for row in expected]


def test_hrm_freezing_z_l_makes_the_next_l_visit_repeat_the_frozen_one(hrm: LoopModel) -> None:
    # L visit 0 of cycle 1 hands on z_L_init (frozen): L visit 1 reads z_L_init + z_H as visit 0 did. One prompt
    # token, so no unfrozen prompt column gives the two visits' KV slots different histories.
    n = int(hrm.config.num_layers_per_stack)
    freeze = _spec(({"stream": "layer_out", "layers": [n - 1], "iterations": [1]}, {"kind": "freeze"}))
    _, _, states, _ = _generate(hrm, 2, freeze, prompt=[5])
    _, _, clean, _ = _generate(hrm, 2, prompt=[5])
    for position in range(NEW_TOKENS):
        for block in range(n):
            np.testing.assert_array_equal(states[(position, 1, n + block)], states[(position, 1, block)])
    assert not np.array_equal(clean[(0, 1, n)], clean[(0, 1, 0)])  # unfrozen, the two visits differ


# ---------------------------------------------------------------------------------------------- freeze: Inkling-2 Loop
@pytest.mark.parametrize("depth, iterations, answers_as", [(3, [2], 2), (3, [2, 3], 2), (4, [2], 3), (4, [3, 4], 3)])
def test_inkling_freezing_a_pass_repeats_it_and_answers_one_pass_shorter(inkling: LoopModel, depth: int,
                                                                         iterations: list[int],
                                                                         answers_as: int) -> None:
    # Frozen at pass p, pass p + 1 reads the messages pass p read, and restarts from the same pre-loop state: it is
    # pass p again. One prompt token: every column of every call is frozen, so the passes' KV slots agree too.
    looped = inkling.loop.looped_layers(inkling.config)
    freeze = _spec(({"stream": "layer_out", "iterations": iterations}, {"kind": "freeze"}))
    tokens, logits, states, report = _generate(inkling, depth, freeze, prompt=[5])
    ref_tokens, ref_logits, _, _ = _generate(inkling, answers_as, prompt=[5])
    assert tokens == ref_tokens and torch.equal(logits, ref_logits)
    assert report[0]["sites"] == len(iterations) * len(looped) * NEW_TOKENS
    p = iterations[0]
    for position in range(NEW_TOKENS):
        for layer in looped:
            np.testing.assert_array_equal(states[(position, p + 1, layer)], states[(position, p, layer)])
    clean_tokens, clean_logits, clean_states, _ = _generate(inkling, depth, prompt=[5])
    assert not torch.equal(clean_logits, ref_logits)
    assert not np.array_equal(clean_states[(0, p + 1, looped[-1])], clean_states[(0, p, looped[-1])])


@pytest.mark.parametrize("depth, iterations, answers_as", [(3, [2, 3], 2), (3, [2], 2), (4, [3, 4], 3)])
def test_inkling_freeze_on_a_multi_token_prompt_answers_exactly_as_the_shorter_depth(
        inkling: LoopModel, depth: int, iterations: list[int], answers_as: int) -> None:
    # Defect 1 of issue 46: the prompt's columns are computed in the prefill call, and pass p + 1 of the last column
    # attends over their pass-(p + 1) KV and conv caches. Frozen at the last column only, those caches were computed
    # unfrozen and the identity failed; a freeze keeps every column's messages, so every pass-(p + 1) cache is pass
    # p's, and the whole generation is depth p's.
    freeze = _spec(({"stream": "layer_out", "iterations": iterations}, {"kind": "freeze"}))
    tokens, logits, states, _ = _generate(inkling, depth, freeze)
    ref_tokens, ref_logits, ref_states, _ = _generate(inkling, answers_as)
    assert tokens == ref_tokens and torch.equal(logits, ref_logits)
    p = iterations[0]
    for position in range(NEW_TOKENS):
        for layer in inkling.loop.looped_layers(inkling.config):
            np.testing.assert_array_equal(states[(position, p + 1, layer)], ref_states[(position, p, layer)])
    clean_tokens, clean_logits, _, _ = _generate(inkling, depth)
    assert not torch.equal(clean_logits, ref_logits)  # the clean depth D answers otherwise: the check can fail


# ---------------------------------------------------------------------------------- freeze: a looped block (Dory, BYO)
@pytest.fixture(scope="module", params=["dory-per_loop", "dory-last_loop", "byo"])
def looped_block_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> LoopModel:
    if request.param == "byo":
        folder = save_toy_huginn(tmp_path_factory.mktemp("byo") / "toy", dtype=torch.float64)
        loop = load_loop_file(f"{LOOP_FILE}:TOY_HUGINN")
        return LoopModel(load_loop_backbone(str(folder), loop, dtype="float64", trust_remote_code=True)[0], loop)
    return LoopModel(tiny_dory(cache_mode=request.param.split("-")[1]))


@pytest.mark.parametrize("depth, iterations, answers_as", [(3, [1, 2], 1), (3, [2], 2), (3, [1], 2),
                                                           (4, [2, 3], 2), (4, [2, 3, 4], 2)])
def test_looped_block_freeze_repeats_the_frozen_pass_and_answers_as_the_shorter_depth(
        looped_block_model: LoopModel, depth: int, iterations: list[int], answers_as: int) -> None:
    # Frozen at pass p, pass p + 1's first looped layer gets the input pass p's got (Dory: the previous loop's normed
    # output plus the input section's; the toy: the adapter of the previous core output and the prelude's), at every
    # column of every call, so pass p + 1 is pass p again, its KV cache included. A multi-token prompt: the prefill's
    # columns are frozen too. Frozen at the last pass, nothing is left to read it (the block hands its output on to
    # the layers after it, not through a freeze).
    model = looped_block_model
    looped = model.loop.looped_layers(model.config)
    (carrying,) = model.loop.freeze_layers(model.config)
    assert carrying == looped[-1] and model.loop.freeze_from == 1
    freeze = _spec(({"stream": "layer_out", "layers": [carrying], "iterations": iterations}, {"kind": "freeze"}))
    tokens, logits, states, report = _generate(model, depth, freeze)
    ref_tokens, ref_logits, ref_states, _ = _generate(model, answers_as)
    assert tokens == ref_tokens and torch.equal(logits, ref_logits)
    assert report[0]["sites"] == len(iterations) * NEW_TOKENS
    clean_tokens, clean_logits, clean_states, _ = _generate(model, depth)
    assert not torch.equal(clean_logits, ref_logits)  # the clean depth D answers otherwise: the check can fail
    p = iterations[0]
    for position in range(NEW_TOKENS):
        for layer in looped:
            np.testing.assert_array_equal(states[(position, p + 1, layer)], states[(position, p, layer)])
            np.testing.assert_array_equal(states[(position, p, layer)], ref_states[(position, p, layer)])
        # the layers after the block read depth `answers_as`'s last pass
        for layer in range(looped[-1] + 1, model.num_layers):
            np.testing.assert_array_equal(states[(position, 1, layer)], ref_states[(position, 1, layer)])
    # the frozen visit's own output is recorded unchanged (at the prompt, where the clean run has the same history)
    np.testing.assert_array_equal(states[(0, p, carrying)], clean_states[(0, p, carrying)])
    assert not np.array_equal(clean_states[(0, p + 1, looped[0])], clean_states[(0, p, looped[0])])


def test_looped_block_freeze_takes_only_the_blocks_last_layer(looped_block_model: LoopModel) -> None:
    from sst_interp.kernels.errors import UsageError

    model = looped_block_model
    first = model.loop.looped_layers(model.config)[0]
    with pytest.raises(UsageError, match=rf"layers \[{first}\] hand no carried state on in .*a freeze takes layers "
                                         rf"\[{first + 1}\]"):
        with intervene_loop(model, _spec(({"stream": "layer_out", "layers": [first]}, {"kind": "freeze"}))):
            pass


# ------------------------------------------------------------------------------------------------ recorded runs
@pytest.fixture(scope="module", params=["hrm_text", "inkling2_loop"])
def family(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def folder(family: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp(family) / "model", family)


def _record(folder: Path, out: Path, *extra: str) -> Path:
    torch.set_num_threads(1)
    assert record_main([*FAST, "--model", str(folder), "--depths", "1,2", "--limit", "2", "--dtype", "float32",
                        "--out", str(out), *extra]) == 0
    return out


@pytest.fixture(scope="module")
def clean_run(folder: Path, family: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _record(folder, tmp_path_factory.mktemp("runs") / f"{family}-clean")


def _write(path: Path, *rules: tuple[dict, dict]) -> Path:
    path.write_text(json.dumps({"interventions": [{"site": s, "operation": o} for s, o in rules]}))
    return path


def _blocks(run: Run, depth: int, table: str) -> dict[str, dict[str, np.ndarray]]:
    """{question: {array field: values}} of one table at ``depth``."""
    read = run.hidden if table == "hidden" else run.logits
    return {block.question_id: {name: value for name, value in vars(block).items() if isinstance(value, np.ndarray)}
            for block in read(depth)}


def test_family_record_patching_a_run_with_its_own_states_equals_it_bit_for_bit(folder: Path, clean_run: Path,
                                                                               family: str, tmp_path: Path) -> None:
    d = Run.open(clean_run).hidden_size
    spec = _write(tmp_path / "noop.json",
                  ({"stream": "layer_out", "positions": [0, 1]}, {"kind": "patch", "run": str(clean_run)}),
                  ({"stream": "layer_out"}, {"kind": "add", "scale": 0.0, "direction": [1.0] * d}))
    patched = Run.open(_record(folder, tmp_path / "patched", "--intervention", str(spec)))
    clean = Run.open(clean_run)
    assert patched.manifest["intervention"]["interventions"][0]["operation"]["kind"] == "patch"
    assert all(row["sites"] > 0 for row in run_site_counts(patched.manifest))
    for depth in (1, 2):
        for table in ("hidden", "logits"):
            left, right = _blocks(clean, depth, table), _blocks(patched, depth, table)
            assert left.keys() == right.keys() and len(left) == 2
            for question in left:
                assert left[question].keys() == right[question].keys()
                for name, values in left[question].items():
                    np.testing.assert_array_equal(right[question][name], values, err_msg=f"{table}.{name}")
    columns = ["question_id", "depth", "token_ids", "text"]
    assert patched.generations()[columns].astype(str).equals(clean.generations()[columns].astype(str))


def test_family_record_zero_and_mean_put_exactly_the_intended_state(folder: Path, clean_run: Path, family: str,
                                                                    tmp_path: Path) -> None:
    layer = LOOPED[family]
    spec = _write(tmp_path / "mean.json",
                  ({"stream": "layer_out", "positions": [0, 1], "iterations": [2], "layers": [layer]},
                   {"kind": "mean", "run": str(clean_run)}),
                  ({"stream": "layer_out", "positions": [1], "iterations": [1], "layers": [0]}, {"kind": "zero"}))
    changed = _blocks(Run.open(_record(folder, tmp_path / "mean", "--intervention", str(spec))), 2, "hidden")
    clean = _blocks(Run.open(clean_run), 2, "hidden")
    questions = sorted(clean)
    for position in (0, 1):
        # the mean the operation computes: summed in float64 over the questions, rounded once to the model's dtype
        total = np.zeros(clean[questions[0]]["values"].shape[-1])
        for question in questions:
            total = total + clean[question]["values"][position, 1, layer].astype(np.float64)
        expected = (total / len(questions)).astype(np.float32)
        for question in questions:
            np.testing.assert_array_equal(changed[question]["values"][position, 1, layer], expected)
    # the visits that run before the mean's site at position 0, in the family's order (Inkling-2 Loop's layers after
    # the loop hold iteration 1 but run after every pass)
    config = AutoConfig.from_pretrained(folder)
    visits = loop_for_model_type(config.model_type).visits(config, 2)
    earlier = visits[:visits.index((2, layer))]
    assert earlier
    for question in questions:
        values, before = changed[question]["values"], clean[question]["values"]
        assert not values[1, 0, 0].any()  # zeroed
        for iteration, visited in earlier:
            np.testing.assert_array_equal(values[0, iteration - 1, visited], before[0, iteration - 1, visited])
        assert not np.array_equal(values[0, 1, layer], before[0, 1, layer])  # the mean is not the question's own


def test_hrm_record_freezing_z_h_at_the_last_cycle_records_the_depth_1_run(folder: Path, clean_run: Path,
                                                                           family: str, tmp_path: Path) -> None:
    if family != "hrm_text":
        pytest.skip("the depth-D-1 consequence of a freeze at the last iteration is HRM-Text's")
    from sst_interp import study

    state = LOOPED["hrm_text"] + 2  # the last H block (5 of 6)
    spec = _write(tmp_path / "freeze.json", ({"stream": "layer_out", "layers": [state], "iterations": [2]},
                                             {"kind": "freeze"}))
    frozen_path = _record(folder, tmp_path / "frozen", "--intervention", str(spec), "--allow-empty-sites")
    frozen, clean = Run.open(frozen_path), Run.open(clean_run)
    assert frozen.manifest["loop"]["state_layer"] == state
    gens, ref = frozen.generations().set_index(["question_id", "depth"]), clean.generations().set_index(
        ["question_id", "depth"])
    lens, ref_lens = _blocks(frozen, 2, "logits"), _blocks(clean, 1, "logits")
    for question in lens:
        assert list(gens.loc[(question, 2), "token_ids"]) == list(ref.loc[(question, 1), "token_ids"])
        # the lens reads z_H, kept at cycle 2 as cycle 1 left it: iteration 2 reads what depth 1's iteration 1 read
        np.testing.assert_array_equal(lens[question]["top_logprobs"][:, 1], lens[question]["top_logprobs"][:, 0])
        np.testing.assert_array_equal(lens[question]["top_logprobs"][:, 1], ref_lens[question]["top_logprobs"][:, 0])
    sites = run_site_counts(frozen.manifest)  # depth 1 has no cycle 2: the rule changes sites at depth 2 only
    assert sites[0]["sites"] == sum(len(gens.loc[(q, 2), "token_ids"]) for q in lens)
    effect = study.open(frozen_path).intervention_effect(clean_run).set_index("depth")
    assert effect.loc[1, "broken"] == effect.loc[1, "fixed"] == 0


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("family, site, operation, phrase", [
    ("inkling2_loop", {"stream": "layer_out", "layers": [0], "iterations": [2]}, {"kind": "zero"},
     "inkling2_loop never loops layer 0 (layers.0): it runs at iteration 1 only, not [2]"),
    ("inkling2_loop", {"stream": "layer_out", "iterations": [1]}, {"kind": "freeze"},
     "inkling2_loop has no carried state to keep at iteration [1]"),
    ("hrm_text", {"stream": "layer_out", "layers": [0]}, {"kind": "freeze"},
     "layers [0] hand no carried state on in hrm_text; a freeze takes layers [1, 3, 5]"),
    ("hrm_text", {"stream": "state_in"}, {"kind": "zero"}, "hrm_text intervenes on 'layer_out'"),
])
def test_family_intervention_the_family_cannot_take_is_one_error_line(tmp_path: Path, capsys, family: str,
                                                                      site: dict, operation: dict,
                                                                      phrase: str) -> None:
    folder = save_tiny_model(tmp_path / "model", family)
    spec = _write(tmp_path / "bad.json", (site, operation))
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(folder), "--depths", "1,2",
                                                    "--intervention", str(spec), "--out", str(out)], phrase)
    assert not out.exists()

"""Attention-pattern interventions (issue 55, item 5): the post-softmax weights of chosen heads replaced inside the
attention computation, on the SST (tiny Gemma 3, eager and sdpa), HRM-Text, Dory and Inkling-2 Loop.

Exactness, each on tiny models of transformers' own classes (float64; Inkling-2 Loop float32, its router's dtype):

- patching every head of every site from its own row (``source`` = the row itself) is the clean run bit for bit;
- ``set`` to the pattern a head already had (read by the attention recorder) is the clean run bit for bit;
- at the site, the head's output of the attention function is ``pattern' @ V`` computed here by hand from the
  function's own V (``uniform`` over the keys the function's own mask allows), while the other heads, the earlier
  query columns and every attention call before the site are unchanged bit for bit;
- a live patch gives the head the source row's pattern over its own row's values.

A spy (:class:`~sst_interp.hooks.attention_weights.KernelSwap` again, installed outside the intervention's wrapper)
keeps what the attention function returned to the module at every call of one attention module.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack, contextmanager, nullcontext

import numpy as np
import pytest
import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from sst_interp.hooks import AttentionConfig, RecordConfig, Recorder, VisitRecorder, layer_output
from sst_interp.hooks.attention_weights import KernelSwap, implementation
from sst_interp.interventions import InterventionSpec, Operation, Site, intervene
from sst_interp.interventions.compiled import spec_refusal
from sst_interp.interventions.loops import intervene_loop
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.owned import OwnedHooks
from sst_interp.model import GenerationConfig, SSTConfig, SSTModel, generate
from sst_interp.model.loop_model import LoopModel, generate_looped
from sst_interp.model.observers import ObserverGroup
from sst_interp.model.testing import tiny_dory, tiny_gemma3, tiny_hrm_text, tiny_inkling2_loop
from tests.unit.observers import KeptLogits

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[2, 17, 40, 9, 33, 5], [2, 21, 44, 13, 37, 8]]  # one length: float64 attention turns padding into NaN
NEW_TOKENS = 3
CONFIG = GenerationConfig(max_new_tokens=NEW_TOKENS, logits_every_iteration=True)
#: family -> (depth, the site's layer and iteration at position 0, which call of that layer's attention module the
#: site is: SST two-pass runs the prompt's pass 1 first, HRM-Text's L block 0 serves layers 0 and 2 of a cycle)
FAMILIES = {
    "sst": (3, 1, 2, 2),
    "sst-sdpa": (3, 1, 2, 2),
    "hrm_text": (2, 2, 1, 1),
    "dory": (3, 3, 2, 1),
    "inkling2_loop": (3, 2, 2, 1),
}
HEAD = 1


def build(family: str):
    if family.startswith("sst"):
        backbone = tiny_gemma3(dtype=torch.float64, seed=1)
        if family == "sst-sdpa":
            backbone.set_attn_implementation("sdpa")
        return SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden"))
    builders = {"hrm_text": tiny_hrm_text, "dory": tiny_dory, "inkling2_loop": tiny_inkling2_loop}
    return LoopModel(builders[family]() if family == "inkling2_loop" else builders[family](dtype=torch.float64))


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    return request.param, build(request.param)


def is_sst(model) -> bool:
    return isinstance(model, SSTModel)


def layer_modules(model) -> list[torch.nn.Module]:
    """The modules whose outputs are the model's layer outputs (an SST's layers; a family's visited modules)."""
    if is_sst(model):
        return list(model.layers)
    return list({id(m): m for m, _ in model.loop.visit_sites(model.backbone)}.values())


def site_module(model, family: str) -> torch.nn.Module:
    """The attention module of the family's site layer (FAMILIES)."""
    layer = FAMILIES[family][1]
    if is_sst(model):
        return model.layers[layer].self_attn
    if family == "hrm_text":  # layer 2 = L visit 1, block 0 (two blocks per stack)
        return model.backbone.model.L_module.layers[0].self_attn
    return model.backbone.model.layers[layer].self_attn


@contextmanager
def spying(module: torch.nn.Module, name: str):
    """[(value, output, weights)] of every call of ``module``'s attention function, as the module received them."""
    calls = []

    def wrap(original):
        def kernel(mod, query, key, value, attention_mask, **kwargs):
            output, weights = original(mod, query, key, value, attention_mask, **kwargs)
            if mod is module:
                mask = attention_mask.detach().clone() if isinstance(attention_mask, torch.Tensor) else None
                calls.append((value.detach().clone(), output.detach().clone(),
                              None if weights is None else weights.detach().clone(), mask))
            return output, weights
        return kernel

    with KernelSwap([module], name, wrap):
        yield calls


def run(model, spec=None, prompts=PROMPTS[:1], spy: torch.nn.Module | None = None, recorder=None):
    """(tokens, logits [passes x B x V], every layer output's last column [calls x B x d], spied calls, site report)
    of one generation at the family's depth, ``spec`` applied."""
    depth = 3 if is_sst(model) else {"hrm_text": 2}.get(model.loop.family, 3)
    kept, outputs = KeptLogits(), []
    with OwnedHooks() as hooks:
        for module in layer_modules(model):
            hooks.forward(module, lambda m, a, out: outputs.append(layer_output(out)[:, -1].detach().clone()))
        if spec is None:
            changing = nullcontext(None)
        else:
            changing = intervene(model, spec) if is_sst(model) else intervene_loop(model, spec)
        with changing as intervener:
            watching = spying(spy, implementation(model.backbone.config)) if spy is not None else nullcontext([])
            with watching as calls:
                observers = [o for o in (intervener, recorder, kept) if o is not None]
                go = generate if is_sst(model) else generate_looped
                result = go(model, prompts, depth, CONFIG, observer=ObserverGroup(*observers))
        report = intervener.site_report() if intervener is not None else None
    return result.token_ids, torch.stack(kept.batches), torch.stack(outputs), calls, report


def assert_identical(a, b) -> None:
    assert a[0] == b[0]
    assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])


def own_pattern(model, family: str, head: int = HEAD) -> tuple[list[int], list[float]]:
    """(key positions, weights) of ``head`` at the family's site (position 0), as the attention recorder reads it."""
    _, layer, iteration, _ = FAMILIES[family]
    config = RecordConfig(full_positions=1, sketch_positions=0, top_k=2, attention=AttentionConfig(heads=(head,)))
    maker = Recorder if is_sst(model) else VisitRecorder
    with maker.for_model(model, ["q"], config) as recorder:
        run(model, recorder=recorder)
    table = recorder.columns()["attention"]
    row = [n for n in range(len(table["head"])) if (table["iteration"][n], table["layer"][n]) == (iteration, layer)]
    assert len(row) == 1
    lo, hi = table["offsets"][row[0]], table["offsets"][row[0] + 1]
    return [int(k) for k in table["key_positions"][lo:hi]], [float(w) for w in table["weights"][lo:hi]]


def site(family: str, **extra) -> Site:
    _, layer, iteration, _ = FAMILIES[family]
    return Site("attention", layers=layer, iterations=iteration, positions=0, **extra)


# ------------------------------------------------------------------------------------------------ exactness
def test_patching_every_head_from_its_own_row_is_the_clean_run_bit_for_bit(family):
    name, model = family
    clean = run(model)
    patched = run(model, InterventionSpec.of(Site("attention"), Operation("patch", source=0)))
    if name == "sst-sdpa":  # sdpa's output is not eager's product: the same to rounding (measured: 0 here)
        assert patched[0] == clean[0]
        torch.testing.assert_close(patched[1], clean[1], rtol=0, atol=1e-12)
        torch.testing.assert_close(patched[2], clean[2], rtol=0, atol=1e-12)
    else:
        assert_identical(patched, clean)
    # every (position, iteration, layer) with attention was a site
    visits = NEW_TOKENS * (3 * model.num_layers if is_sst(model) else
                           len(model.loop.visits(model.config, {"hrm_text": 2}.get(name, 3))))
    assert patched[4][0]["sites"] == visits


def test_setting_a_head_to_the_pattern_it_had_is_the_clean_run_bit_for_bit(family):
    name, model = family
    keys, weights = own_pattern(model, name)
    assert len(keys) > 1
    clean = run(model)
    same = run(model, InterventionSpec.of(site(name, heads=HEAD), Operation("set", attend_to=keys, weights=weights)))
    if name == "sst-sdpa":  # the recorder reads sdpa's weights with eager's float32 softmax: the same to 1e-7
        assert same[0] == clean[0]
        torch.testing.assert_close(same[1], clean[1], rtol=0, atol=1e-6)
    else:
        assert_identical(same, clean)
    assert same[4][0]["sites"] == 1
    # another pattern at the same site does change the run: the comparison above can fail
    moved = run(model, InterventionSpec.of(site(name, heads=HEAD), Operation("uniform")))
    assert not torch.equal(moved[1], clean[1])


@pytest.mark.parametrize("pattern", [{"attend_to": [4]}, {"attend_to": [5, 3], "weights": [0.25, 0.75]},
                                     {"kind": "uniform"}])
def test_a_replaced_head_outputs_its_pattern_times_the_values_by_hand(family, pattern):
    name, model = family
    *_, call = FAMILIES[name]
    operation = Operation(**({"kind": "set"} | pattern))
    spy = site_module(model, name)
    clean = run(model, spy=spy)[3]
    calls = run(model, InterventionSpec.of(site(name, heads=HEAD), operation), spy=spy)[3]
    for before in range(call):  # nothing before the site changed
        assert torch.equal(calls[before][1], clean[before][1])
    value, output, _, mask = calls[call]
    reference = clean[call][1]
    heads = output.shape[2]
    v = value[0, HEAD // (heads // value.shape[1])]  # [K, hd]: the head's values (grouped-query heads share them)
    if operation.kind == "uniform":  # every key the function's own mask lets the query see
        row = mask[0, 0, -1] if mask is not None else torch.ones(v.shape[0], dtype=torch.bool)
        seen = row if row.dtype == torch.bool else row == 0
        expected = v[seen].sum(0) / int(seen.sum())
    else:
        # a sliding-window layer's cache holds the last columns of the context: key k is column k - offset
        offset = len(PROMPTS[0]) - v.shape[0]
        weights = operation.weights or (1.0,)
        expected = sum(w * v[k - offset] for k, w in zip(operation.attend_to, weights))
    got = output[0, -1, HEAD]
    if operation.attend_to == (4,) and name != "sst-sdpa":
        assert torch.equal(got, expected)  # one key at weight 1: exactly its value
    tolerance = 1e-6 if value.dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got, expected.to(got.dtype), rtol=0, atol=tolerance)
    assert not torch.allclose(reference[0, -1, HEAD], got)  # the head did change
    others = [h for h in range(heads) if h != HEAD]
    if name == "sst-sdpa":  # the other heads and columns are sdpa's own output
        assert torch.equal(output[:, :, others], reference[:, :, others])
        assert torch.equal(output[:, :-1], reference[:, :-1])
    else:
        assert torch.equal(output[:, :, others], reference[:, :, others])
        assert torch.equal(output[:, :-1], reference[:, :-1])


@pytest.mark.parametrize("name", ["sst", "hrm_text"])
def test_a_live_patch_gives_the_head_the_source_rows_pattern_over_its_own_values(name):
    model = build(name)
    *_, call = FAMILIES[name]
    spy = site_module(model, name)
    clean = run(model, prompts=PROMPTS, spy=spy)[3]
    _, _, _, calls, report = run(model, InterventionSpec.of(site(name, heads=HEAD), Operation("patch", source=1)),
                                 prompts=PROMPTS, spy=spy)
    value, output, weights, _ = calls[call]
    source_pattern = clean[call][2][1, HEAD, -1]  # row 1's clean pattern [K]
    assert not torch.equal(source_pattern, clean[call][2][0, HEAD, -1])
    own_values = value[0, HEAD // (output.shape[2] // value.shape[1])]  # row 0's values of the head [K, hd]
    torch.testing.assert_close(output[0, -1, HEAD], source_pattern @ own_values, rtol=0, atol=1e-12)
    assert torch.equal(weights[0, HEAD, -1], source_pattern)  # the module returns the pattern it used
    assert torch.equal(output[1], clean[call][1][1])  # the source row itself is left alone
    assert report[0]["sites"] == 2  # both rows are changed (row 1 from itself)


@pytest.mark.parametrize("name, recorder_first", [("hrm_text", False), ("sst", True), ("sst-sdpa", True),
                                                   ("sst-sdpa", False)])
def test_a_recorder_alongside_records_the_pattern_the_layer_used(name, recorder_first):
    # under sdpa the recorder wraps the kernel too: either wrapper may be the outer one
    model = build(name)
    config = RecordConfig(full_positions=2, sketch_positions=0, top_k=2, attention=AttentionConfig(heads=(HEAD,)))
    # position 0: the SST's two-pass prompt pass 2 has a query per prompt column, only the last one replaced
    spec = InterventionSpec.of(Site("attention", layers=2, iterations=1, positions=0, heads=HEAD),
                               Operation("set", attend_to=[3, 5], weights=[0.5, 0.5]))
    recording = (Recorder if is_sst(model) else VisitRecorder).for_model(model, ["q"], config)
    changing = intervene(model, spec) if is_sst(model) else intervene_loop(model, spec)
    go = generate if is_sst(model) else generate_looped
    with ExitStack() as stack:
        if recorder_first:
            recorder, intervener = stack.enter_context(recording), stack.enter_context(changing)
        else:
            intervener = stack.enter_context(changing)
            recorder = stack.enter_context(recording)
        result = go(model, PROMPTS[:1], 2, CONFIG, observer=ObserverGroup(intervener, recorder))
    with (intervene(model, spec) if is_sst(model) else intervene_loop(model, spec)) as alone:
        assert go(model, PROMPTS[:1], 2, CONFIG, observer=alone).token_ids == result.token_ids  # recording changes
        # nothing
    table = recorder.columns()["attention"]
    for n in range(len(table["head"])):
        lo, hi = table["offsets"][n], table["offsets"][n + 1]
        pattern = dict(zip(table["key_positions"][lo:hi].tolist(), table["weights"][lo:hi].tolist()))
        if (table["position"][n], table["iteration"][n], table["layer"][n]) == (0, 1, 2):
            assert pattern == {k: (0.5 if k in (3, 5) else 0.0) for k in range(len(PROMPTS[0]))}
        else:
            assert sorted(w for w in pattern.values() if w > 0) != [0.5, 0.5]


# ------------------------------------------------------------------------------------------------ owned
@pytest.mark.parametrize("name", ["sst", "sst-sdpa", "dory"])
def test_the_wrapper_and_hooks_are_gone_after_an_exception(name):
    model = build(name)
    namespace = sys.modules[type(site_module(model, name)).__module__]
    eager = namespace.eager_attention_forward
    hooks = [len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.backbone.modules()]
    spec = InterventionSpec.of(Site("attention"), Operation("uniform"))
    changing = intervene(model, spec) if is_sst(model) else intervene_loop(model, spec)
    with pytest.raises(RuntimeError, match="inside"):
        with changing:
            if name == "sst-sdpa":
                assert "sdpa" in ALL_ATTENTION_FUNCTIONS._local_mapping
            else:
                assert namespace.eager_attention_forward is not eager
            raise RuntimeError("inside")
    assert namespace.eager_attention_forward is eager
    assert "sdpa" not in ALL_ATTENTION_FUNCTIONS._local_mapping
    assert [len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.backbone.modules()] == hooks


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("data, pattern", [
    ({"site": {"stream": "layer_out", "heads": [0]}, "operation": {"kind": "zero"}}, "heads belong to the 'attention'"),
    ({"site": {"stream": "attention"}, "operation": {"kind": "uniform", "attend_to": 3}}, "belong to the 'set'"),
    ({"site": {"stream": "attention"}, "operation": {"kind": "set"}}, "needs attend_to"),
    ({"site": {"stream": "attention"}, "operation": {"kind": "set", "attend_to": [1, 1]}}, "each once"),
    ({"site": {"stream": "attention"}, "operation": {"kind": "set", "attend_to": [1, 2], "weights": [1]}},
     "one finite weight >= 0 per key"),
    ({"site": {"stream": "attention"}, "operation": {"kind": "set", "attend_to": 1, "weights": -1}},
     "one finite weight >= 0 per key"),
    ({"site": {"stream": "attention"}, "operation": {"kind": "patch", "run": "runs/x"}}, "live source row"),
    ({"site": {"stream": "layer_out"}, "operation": {"kind": "uniform"}}, r"applies to the stream\(s\) attention"),
])
def test_bad_attention_specs_are_one_line_errors(data, pattern):
    with pytest.raises(UsageError, match=pattern):
        InterventionSpec.from_dict({"interventions": [data]})


def test_the_spec_round_trips_and_old_specs_serialise_as_before():
    spec = InterventionSpec.of(Site("attention", layers=[0], heads=[1, 0], positions=0, iterations=1),
                               Operation("set", attend_to=[7, 3], weights=[0.75, 0.25]))
    assert InterventionSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["interventions"][0] == {
        "site": {"stream": "attention", "layers": [0], "heads": [0, 1], "positions": [0], "iterations": [1]},
        "operation": {"kind": "set", "scale": 1.0, "attend_to": [7, 3], "weights": [0.75, 0.25]}}
    plain = InterventionSpec.of(Site("layer_out", layers=1), Operation("zero")).to_dict()
    assert plain["interventions"][0] == {"site": {"stream": "layer_out", "layers": [1]},
                                         "operation": {"kind": "zero", "scale": 1.0}}
    assert "compile off" in spec_refusal(spec)


@pytest.mark.parametrize("name", ["sst", "inkling2_loop"])
def test_a_head_or_key_the_model_lacks_is_refused(name):
    model = build(name)
    changing = intervene if is_sst(model) else intervene_loop
    with pytest.raises(UsageError, match="head 2 does not exist"):
        with changing(model, InterventionSpec.of(Site("attention", heads=2), Operation("uniform"))):
            pass
    # a key beyond the query's context at the site: refused when the call runs, before it computes anything
    beyond = InterventionSpec.of(Site("attention", positions=0, iterations=1), Operation("set", attend_to=6))
    with pytest.raises(UsageError, match="key position 6 is outside what row 0's query attends to"):
        run(model, beyond)
    if is_sst(model):  # a key of the context that a sliding-window layer's query does not see
        hidden = InterventionSpec.of(Site("attention", layers=0, positions=0, iterations=1),
                                     Operation("set", attend_to=0))
        with pytest.raises(UsageError, match=r"key position 0 is outside .* layer 0\) \(keys 2-5\)"):
            run(model, hidden)


def test_a_clean_twin_alongside_patches_each_head_with_its_own_pattern_bit_for_bit():
    model = build("sst")
    spec = InterventionSpec.of(Site("attention", heads=[0, 1]), Operation("patch", source="clean"))
    with model.intervene(InterventionSpec(), capture=["layer_out", "logits"]) as iv:
        clean = iv.generate(PROMPTS, 3, CONFIG)
        expected = {name: iv.captured(name) for name in ("layer_out", "logits")}
    with model.intervene(spec, capture=["layer_out", "logits"]) as iv:
        patched = iv.generate(PROMPTS, 3, CONFIG)
        assert patched.token_ids == clean.token_ids
        assert torch.equal(iv.captured("layer_out"), expected["layer_out"])
        # the LM head runs on twice the rows: the same to rounding
        torch.testing.assert_close(iv.captured("logits"), expected["logits"], rtol=0, atol=1e-12, equal_nan=True)
    assert iv.site_report()[0]["sites"] == len(PROMPTS) * NEW_TOKENS * 3 * model.num_layers  # twins never count


def test_a_live_patch_between_rows_of_other_lengths_is_refused():
    model = build("hrm_text")
    spec = InterventionSpec.of(Site("attention", positions=0, iterations=1), Operation("patch", source=1))
    with pytest.raises(UsageError, match="attend to other key positions"):
        run(model, spec, prompts=[PROMPTS[0], PROMPTS[1][:-1]])
    with pytest.raises(UsageError, match="source row 2 is out of range"):
        run(model, InterventionSpec.of(Site("attention"), Operation("patch", source=2)), prompts=PROMPTS)


def test_the_key_positions_are_the_rows_own_context_under_left_padding():
    # float32 (padding rows are NaN-free there): the shorter row's key 0 is its own first token, not the padding
    backbone = tiny_gemma3(dtype=torch.float32, seed=1)
    model = SSTModel.from_backbone(backbone, SSTConfig(state_scale="hidden"))
    prompts = [PROMPTS[0], PROMPTS[1][:4]]
    spy = model.layers[2].self_attn
    spec = InterventionSpec.of(Site("attention", layers=2, positions=0, iterations=1, heads=0),
                               Operation("set", attend_to=0))
    *_, calls, _ = run(model, spec, prompts=prompts, spy=spy)
    value, output, weights, _ = calls[1]  # pass 2 of the prompt: position 0, iteration 1
    assert torch.equal(output[0, -1, 0], value[0, 0, 0]) and torch.equal(output[1, -1, 0], value[1, 0, 2])
    assert np.isclose(float(weights[1, 0, -1].sum()), 1.0) and float(weights[1, 0, -1, 2]) == 1.0

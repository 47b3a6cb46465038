"""Live patch sources, per-row specs and ``with sst.intervene(...) as iv`` (issue 30 item 4): exact identities on the
tiny model (a row patched from itself is the clean run; a live cross-row patch equals the recorded-run patch of the
same values; a clean pass alongside at scale 0 or 1 is the clean run; a batch of per-row specs is its rows
generated one by one; the captured tensors are what the Recorder records), and bad input as one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sst_interp.interventions import InterventionSpec, Operation, Site, intervene
from sst_interp.kernels.errors import UsageError
from sst_interp.model import GenerationConfig
from sst_interp.model.observers import ObserverGroup
from sst_interp.store import Run
from tests.unit.interventions.test_interventions import (CONFIG, DEPTH, IDS, PROMPTS, hidden_by_site, recorded,
                                                          sst_model, write_run)

pytestmark = pytest.mark.usefixtures("one_thread")

STREAMS = ("layer_out", "blended", "state_in", "logits")
SITE = Site("layer_out", positions=[0, 1], iterations=[2], layers=[1])


def run_live(sst, specs, prompts=PROMPTS, depth=DEPTH, config=CONFIG, streams=STREAMS):
    """(tokens, {stream: captured tensor}, the context) of one generation under ``sst.intervene``."""
    with sst.intervene(specs, capture=streams) as iv:
        result = iv.generate(prompts, depth, config)
    return result.token_ids, {name: iv.captured(name) for name in streams}, iv


def assert_same(a: dict, b: dict, logits_atol: float = 0.0) -> None:
    """Every stream equal bit for bit (NaN where nothing ran in both), the logits within ``logits_atol``."""
    for name in a:
        if name == "logits" and logits_atol:
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=logits_atol, equal_nan=True)
        else:
            assert torch.equal(a[name].nan_to_num(7.0), b[name].nan_to_num(7.0)), name


def test_patching_each_row_from_itself_is_the_clean_run_bit_for_bit():
    sst = sst_model()
    clean_tokens, clean, _ = run_live(sst, InterventionSpec())
    rows, positions, layers = len(PROMPTS), CONFIG.max_new_tokens, sst.num_layers
    for name in ("layer_out", "blended", "state_in"):  # the documented shapes
        assert clean[name].shape == (rows, positions, DEPTH, layers, sst.hidden_size), name
    assert clean["logits"].shape[:3] == (rows, positions, DEPTH)
    every = Site("layer_out")
    specs = [InterventionSpec.of(every, Operation("patch", source=row)) for row in range(len(PROMPTS))]
    tokens, patched, iv = run_live(sst, specs)
    assert tokens == clean_tokens
    assert_same(patched, clean)
    # every (position, iteration, layer) of each row was a site: 6 positions x 3 iterations x 2 layers
    assert [row["sites"] for row in iv.site_report()] == [6 * DEPTH * sst.num_layers] * 2
    assert sst.context.intervention is None  # the context removed what it installed


def test_a_live_cross_row_patch_equals_the_recorded_run_patch_of_the_same_values(tmp_path):
    # float32: the Recorder stores float32, so a float32 model's recorded states are its live values exactly
    sst = sst_model(torch.float32)
    clean_tokens, clean = recorded(sst)
    write_run(tmp_path / "ref", sst, clean)
    from_run = InterventionSpec.of(SITE, Operation("patch", run=str(tmp_path / "ref")))
    run_tokens, run_columns = recorded(sst, interventions=from_run, question_ids=[IDS[1], None])  # row 0 reads q1
    live = [InterventionSpec.of(SITE, Operation("patch", source=1)), InterventionSpec()]
    live_tokens, live_columns = recorded(sst, interventions=live)
    assert live_tokens == run_tokens
    assert torch.equal(live_columns["hidden"]["values"], run_columns["hidden"]["values"])
    assert torch.equal(live_columns["logits"]["top_logprobs"], run_columns["logits"]["top_logprobs"])
    got, before = hidden_by_site(live_columns), hidden_by_site(clean)
    np.testing.assert_array_equal(got[(IDS[0], 1, 2, 1)], before[(IDS[1], 1, 2, 1)])  # q1's state in row 0
    # and it changed what followed: the next iteration reads the patched state
    assert not np.allclose(got[(IDS[0], 1, 3, 1)], before[(IDS[0], 1, 3, 1)])


def test_a_per_row_recorded_patch_reads_the_run_for_its_own_row_only(tmp_path):
    sst = sst_model(torch.float32)
    _, clean = recorded(sst)
    write_run(tmp_path / "ref", sst, clean)
    patch = InterventionSpec.of(SITE, Operation("patch", run=str(tmp_path / "ref")))
    # row 1's question is not in the run: its spec is empty, so the run is never asked for it
    tokens, columns = recorded(sst, interventions=[patch, InterventionSpec()], question_ids=[IDS[1], "not-recorded"])
    whole_tokens, whole = recorded(sst, interventions=patch, question_ids=[IDS[1], None])
    assert tokens == whole_tokens
    assert torch.equal(columns["hidden"]["values"], whole["hidden"]["values"])
    assert not torch.equal(columns["hidden"]["values"], clean["hidden"]["values"])


@pytest.mark.parametrize("scale", [0.0, 1.0])
def test_a_clean_pass_alongside_at_scale_0_or_1_everywhere_is_the_clean_run(scale):
    sst = sst_model()
    clean_tokens, clean, _ = run_live(sst, InterventionSpec())
    spec = InterventionSpec.of(Site("layer_out"), Operation("patch", source="clean", scale=scale))
    tokens, patched, iv = run_live(sst, spec)
    assert tokens == clean_tokens and iv.clean_result.token_ids == clean_tokens
    # the doubled batch's LM head is a matmul over twice the rows, which may round the logits differently
    assert_same(patched, clean, logits_atol=1e-12)
    assert_same({name: iv.captured(name, clean=True) for name in STREAMS}, clean, logits_atol=1e-12)
    assert iv.site_report()[0]["sites"] == len(PROMPTS) * 6 * DEPTH * sst.num_layers  # the twins are never sites


def test_a_clean_pass_alongside_patches_the_clean_value_into_a_changed_row():
    sst = sst_model()
    _, clean, _ = run_live(sst, InterventionSpec())
    zero = (Site("layer_out", positions=[1], iterations=[1], layers=[0]), Operation("zero"))
    restore = (Site("layer_out", positions=[1], iterations=[1], layers=[1]), Operation("patch", source="clean"))
    from sst_interp.interventions import Intervention

    spec = InterventionSpec(tuple(Intervention(*rule) for rule in (zero, restore)))
    _, patched, _ = run_live(sst, spec)
    out = patched["layer_out"]
    assert not out[:, 1, 0, 0].any()  # zeroed
    assert torch.equal(out[:, 1, 0, 1], clean["layer_out"][:, 1, 0, 1])  # the clean twin's value, not the zeroed run's
    assert torch.equal(out[:, :1], clean["layer_out"][:, :1])  # nothing before the site changed


def test_per_row_specs_equal_their_rows_generated_one_by_one():
    sst = sst_model()
    config = GenerationConfig(max_new_tokens=4, logits_every_iteration=True)
    rules = [
        InterventionSpec.of(Site("layer_out", positions=[1], iterations=[2], layers=[0]), Operation("zero")),
        InterventionSpec.of(Site("blended", positions=[0, 2], layers=[1]),
                            Operation("add", scale=3.0, direction=tuple([0.5] * 32))),
        InterventionSpec.of(Site("alpha", iterations=[2, 3]), Operation("set_alpha", value=0.0)),
        InterventionSpec.of(Site("layer_out", iterations=[9]), Operation("zero")),  # beyond the depth: no site
    ]
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0], PROMPTS[1]]
    tokens, batched, iv = run_live(sst, rules, prompts=prompts, config=config)
    report = iv.site_report()
    clean_tokens, _, _ = run_live(sst, InterventionSpec(), prompts=prompts, config=config)
    assert tokens != clean_tokens  # the specs change the generations
    for row, (prompt, rule) in enumerate(zip(prompts, rules)):
        alone_tokens, alone, alone_iv = run_live(sst, rule, prompts=[prompt], config=config)
        assert tokens[row] == alone_tokens[0]
        torch.testing.assert_close(batched["logits"][row], alone["logits"][0], rtol=0, atol=1e-12, equal_nan=True)
        torch.testing.assert_close(batched["layer_out"][row], alone["layer_out"][0], rtol=0, atol=1e-12,
                                   equal_nan=True)
        assert report[row] == {**alone_iv.site_report()[0], "row": row}
    assert [row["sites"] for row in report][3] == 0 and all(row["sites"] > 0 for row in report[:3])


def test_per_row_specs_with_clean_twins_patch_each_row_from_its_own_twin():
    sst = sst_model()
    zero = InterventionSpec.of(Site("layer_out", positions=[1], iterations=[1], layers=[0]), Operation("zero"))
    from sst_interp.interventions import Intervention

    restore = Intervention(Site("layer_out", positions=[1], iterations=[1], layers=[1]),
                           Operation("patch", source="clean"))
    zero_then_restore = InterventionSpec((*zero.interventions, restore))
    tokens, both, iv = run_live(sst, [zero_then_restore, InterventionSpec.of(restore.site, restore.operation)])
    _, clean, _ = run_live(sst, InterventionSpec())
    alone_tokens, alone, _ = run_live(sst, zero_then_restore, prompts=PROMPTS[:1])
    assert tokens[0] == alone_tokens[0]
    torch.testing.assert_close(both["layer_out"][0], alone["layer_out"][0], rtol=0, atol=1e-12, equal_nan=True)
    torch.testing.assert_close(both["layer_out"][1], clean["layer_out"][1], rtol=0, atol=1e-12, equal_nan=True)
    assert not both["layer_out"][0, 1, 0, 0].any()  # row 0 was zeroed, then layer 1 restored from its twin
    assert [row["sites"] for row in iv.site_report()] == [1, 1, 1]


def test_the_captured_streams_are_what_the_recorder_records(tmp_path):
    from sst_interp.hooks import RecordConfig, Recorder

    sst = sst_model()
    capture = RecordConfig(full_positions=6, sketch_positions=0, top_k=4, dtype="float32")
    spec = InterventionSpec.of(Site("layer_out", positions=[2], iterations=[1], layers=[0]), Operation("zero"))
    from sst_interp.model import generate

    with Recorder.for_model(sst, IDS, capture) as recorder, \
            intervene(sst, spec, capture=("layer_out", "state_in")) as intervener:
        generate(sst, PROMPTS, DEPTH, CONFIG, observer=ObserverGroup(intervener, recorder))
    values = intervener.captured("layer_out")
    assert values.shape == (len(PROMPTS), 6, DEPTH, sst.num_layers, sst.hidden_size) and values.dtype == torch.float64
    assert not values[:, 2, 0, 0].any()
    write_run(tmp_path / "run", sst, recorder.columns())
    blocks = {block.question_id: block for block in Run.open(str(tmp_path / "run")).hidden(DEPTH)}
    for row, question in enumerate(IDS):
        block = blocks[question]
        assert list(block.positions) == list(range(6)) and list(block.iterations) == [1, 2, 3]
        np.testing.assert_array_equal(block.values, values[row].float().numpy())
    state_in = intervener.captured("state_in")
    assert state_in.shape == values.shape and state_in.dtype == torch.float32


def test_a_live_spec_round_trips_through_json():
    spec = InterventionSpec((*InterventionSpec.of(SITE, Operation("patch", source=3)).interventions,
                             *InterventionSpec.of(SITE, Operation("patch", source="clean", scale=0.5)).interventions))
    assert InterventionSpec.from_dict(spec.to_dict()) == spec
    assert '"source": 3' in spec.to_json() and '"source": "clean"' in spec.to_json()
    # a recorded-run spec's JSON (part of a run's identity) is unchanged: no source key
    assert "source" not in InterventionSpec.of(SITE, Operation("patch", run="ref")).to_json()


def _one_line(info) -> None:
    assert "\n" not in str(info.value)


def test_bad_live_input_is_one_line_and_leaves_the_model_clean():
    sst = sst_model()
    out_of_range = InterventionSpec.of(SITE, Operation("patch", source=2))
    with pytest.raises(UsageError, match="source row 2 is out of range for a batch of 2 rows") as info:
        with sst.intervene(out_of_range) as iv:
            iv.generate(PROMPTS, DEPTH, CONFIG)
    _one_line(info)
    assert sst.context.intervention is None
    with pytest.raises(UsageError, match="3 per-row specs for a batch of 2 rows") as info:
        with sst.intervene([InterventionSpec()] * 3) as iv:
            iv.generate(PROMPTS, DEPTH, CONFIG)
    _one_line(info)
    assert sst.context.intervention is None
    with pytest.raises(UsageError, match="3 question ids for a batch of 2 rows") as info:
        with sst.intervene(InterventionSpec(), question_ids=["a", "b", "c"]) as iv:
            iv.generate(PROMPTS, DEPTH, CONFIG)
    _one_line(info)
    for kind in ("mean", "resample", "zero"):
        with pytest.raises(UsageError, match=f"belongs to 'patch'; '{kind}' cannot use it") as info:
            Operation(kind, source=1)
        _one_line(info)
    with pytest.raises(UsageError, match="drop source_iteration") as info:
        Operation("patch", source=1, source_iteration=2)
    _one_line(info)
    with pytest.raises(UsageError, match="source must be a batch row") as info:
        Operation("patch", source="other")
    with pytest.raises(UsageError, match="source 'clean' reads a clean pass run alongside"):
        with intervene(sst, InterventionSpec.of(SITE, Operation("patch", source="clean"))):
            pass
    from sst_interp.interventions import patch_runs

    with pytest.raises(UsageError, match="a recording lays its batches out itself") as info:  # record's identity
        patch_runs(out_of_range)
    _one_line(info)
    with pytest.raises(UsageError, match="per-row specs and clean passes alongside cannot hold one"):
        with sst.intervene([InterventionSpec.of(Site("layer_out"), Operation("freeze")), InterventionSpec()]) as iv:
            iv.generate(PROMPTS, DEPTH, CONFIG)
    assert sst.context.intervention is None


def test_loop_families_refuse_the_context_in_one_line():
    from sst_interp.model.loop_model import LoopModel
    from sst_interp.model.testing import tiny_hrm_text

    model = LoopModel(tiny_hrm_text(dtype=torch.float64, seed=0))
    with pytest.raises(UsageError, match="use sst_interp.interventions.loops.intervene_loop") as info:
        model.intervene(InterventionSpec())
    _one_line(info)

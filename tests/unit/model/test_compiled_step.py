"""The compiled decode step (issue 35) against eager generation, in float32 on a tiny random Gemma 3.

Every test shares one :class:`StepCompiler` (batch size 2), so the module compiles two graphs (the step and the LM
head) once; the counts of compilations are themselves tested.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.kernels.errors import UsageError
from sst_interp.model import GenerationConfig, generate, parse_position_policy
from sst_interp.model.column_cache import ColumnCache, column_masks
from sst_interp.model.compile_options import CompileOptions, compile_refusal, setup_refusal
from sst_interp.model.compiled import StepCompiler, generate_compiled
from tests.unit.model.conftest import make_sst
from tests.unit.observers import KeptLogits

pytestmark = pytest.mark.slow

PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [3, 4, 12]]  # left padding; longer than the sliding window (4)
NEW_TOKENS = 8
LOGIT_TOLERANCE = 1e-5


def unique_graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.fixture(scope="module")
def sst():
    return make_sst("gemma3", dtype=torch.float32)


@pytest.fixture(scope="module")
def compiled(sst):
    """(compiler, graphs its first generation compiled)."""
    torch._dynamo.reset()
    compiler = StepCompiler(sst, "default", capture_outputs=True)
    before = unique_graphs()
    generate_compiled(sst, PROMPTS, 2, GenerationConfig(max_new_tokens=3), compiler=compiler)
    return compiler, unique_graphs() - before


def both(sst, compiler, depth, config):
    eager_log, compiled_log = KeptLogits(), KeptLogits()
    eager = generate(sst, PROMPTS, depth, config, observer=eager_log)
    fast = generate_compiled(sst, PROMPTS, depth, config, observer=compiled_log, compiler=compiler)
    return eager, fast, eager_log, compiled_log


@pytest.mark.parametrize("prompt_mode", ["two_pass", "sequential", "none"])
@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_compiled_tokens_equal_eager_and_logits_agree(sst, compiled, prompt_mode, depth):
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, prompt_mode=prompt_mode, logits_every_iteration=True)
    eager, fast, eager_log, compiled_log = both(sst, compiled[0], depth, config)
    assert fast.token_ids == eager.token_ids
    assert fast.chosen_depth == eager.chosen_depth
    assert compiled_log.keys == eager_log.keys and len(eager_log.keys) == NEW_TOKENS * depth
    worst = max((a - b).abs().max().item() for a, b in zip(eager_log.batches, compiled_log.batches))
    assert worst <= LOGIT_TOLERANCE


def test_the_step_itself_moves_the_state_stream(sst, compiled):
    """Guard against a step that ignores the stream: with it off, the step decodes the backbone, and the tokens of
    the tiny model at depth 3 then differ from the SST's."""
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, prompt_mode="none")
    with_stream = generate_compiled(sst, PROMPTS, 3, config, compiler=compiled[0])
    plain = generate_compiled(sst, PROMPTS, 1, config, compiler=StepCompiler(sst, None, stream=False))
    assert with_stream.token_ids != plain.token_ids


def test_a_per_position_policy_runs_compiled_as_eager(sst, compiled):
    policy = parse_position_policy("state:0.05,max=4", default_max=4)  # rows halt at 2 and 3
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, prompt_mode="two_pass", logits_every_iteration=True)
    eager, fast, eager_log, compiled_log = both(sst, compiled[0], policy, config)
    assert fast.token_ids == eager.token_ids
    assert fast.iterations == eager.iterations
    assert len({count for row in eager.iterations for count in row}) > 1  # rows halted at different iterations
    worst = max((a - b).abs().max().item() for a, b in zip(eager_log.batches, compiled_log.batches))
    assert worst <= LOGIT_TOLERANCE


def test_recorded_columns_agree_with_the_hooked_recorder(sst, compiled):
    capture = RecordConfig(full_positions=3, sketch_positions=4, top_k=8)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, logits_every_iteration=True)
    with Recorder.for_model(sst, ["a", "b"], capture) as hooked:
        generate(sst, PROMPTS, 3, config, observer=hooked)
    with Recorder.for_model(sst, ["a", "b"], capture, layer_hooks=False) as fed:
        generate_compiled(sst, PROMPTS, 3, config, observer=fed, compiler=compiled[0])
    expected, got = hooked.columns(), fed.columns()
    assert set(got) == set(expected) == {"hidden", "sketch", "logits"}
    for table, columns in expected.items():
        assert set(got[table]) == set(columns)
        for name, value in columns.items():
            other = got[table][name]
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                scale = max(1.0, value.abs().max().item())
                assert (value - other).abs().max().item() <= LOGIT_TOLERANCE * scale, (table, name)
            elif isinstance(value, torch.Tensor):
                assert torch.equal(value, other), (table, name)
            else:
                assert np.array_equal(value, other), (table, name)


def test_a_hooked_recorder_is_refused_on_the_compiled_path(sst, compiled):
    with Recorder.for_model(sst, ["a", "b"], RecordConfig()) as hooked, pytest.raises(ValueError, match="layer_hooks"):
        generate_compiled(sst, PROMPTS, 1, GenerationConfig(max_new_tokens=2), observer=hooked,
                          compiler=compiled[0])


def test_compilation_happens_once_per_batch_size_not_per_depth_or_question(sst, compiled):
    compiler, first = compiled
    assert first == 2  # the step and the LM head
    before = unique_graphs()
    for depth, prompts in ((1, PROMPTS), (4, [[9, 9, 9, 9], [4, 5, 6, 7, 8, 9, 10]])):
        for mode in ("two_pass", "none"):
            generate_compiled(sst, prompts, depth, GenerationConfig(max_new_tokens=4, prompt_mode=mode),
                              compiler=compiler)
    assert unique_graphs() == before
    assert len(compiler.steps) == 1


def test_one_row_compiles_once_whether_its_ids_are_a_prompt_slice_or_a_new_token(sst):
    # At batch 1 a rerun of the prompt's last column passes a [1, 1] slice with strides (width, 1) and a new token a
    # [1, 1] tensor with strides (1, 1): both are "contiguous", and the graph's stride guard once compiled twice.
    compiler = StepCompiler(sst, "default")
    before = unique_graphs()
    for mode in ("two_pass", "none"):
        generate_compiled(sst, PROMPTS[:1], 3, GenerationConfig(max_new_tokens=3, prompt_mode=mode), compiler=compiler)
    assert unique_graphs() - before == 2  # the step and the LM head


def test_the_step_has_no_graph_breaks(sst, compiled):
    # after the count of compilations: explain() traces the step again
    step = next(iter(compiled[0].steps.values()))  # prefilled by the fixture: its cache is allocated
    step.cache.set_column(PROMPT_WIDTH := len(PROMPTS[0]))
    ids = torch.tensor([[7], [8]])
    explanation = torch._dynamo.explain(step._step)(ids, torch.tensor([[PROMPT_WIDTH], [3]]))
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1


# ------------------------------------------------------------------------------------------------ cache and masks
def test_a_rerun_overwrites_its_column_and_leaves_the_others():
    cache = ColumnCache(num_layers=1, max_columns=6, device="cpu")
    first = torch.arange(2 * 1 * 3 * 4, dtype=torch.float32).reshape(2, 1, 3, 4)
    cache.update(first, first + 100, 0)
    cache.set_column(2)
    again = torch.full((2, 1, 1, 4), -1.0)
    keys, values = cache.update(again, again, 0)
    assert torch.equal(keys[:, :, :2], first[:, :, :2]) and torch.equal(keys[:, :, 2:3], again)
    assert torch.equal(values[:, :, :2], first[:, :, :2] + 100)
    assert torch.equal(keys[:, :, 3:], torch.zeros(2, 1, 3, 4))


def test_masks_count_the_window_in_columns_and_hide_padding_and_the_future():
    real = torch.tensor([[False, True, True, True, True, False]])
    masks = column_masks(real, torch.tensor(4), 1, 6, sliding_window=2, implementation="sdpa",
                         dtype=torch.float32)
    assert masks["full_attention"][0, 0, 0].tolist() == [False, True, True, True, True, False]
    assert masks["sliding_attention"][0, 0, 0].tolist() == [False, False, False, True, True, False]
    eager = column_masks(real, 4, 1, 6, 2, "eager", torch.float32)["sliding_attention"][0, 0, 0]
    assert eager[3].item() == 0 and eager[0].item() == torch.finfo(torch.float32).min


# ------------------------------------------------------------------------------------------------ refusals
def test_refusals_name_compile_off(sst, monkeypatch):
    assert "--compile off" in setup_refusal(probe_policy=True)
    assert compile_refusal(sst, parse_position_policy("kl:0.1,max=2", 2)) is None  # a per-position policy runs
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    assert "C compiler" in setup_refusal(device="cpu")
    with pytest.raises(UsageError, match="--compile takes one of on, off, auto"):
        CompileOptions("maybe")
    sst.backbone.config._attn_implementation = "flash_attention_2"
    try:
        assert "attention implementations eager, sdpa" in compile_refusal(sst)
    finally:
        sst.backbone.config._attn_implementation = "eager"


def test_auto_compiles_on_cuda_only():
    assert CompileOptions("auto").active_for(torch.device("cuda"))
    assert not CompileOptions("auto").active_for(torch.device("cpu"))
    assert CompileOptions("on").active_for(torch.device("cpu"))
    assert CompileOptions().mode_for(torch.device("cuda")) == "reduce-overhead"


# ------------------------------------------------------------------------------------------------ record --compile
def test_record_compile_on_writes_the_same_run_as_eager(tmp_path):
    """``record --compile on`` on the CPU: same generations, the same recorded states to float32 rounding, and the
    fingerprint names the decode."""
    from sst_interp.cli.record import main as record_main
    from sst_interp.store.reader import Run
    from tests.unit.conftest import FAST, save_tiny_model

    model = save_tiny_model(tmp_path / "model")
    runs = {}
    for flag in ("off", "on"):
        out = tmp_path / f"run_{flag}"
        assert record_main([*FAST, "--model", str(model), "--depths", "1,3", "--limit", "3", "--batch-size", "2",
                            "--demo-preset", "--compile", flag, "--out", str(out)]) == 0
        runs[flag] = Run.open(out)
    eager, fast = runs["off"], runs["on"]
    assert fast.manifest["identity"]["numerics"]["decode"] == "compiled:default+frozen"
    assert eager.manifest["identity"]["numerics"]["decode"] == "eager"
    def answers(run):
        table = run.generations().sort_values(["depth", "question_id"])
        return [(row.question_id, row.depth, list(row.token_ids)) for row in table.itertuples()]

    assert answers(fast) == answers(eager) and len(answers(eager)) == 6
    for depth in (1, 3):
        blocks = list(zip(eager.hidden(depth), fast.hidden(depth), strict=True))
        assert len(blocks) == 3
        for a, b in blocks:
            assert (a.question_id, a.iterations.tolist()) == (b.question_id, b.iterations.tolist())
            assert np.allclose(a.values, b.values, rtol=1e-5, atol=1e-5)

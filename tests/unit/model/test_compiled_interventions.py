"""Interventions on the compiled decode step (issue 35 item 4) against the eager Intervener, in float32 on the tiny
random Gemma 3 of ``test_compiled_step.py``: the same tokens, logits within 1e-5, the same site counts.

Every test shares one :class:`StepCompiler` (batch size 2, the intervening variant), so the module compiles the
step and the LM head once; later specs and questions only refill the step's buffers, which is itself tested.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site, intervene
from sst_interp.interventions.compiled import spec_refusal
from sst_interp.kernels.errors import UsageError
from sst_interp.model import GenerationConfig, generate, parse_position_policy
from sst_interp.model.compiled import StepCompiler, generate_compiled
from sst_interp.model.observers import PassInfo
from sst_interp.model.layer import _blend
from sst_interp.model.observers import ObserverGroup
from sst_interp.model.stream_edits import StreamEdits
from sst_interp.store import RunWriter
from tests.unit.model.conftest import make_sst
from tests.unit.model.test_compiled_step import LOGIT_TOLERANCE, PROMPTS, unique_graphs
from tests.unit.observers import KeptLogits

pytestmark = pytest.mark.slow

IDS = ["q0", "q1"]
NEW_TOKENS = 6
REFERENCE_DEPTH = 3
PROMPT_MODES = ("two_pass", "sequential", "none")


@pytest.fixture(scope="module", autouse=True)
def one_thread_for_the_module():
    """One intra-op thread for the whole module (the tiny model runs faster so on a busy machine): a compiled graph
    is guarded on the thread count, so the function-scoped ``one_thread`` would recompile the module's step."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def sst():
    return make_sst("gemma3", dtype=torch.float32)


@pytest.fixture(scope="module")
def compiled(sst):
    """(compiler, graphs its first intervening generation compiled, the graph count after it)."""
    torch._dynamo.reset()
    compiler = StepCompiler(sst, "default")
    before = unique_graphs()
    with intervene(sst, one(Site("layer_out", layers=[0]), Operation("zero"))) as intervener:
        generate_compiled(sst, PROMPTS, 2, GenerationConfig(max_new_tokens=3), observer=intervener,
                          compiler=compiler)
    return compiler, unique_graphs() - before, unique_graphs()


@pytest.fixture(scope="module")
def reference(sst, tmp_path_factory):
    """A run directory holding the clean eager generation of PROMPTS at depth 3, every position in full (what
    ``record`` writes, without the tables): the states patch, mean and resample read."""
    capture = RecordConfig(full_positions=NEW_TOKENS, sketch_positions=0, top_k=4, dtype="float32")
    with Recorder.for_model(sst, IDS, capture) as recorder:
        generate(sst, PROMPTS, REFERENCE_DEPTH, GenerationConfig(max_new_tokens=NEW_TOKENS), observer=recorder)
    path = tmp_path_factory.mktemp("reference") / "run"
    extra = {"hidden_size": sst.hidden_size, "num_layers": sst.num_layers, "dtype": "float32", "top_k": 4,
             "full_positions": NEW_TOKENS, "sketch_positions": 0, "protocol": "completion",
             "prompt_mode": "two_pass", "depths": [REFERENCE_DEPTH]}
    with RunWriter.create_or_resume(path, {"test": "compiled interventions"}, extra) as writer:
        writer.submit(REFERENCE_DEPTH, IDS, **recorder.columns())
    return str(path)


def one(site: Site, operation: Operation) -> InterventionSpec:
    return InterventionSpec.of(site, operation)


def direction(sst, seed: int = 0) -> tuple[float, ...]:
    return tuple(np.random.default_rng(seed).normal(size=sst.hidden_size).round(3).tolist())


def both(sst, compiler, spec, depth, config, question_ids=None):
    """(eager result, compiled result, eager logits, compiled logits, eager site report, compiled site report)."""
    out = []
    for run in (generate, generate_compiled):
        kept = KeptLogits()
        extra = {} if run is generate else {"compiler": compiler}
        with intervene(sst, spec, question_ids) as intervener:
            result = run(sst, PROMPTS, depth, config, observer=ObserverGroup(intervener, kept), **extra)
        out.append((result, kept, intervener.site_report()))
    (eager, eager_log, eager_sites), (fast, fast_log, fast_sites) = out
    return eager, fast, eager_log, fast_log, eager_sites, fast_sites


def assert_same(eager, fast, eager_log, fast_log) -> float:
    """Tokens equal, logits within the tolerance; returns the worst logit difference."""
    assert fast.token_ids == eager.token_ids
    assert fast_log.keys == eager_log.keys and eager_log.keys
    worst = max((a - b).abs().max().item() for a, b in zip(eager_log.batches, fast_log.batches))
    assert worst <= LOGIT_TOLERANCE
    return worst


def clean_logits(sst, depth, config) -> KeptLogits:
    kept = KeptLogits()
    generate(sst, PROMPTS, depth, config, observer=kept)
    return kept


#: kind -> (spec builder (sst, reference run) -> spec, depths); every spec changes something at each depth listed
CASES = {
    "zero": (lambda sst, run: one(Site("layer_out", layers=[1], positions=[1, 2, 3]), Operation("zero")), (1, 3)),
    "zero_state_in": (lambda sst, run: one(Site("state_in", layers=[0], positions=[1, 4]), Operation("zero")),
                      (1, 3)),
    "add_blended": (lambda sst, run: one(Site("blended", layers=[0], positions=[0, 2]),
                                         Operation("add", scale=0.5, direction=direction(sst))), (1, 2, 3, 4)),
    "add_layer_out_and_state_in": (lambda sst, run: InterventionSpec((
        Intervention(Site("layer_out", layers=[1], positions=[2]), Operation("add", scale=2.0,
                                                                             direction=direction(sst, 1))),
        Intervention(Site("state_in", layers=[1], positions=[3]), Operation("add", direction=direction(sst, 2))))),
        (1, 3)),
    "set_alpha": (lambda sst, run: InterventionSpec((
        Intervention(Site("alpha", layers=[1], positions=[1, 2]), Operation("set_alpha", value=0.0)),
        Intervention(Site("alpha", layers=[0], positions=[3]), Operation("set_alpha", value=0.9)))), (1, 3)),
    "freeze": (lambda sst, run: one(Site("layer_out", iterations=[1], positions=[0, 2]), Operation("freeze")),
               (1, 2, 3, 4)),
    "freeze_iteration_2": (lambda sst, run: one(Site("layer_out", layers=[1], iterations=[2]), Operation("freeze")),
                           (3,)),
    "patch": (lambda sst, run: one(Site("layer_out", layers=[1], positions=[1, 2]),
                                   Operation("patch", run=run, depth=REFERENCE_DEPTH, source_iteration=3)), (1, 3)),
    "patch_scaled": (lambda sst, run: one(Site("layer_out", layers=[0], positions=[1], iterations=[2]),
                                          Operation("patch", run=run, scale=0.5, source_iteration=1)), (3,)),
    "mean": (lambda sst, run: one(Site("layer_out", positions=[2]), Operation("mean", run=run,
                                                                               depth=REFERENCE_DEPTH)), (1, 3)),
    "resample": (lambda sst, run: one(Site("layer_out", layers=[1], positions=[1]),
                                      Operation("resample", run=run, depth=REFERENCE_DEPTH, seed=1)), (1, 3)),
    "mean_state_in": (lambda sst, run: one(Site("state_in", layers=[1], iterations=[2], positions=[0, 1, 2]),
                                           Operation("mean", run=run, depth=REFERENCE_DEPTH)), (2, 3)),
    "resample_state_in_scaled": (lambda sst, run: one(Site("state_in", iterations=[2, 3], positions=[1]),
                                                      Operation("resample", run=run, seed=1, scale=0.5)), (3,)),
}


@pytest.mark.parametrize("prompt_mode", PROMPT_MODES)
@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_kind_runs_compiled_as_eager(sst, compiled, reference, kind, prompt_mode):
    build, depths = CASES[kind]
    spec = build(sst, reference)
    assert spec_refusal(spec) is None
    for depth in depths:
        config = GenerationConfig(max_new_tokens=NEW_TOKENS, prompt_mode=prompt_mode, logits_every_iteration=True)
        eager, fast, eager_log, fast_log, eager_sites, fast_sites = both(sst, compiled[0], spec, depth, config, IDS)
        assert_same(eager, fast, eager_log, fast_log)
        assert fast_sites == eager_sites
        assert all(row["sites"] > 0 for row in eager_sites), (depth, eager_sites)
        # the spec moved the model (a compiled step that ignored its edits would match a clean eager run instead)
        clean = clean_logits(sst, depth, config)
        assert max((a - b).abs().max().item() for a, b in zip(clean.batches, fast_log.batches)) > 1e-3, depth


def test_a_freeze_of_a_pass_that_read_no_state_turns_the_next_pass_stream_off(sst, compiled):
    """Under the prompt mode none, position 0 iteration 1 reads no state: freezing it makes iteration 2 run with
    the stream off (the eager ``reads_no_state``), as a mask of the compiled step."""
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, prompt_mode="none", logits_every_iteration=True)
    spec = one(Site("layer_out", layers=[1], positions=[0], iterations=[1, 2]), Operation("freeze"))
    eager, fast, eager_log, fast_log, eager_sites, fast_sites = both(sst, compiled[0], spec, 3, config)
    assert_same(eager, fast, eager_log, fast_log)
    assert fast_sites == eager_sites == [{"rule": 1, "stream": "layer_out", "operation": "freeze", "sites": 4}]


def test_a_per_position_policy_with_an_intervention(sst, compiled, reference):
    policy = parse_position_policy("state:0.05,max=4", default_max=4)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, prompt_mode="two_pass", logits_every_iteration=True)
    spec = InterventionSpec((Intervention(Site("blended", layers=[0], iterations=[2]),
                                          Operation("add", scale=0.3, direction=direction(sst))),
                             Intervention(Site("layer_out", layers=[1], positions=[1]),
                                          Operation("mean", run=reference, depth=REFERENCE_DEPTH))))
    eager, fast, eager_log, fast_log, eager_sites, fast_sites = both(sst, compiled[0], spec, policy, config)
    assert_same(eager, fast, eager_log, fast_log)
    assert fast.iterations == eager.iterations
    assert fast_sites == eager_sites and all(row["sites"] > 0 for row in eager_sites)


def test_several_rules_at_one_site_compose_in_order(sst, compiled, reference):
    site = Site("layer_out", layers=[1], positions=[1, 2])
    spec = InterventionSpec((Intervention(site, Operation("patch", run=reference, depth=REFERENCE_DEPTH,
                                                          source_iteration=2, scale=0.7)),
                             Intervention(site, Operation("add", scale=0.5, direction=direction(sst))),
                             Intervention(Site("layer_out", layers=[1], positions=[2]), Operation("zero")),
                             Intervention(site, Operation("add", scale=-1.0, direction=direction(sst, 3)))))
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, logits_every_iteration=True)
    eager, fast, eager_log, fast_log, eager_sites, fast_sites = both(sst, compiled[0], spec, 2, config, IDS)
    assert_same(eager, fast, eager_log, fast_log)
    assert fast_sites == eager_sites


EDITS = {  # (stream, operation builder (sst, run) -> Operation, bit-exact against the eager operation)
    "zero_layer_out": ("layer_out", lambda sst, run: Operation("zero"), True),
    "zero_state_in": ("state_in", lambda sst, run: Operation("zero"), True),
    "add_layer_out": ("layer_out", lambda sst, run: Operation("add", scale=0.3, direction=direction(sst)), True),
    "add_blended": ("blended", lambda sst, run: Operation("add", scale=-2.0, direction=direction(sst)), True),
    "add_state_in": ("state_in", lambda sst, run: Operation("add", direction=direction(sst)), True),
    "patch": ("layer_out", lambda sst, run: Operation("patch", run=run), True),
    "patch_scale_0": ("layer_out", lambda sst, run: Operation("patch", run=run, scale=0.0), True),
    "patch_scale_0.4": ("layer_out", lambda sst, run: Operation("patch", run=run, scale=0.4), False),
    "mean": ("layer_out", lambda sst, run: Operation("mean", run=run), True),
    "resample": ("layer_out", lambda sst, run: Operation("resample", run=run, seed=3), True),
    "mean_state_in": ("state_in", lambda sst, run: Operation("mean", run=run), True),
    "resample_state_in_scale_0.6": ("state_in", lambda sst, run: Operation("resample", run=run, scale=0.6), False),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_each_edit_equals_the_eager_operation_on_the_same_values(sst, reference, name):
    """The tensor form against the Intervener's own arithmetic on one pass's values (no compilation): equal bit for
    bit at scale 0 or 1 and for zero and add, within float32 rounding otherwise; row 1 is inactive (zero and add
    change it too, a recorded-run reference does not)."""
    stream, build, exact = EDITS[name]
    spec = one(Site(stream, layers=[1], positions=[1], iterations=[2]), build(sst, reference))
    generator = torch.Generator().manual_seed(0)
    h, previous, output = (torch.randn(2, 1, sst.hidden_size, generator=generator) for _ in range(3))
    params = sst.state_modules()[1]
    edits = StreamEdits(sst.num_layers, tuple(sorted(sst.state_modules())), 2, sst.hidden_size, sst.dtype,
                        sst.device)
    with torch.no_grad(), intervene(sst, spec, IDS) as intervener:
        intervener.on_pass_start(PassInfo(position=1, iteration=2, depth=REFERENCE_DEPTH,
                                          active=torch.tensor([True, False])))
        intervener.fill_edits(edits)
        counted = list(intervener.site_counts)
        if stream == "layer_out":
            eager, got = intervener.layer_out(1, output), edits.layer_out(1, output)
            untouched = edits.layer_out(0, output)
        else:
            eager, got = _blend(params, h, previous, intervener, 1), edits.blend(1, params, h, previous)
            untouched = edits.blend(0, params, h, previous)
        assert intervener.site_counts == [2 * n for n in counted] and counted[0] > 0  # the same count, twice
    clean = output if stream == "layer_out" else params.blend(h, previous)
    # scale 0 leaves the value; every other edit moves it
    assert torch.equal(eager, clean) == (spec.interventions[0].operation.scale == 0)
    if exact:
        assert torch.equal(got, eager)
    else:
        assert (got - eager).abs().max().item() <= 1e-6
    expected = output if stream == "layer_out" else sst.state_modules()[0].blend(h, previous)
    assert torch.equal(untouched, expected)  # another layer's edits are the identity


def test_per_row_specs_run_compiled_as_eager(sst, compiled, reference):
    specs = [one(Site("layer_out", layers=[1], positions=[1, 2]), Operation("zero")),
             InterventionSpec((Intervention(Site("alpha", layers=[0], positions=[2]),
                                            Operation("set_alpha", value=0.0)),
                               Intervention(Site("layer_out", layers=[0], positions=[3]),
                                            Operation("resample", run=reference, depth=REFERENCE_DEPTH, seed=2))))]
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, logits_every_iteration=True)
    eager, fast, eager_log, fast_log, eager_sites, fast_sites = both(sst, compiled[0], specs, 3, config, IDS)
    assert_same(eager, fast, eager_log, fast_log)
    assert fast_sites == eager_sites
    assert [row.get("row") for row in fast_sites] == [0, 1, 1] and all(row["sites"] > 0 for row in fast_sites)


def test_new_specs_and_questions_refill_buffers_without_recompiling(sst, compiled):
    compiler, first, after_first = compiled
    assert first == 2  # the intervening step and the LM head
    # every test before this one (each kind, depths 1-4, every prompt mode, per-row specs, a per-position policy)
    # ran on the same two graphs
    assert unique_graphs() == after_first
    before = unique_graphs()
    batches = ((1, PROMPTS, one(Site("layer_out", layers=[0], positions=[1]),
                                Operation("add", scale=3.0, direction=direction(sst, 4)))),
               (4, [[9, 9, 9, 9], [4, 5, 6, 7, 8, 9, 10]], one(Site("alpha", layers=[1]),
                                                              Operation("set_alpha", value=0.2))),
               (2, [[7, 7], [1, 2, 3]], InterventionSpec()))
    for depth, prompts, spec in batches:
        for mode in ("two_pass", "none"):
            with intervene(sst, spec) as intervener:
                generate_compiled(sst, prompts, depth, GenerationConfig(max_new_tokens=4, prompt_mode=mode),
                                  observer=intervener, compiler=compiler)
    assert unique_graphs() == before
    assert list(compiler.steps) == [(2, 256, True)]


def test_the_intervening_step_has_no_graph_breaks(sst, compiled):
    # after the count of compilations: explain() traces the step again
    step = compiled[0].steps[(2, 256, True)]
    step.cache.set_column(width := len(PROMPTS[0]))
    explanation = torch._dynamo.explain(step._step)(torch.tensor([[7], [8]]), torch.tensor([[width], [3]]))
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1


# ------------------------------------------------------------------------------------------------ refusals
def test_what_cannot_run_compiled_is_refused_with_one_line_naming_compile_off(sst, compiled, reference):
    config = GenerationConfig(max_new_tokens=2)
    live = one(Site("layer_out", layers=[1]), Operation("patch", source=1))
    with intervene(sst, live) as intervener, pytest.raises(UsageError) as live_error:
        generate_compiled(sst, PROMPTS, 1, config, observer=intervener, compiler=compiled[0])
    with intervene(sst, one(Site("layer_out"), Operation("zero")), capture=["layer_out"]) as intervener, \
            pytest.raises(UsageError) as capture_error:
        generate_compiled(sst, PROMPTS, 1, config, observer=intervener, compiler=compiled[0])
    two = InterventionSpec((Intervention(Site("state_in", layers=[1], iterations=[2]),
                                         Operation("mean", run=reference)),
                            Intervention(Site("state_in", iterations=[2, 3]), Operation("resample", run=reference))))
    with intervene(sst, two, IDS) as intervener, pytest.raises(UsageError) as two_error:
        generate_compiled(sst, PROMPTS, 2, config, observer=intervener, compiler=compiled[0])
    plain = StepCompiler(sst, None, stream=False)
    with intervene(sst, one(Site("layer_out"), Operation("zero"))) as intervener, \
            pytest.raises(UsageError) as plain_error:
        generate_compiled(sst, PROMPTS, 1, config, observer=intervener, compiler=plain)
    for error, phrase in ((live_error, "live patch"), (capture_error, "capturing streams"),
                          (two_error, "one reference state per layer"), (plain_error, "plain backbone")):
        message = str(error.value)
        assert phrase in message and message.endswith("use --compile off") and "\n" not in message
    # rules of disjoint sites share the one reference slot per layer
    apart = InterventionSpec((Intervention(Site("state_in", layers=[1], iterations=[2]), Operation("mean", run="r")),
                              Intervention(Site("state_in", layers=[0], iterations=[2]), Operation("mean", run="r"))))
    assert spec_refusal(apart) is None


# ------------------------------------------------------------------------------------------------ record --compile
def test_record_compile_on_with_an_intervention_writes_the_same_run_as_eager(tmp_path, capsys):
    from sst_interp.cli.record import main as record_main
    from sst_interp.interventions import run_site_counts
    from sst_interp.store.reader import Run
    from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model

    model = save_tiny_model(tmp_path / "model")
    spec = tmp_path / "spec.yaml"
    spec.write_text("interventions:\n  - site: {stream: layer_out, layers: [1], iterations: [2]}\n"
                    "    operation: {kind: zero}\n"
                    "  - site: {stream: alpha, positions: [1, 2]}\n    operation: {kind: set_alpha, value: 0}\n")
    runs = {}
    for flag in ("off", "on"):
        out = tmp_path / f"run_{flag}"
        assert record_main([*FAST, "--model", str(model), "--depths", "2", "--limit", "2", "--batch-size", "2",
                            "--demo-preset", "--intervention", str(spec), "--compile", flag, "--out", str(out)]) == 0
        runs[flag] = Run.open(out)
    eager, fast = runs["off"], runs["on"]
    assert fast.manifest["identity"]["numerics"]["decode"] == "compiled:default+frozen"

    def answers(run):
        table = run.generations().sort_values(["question_id"])
        return [(row.question_id, list(row.token_ids)) for row in table.itertuples()]

    assert answers(fast) == answers(eager) and len(answers(eager)) == 2
    counts = run_site_counts(eager.manifest)
    assert run_site_counts(fast.manifest) == counts and all(row["sites"] > 0 for row in counts)
    for a, b in zip(eager.hidden(2), fast.hidden(2), strict=True):
        assert np.allclose(a.values, b.values, rtol=1e-5, atol=1e-5)
    # a rule that touched nothing in the first batch still stops the recording, compiled (iteration 3 > depth 2)
    spec.write_text(spec.read_text().replace("iterations: [2]", "iterations: [3]"))
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(model), "--depths", "2", "--limit", "2",
                                                    "--batch-size", "2", "--demo-preset", "--intervention", str(spec),
                                                    "--compile", "on", "--out", str(tmp_path / "never")],
                              "rule 1 (zero on layer_out) changed no (row, position, iteration, layer) site")
    assert not (tmp_path / "never").exists()

"""Bring your own looped model: a toy Huginn-style model (prelude, core repeated r times with the input injected,
coda) that transformers does not ship, loaded from a local folder through transformers' remote-code path, with the
loop declared in the user's own file (``record --model FOLDER --loop huginn_loops.py:TOY_HUGINN
--trust-remote-code``). Recording is exact against the model's own forward; the refusals are one ``error:`` line,
exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sst_interp.cli.record import main as record_main
from sst_interp.hooks import RecordConfig, VisitRecorder
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_model import LoopModel, generate_looped, load_loop_backbone
from sst_interp.model.loop_file import load_loop_file
from sst_interp.store import Run
from tests.unit.byo import LOOP_FILE, save_toy_huginn
from tests.unit.conftest import FAMILY_ARTEFACTS, FAST, fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

LOOP = f"{LOOP_FILE}:TOY_HUGINN"
PROMPT = [2, 17, 40, 9, 33, 5]
NEW_TOKENS = 6


@pytest.fixture(scope="module")
def toy_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return save_toy_huginn(tmp_path_factory.mktemp("byo") / "toy")


@pytest.fixture(scope="module")
def toy(toy_folder: Path) -> LoopModel:
    loop = load_loop_file(LOOP)
    backbone, _ = load_loop_backbone(str(toy_folder), loop, dtype="float64", trust_remote_code=True)
    return LoopModel(backbone, loop)


def test_byo_declaration_reads_the_users_file(toy: LoopModel) -> None:
    loop = toy.loop
    assert loop.family == "toy_huginn" and type(toy.backbone).__name__ == "ToyHuginnForCausalLM"
    assert toy.layer_names == ["prelude.0", "core_block.0", "core_block.1", "coda.0"]
    assert loop.iterations_per_layer(toy.config, 3) == [1, 3, 3, 1] and loop.state_layer(toy.config) == 2


@pytest.mark.parametrize("depth", [1, 3])
def test_byo_recording_is_exact_against_the_models_own_forward(toy: LoopModel, depth: int) -> None:
    """Tokens equal greedy decoding by the model's own uncached forward; every recorded visit equals the same
    visit's output in ``output_hidden_states`` of the same call replayed; the lens is ln_f and lm_head on the
    core's output after each repeat."""
    config = RecordConfig(full_positions=NEW_TOKENS, sketch_positions=0, top_k=8)
    with VisitRecorder.for_model(toy, ["q"], config) as recorder:
        result = generate_looped(toy, [PROMPT], depth, GenerationConfig(max_new_tokens=NEW_TOKENS),
                                 observer=recorder)
    tokens = result.token_ids[0]
    backbone = toy.backbone
    with toy.at_depth(depth), torch.no_grad():
        sequence = list(PROMPT)
        for _ in range(NEW_TOKENS):  # greedy by the model's own forward, no cache
            sequence.append(int(backbone(torch.tensor([sequence])).logits[0, -1].argmax()))
    assert tokens == sequence[len(PROMPT):]
    columns = recorder.columns()
    hidden, logits = columns["hidden"], columns["logits"]
    recorded = {(int(p), int(i), int(l)): hidden["values"][n]
                for n, (p, i, l) in enumerate(zip(hidden["position"], hidden["iteration"], hidden["layer"]))}
    lens = {(int(p), int(i)): n for n, (p, i) in enumerate(zip(logits["position"], logits["iteration"]))}
    visits = toy.loop.visits(toy.config, depth)
    assert len(recorded) == NEW_TOKENS * len(visits) and len(lens) == NEW_TOKENS * depth
    with toy.at_depth(depth), torch.no_grad():
        cache = None
        for position in range(NEW_TOKENS):
            ids = sequence[:len(PROMPT)] if position == 0 else [sequence[len(PROMPT) + position - 1]]
            out = backbone(torch.tensor([ids]), cache=cache, use_cache=True, output_hidden_states=True)
            cache = out.cache
            assert len(out.hidden_states) == len(visits)
            for state, (iteration, layer) in zip(out.hidden_states, visits, strict=True):
                # stored as float32 (the run dtype): the float64 visit rounded once
                assert torch.equal(recorded[(position, iteration, layer)], state[0, -1].float()), (position, layer)
            core = [state for state, (_, layer) in zip(out.hidden_states, visits) if layer == 2]
            for iteration, state in enumerate(core, 1):
                expected = torch.log_softmax(backbone.lm_head(backbone.ln_f(state[0, -1])), -1).topk(8)
                row = lens[(position, iteration)]
                assert torch.equal(logits["top_ids"][row].long(), expected.indices)
                assert torch.allclose(logits["top_logprobs"][row].double(), expected.values, atol=1e-6, rtol=0)


def test_byo_record_then_report(toy_folder: Path, tmp_path: Path) -> None:
    from sst_interp.cli.report import main as report_main

    out = tmp_path / "run"
    assert record_main([*FAST, "--model", str(toy_folder), "--loop", LOOP, "--trust-remote-code", "--depths", "1,2",
                        "--limit", "2", "--out", str(out)]) == 0
    run = Run.open(out)
    assert run.manifest["family"] == "toy_huginn"
    assert run.manifest["loop"]["iterations_per_layer"] == {"1": [1, 1, 1, 1], "2": [1, 2, 2, 1]}
    block = next(iter(run.hidden(2)))
    assert block.values.shape == (2, 2, 4, 32)
    assert report_main(["--run", str(out), "--out", str(tmp_path / "report")]) == 0  # 1 if any artefact failed
    assert (tmp_path / "report" / "index.html").is_file()
    for name in (*FAMILY_ARTEFACTS, "tab_staged_breakdown", "fig_overlap_heatmap"):
        assert any((tmp_path / "report").glob(f"{name}.*")), name


BAD_LOOPS = {
    "missing.py:TOY": "no such file",
    f"{LOOP_FILE}:NOPE": "defines no 'NOPE' (loop declarations in it: TOY_HUGINN)",
    f"{LOOP_FILE}": "expected FILE.py:NAME",
    f"{LOOP_FILE}:__doc__": "__doc__ is not a loop declaration",
}


@pytest.mark.parametrize("spec", sorted(BAD_LOOPS))
def test_byo_bad_loop_file_is_one_error_line(toy_folder: Path, tmp_path: Path, capsys, spec: str) -> None:
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(toy_folder), "--loop", spec,
                                                    "--trust-remote-code", "--out", str(out)], BAD_LOOPS[spec])
    assert not out.exists()


@pytest.mark.parametrize("body, phrase", [
    # sites that match no module: the error names the modules it looked for
    ("layers=lambda c: [f'blocks.{i}' for i in range(4)], looped=lambda c: (1, 3)",
     "looked for blocks.0, blocks.1, blocks.2, blocks.3"),
    # a looped block beyond the layers declared
    ("layers=lambda c: ['prelude.0', 'coda.0'], looped=lambda c: (1, 3)", "is not within the 2 layers"),
    ("layers=lambda c: ['prelude.0'], looped=lambda c: (0, 1), depth_key='num_steps'",
     "has no field 'num_steps'"),
    ("layers=1 / 0", "failed to run: ZeroDivisionError"),
])
def test_byo_declaration_that_does_not_match_the_model_is_one_error_line(toy_folder: Path, tmp_path: Path, capsys,
                                                                         body: str, phrase: str) -> None:
    loop_file = tmp_path / "mine.py"
    fields = {"depth_key": "'mean_recurrence'"} if "depth_key" not in body else {}
    extra = "".join(f", {key}={value}" for key, value in fields.items())
    loop_file.write_text("from sst_interp.model.loops import looped_block\n"
                         f"MINE = looped_block(family='mine', head='lm_head', norm='ln_f', {body}{extra})\n")
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(toy_folder), "--loop",
                                                    f"{loop_file}:MINE", "--trust-remote-code", "--out", str(out)],
                              phrase)
    assert not out.exists()


def test_byo_remote_code_without_trust_is_one_error_line(toy_folder: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    for extra in (["--loop", LOOP], []):
        fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(toy_folder), *extra,
                                                        "--out", str(out)], "pass --trust-remote-code to run it")
    assert not out.exists()


def test_dory_depth_zero_is_one_error_line(tmp_path: Path, capsys) -> None:
    folder = save_tiny_model(tmp_path / "dory", "dory")
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(folder), "--depths", "0",
                                                    "--out", str(out)], "depth")
    assert not out.exists()

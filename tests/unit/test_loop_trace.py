"""The trace check (``sst_interp.model.loop_trace``): a loop declaration is run against the loaded model before a run
is written, and every ordinary declaration mistake is one ``error:`` line, exit 2, with nothing written.

The mistakes are declared in a ``--loop`` file on the toy Huginn-style model (remote code: a prelude block, two core
blocks looped ``mean_recurrence`` times, a coda block, and one spare block the model never calls) and, where they
can be made, on a tiny random Dory folder. Before the check each of them recorded a wrong run with exit code 0 (or,
for a declared layer never called, left a half-written run behind)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from sst_interp.cli.record import main as record_main
from sst_interp.hooks import RecordConfig, VisitRecorder
from sst_interp.kernels.errors import UsageError
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.loop_file import load_loop_file
from sst_interp.model.loop_model import LoopModel, generate_looped, load_loop_backbone
from sst_interp.model.loop_trace import check_loop_trace
from sst_interp.model.loops import DORY_LOOP
from sst_interp.model.testing import tiny_dory
from sst_interp.record import trace_check
from sst_interp.store import Run
from tests.unit.byo import LOOP_FILE, save_toy_huginn
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model, tiny_backbone

pytestmark = pytest.mark.usefixtures("one_thread")

TOY = "layers=lambda c: {layers}, looped=lambda c: {looped}, depth_key={key!r}, norm='ln_f'"
DORY = ("layers=lambda c: {layers}, looped=lambda c: {looped}, depth_key={key!r}, norm='model.norm'")
DORY_LAYERS = "[f'model.layers.{i}' for i in range(c.num_hidden_layers)]"

#: name -> (model, declaration, the error's phrase): the issue's table, then an undeclared core block.
MISTAKES = {
    # a layer inside the loop that the model never calls (today: no rows for it, and no lens rows at all)
    "never called in the loop": ("toy", TOY.format(
        layers="['prelude.0', 'core_block.0', 'core_block.1', 'spare.0', 'coda.0']", looped=(1, 4),
        key="mean_recurrence"), "layer spare.0 is declared in the loop but was never called at depths 1 and 2"),
    # the loop declared one layer too long, taking in the coda (today: lens rows at iterations 1, 2, 1, ...)
    "loop too long": ("toy", TOY.format(layers="['prelude.0', 'core_block.0', 'core_block.1', 'coda.0']",
                                        looped=(1, 4), key="mean_recurrence"),
                      "layer coda.0 was called 1 time at depth 2 but is declared in the loop to run 2 times; it "
                      "does not repeat with the depth"),
    "dory loop too long": ("dory", DORY.format(layers=DORY_LAYERS, looped=(2, 5), key="n_recurrent_loops"),
                           "layer model.layers.4 was called 1 time at depth 2 but is declared in the loop to run 2 "
                           "times"),
    # a depth key the config has but the model does not read (today: duplicate rows, CorruptRunError later)
    "depth key not read": ("toy", TOY.format(layers="['prelude.0', 'core_block.0', 'core_block.1', 'coda.0']",
                                             looped=(1, 3), key="mean_backprop_depth"),
                           "depth_key mean_backprop_depth did not change the number of visits (8 at depth 1 and "
                           "2; declared 4 and 6)"),
    "dory depth key not read": ("dory", DORY.format(layers=DORY_LAYERS, looped=(2, 4), key="intermediate_size"),
                                "depth_key intermediate_size did not change the number of visits (10 at depth 1 "
                                "and 2; declared 6 and 8)"),
    # the core layers in the wrong order (today: the lens reads the wrong layer as the loop state)
    "wrong order": ("toy", TOY.format(layers="['prelude.0', 'core_block.1', 'core_block.0', 'coda.0']",
                                      looped=(1, 3), key="mean_recurrence"),
                    "at depth 1, call 2 of 4 was core_block.0 where the declared order has core_block.1"),
    "dory wrong order": ("dory", DORY.format(
        layers="['model.layers.0', 'model.layers.1', 'model.layers.3', 'model.layers.2', 'model.layers.4', "
               "'model.layers.5']", looped=(2, 4), key="n_recurrent_loops"),
        "at depth 1, call 3 of 6 was model.layers.2 where the declared order has model.layers.3"),
    # a declared layer outside the loop that is never called (today: exit 2, but a half-written run is left)
    "never called outside the loop": ("toy", TOY.format(
        layers="['prelude.0', 'core_block.0', 'core_block.1', 'coda.0', 'spare.0']", looped=(1, 3),
        key="mean_recurrence"), "layer spare.0 is declared outside the loop but was never called at depths 1 and 2"),
    # a core of two blocks declared as one: the other runs between the loop's visits, undeclared
    "undeclared layer in the loop": ("toy", TOY.format(layers="['prelude.0', 'core_block.0', 'coda.0']",
                                                       looped=(1, 2), key="mean_recurrence"),
                                     "layer core_block.1 runs between the loop's visits at depth 2 but is not "
                                     "declared"),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trace")
    return {"toy": save_toy_huginn(root / "toy", n_spare=1), "dory": save_tiny_model(root / "dory", "dory")}


def _loop_file(folder: Path, body: str) -> Path:
    path = folder / "mine.py"
    path.write_text("from sst_interp.model.loops import looped_block\n"
                    f"MINE = looped_block(family='mine', head='lm_head', {body})\n")
    return path


def _record(folders: dict[str, Path], model: str, loop: Path | None, out: Path, *extra: str) -> list[str]:
    remote = ["--trust-remote-code"] if model == "toy" else []
    declared = ["--loop", f"{loop}:MINE"] if loop is not None else []
    return [*FAST, "--model", str(folders[model]), *declared, *remote, "--depths", "1,2", "--limit", "1",
            "--out", str(out), *extra]


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_declaration_the_model_does_not_follow_is_one_error_line_and_nothing_is_written(
        folders: dict[str, Path], tmp_path: Path, capsys, name: str) -> None:
    model, body, phrase = MISTAKES[name]
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, _record(folders, model, _loop_file(tmp_path, body), out),
                              f"mine: the loop declaration does not match the running model (traced on 4 tokens at "
                              f"depths 1 and 2): {phrase}")
    assert not out.exists()


def test_a_right_declaration_records_and_its_trace_is_in_the_manifest(folders: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy model's right declaration (the spare block left out: it is not called) records; the manifest holds
    the trace (visits per token at each depth). A resume does not run the model for the check again; a changed
    weights file does."""
    body = TOY.format(layers="['prelude.0', 'core_block.0', 'core_block.1', 'coda.0']", looped=(1, 3),
                      key="mean_recurrence")
    out = tmp_path / "run"
    argv = _record(folders, "toy", _loop_file(tmp_path, body), out)
    assert record_main(argv) == 0
    trace = Run.open(out).manifest["loop"]["trace"]
    assert trace["depths"] == [1, 2] and trace["visits_per_token"] == {"1": 4, "2": 6} and trace["tokens"] == 4
    runs = []
    monkeypatch.setattr(trace_check, "check_loop_trace", lambda model: runs.append(model) or check_loop_trace(model))
    assert record_main(argv) == 0 and runs == []  # resumed (nothing left to record): the run's trace holds
    assert record_main([*argv[:-1], str(tmp_path / "other")]) == 0 and len(runs) == 1  # a new run checks again
    weights = folders["toy"] / "model.safetensors"
    weights.touch()
    assert record_main(argv) == 0 and len(runs) == 2  # the weights changed: checked again


@pytest.mark.parametrize("family", ["hrm_text", "inkling2_loop", "dory"])
def test_every_native_family_passes_the_check(family: str) -> None:
    dtype = torch.float32 if family == "inkling2_loop" else torch.float64
    model = LoopModel(tiny_backbone(family, dtype=dtype))
    result = check_loop_trace(model)
    assert result.depths == (1, 2)
    assert result.visits == {d: len(model.loop.visits(model.config, d)) for d in (1, 2)}


def test_a_native_model_that_stops_reading_its_depth_is_refused_as_transformers_changing() -> None:
    """What the check guards a native family against: a transformers release whose model no longer reads the loop
    count from the config field the family declares (here the inner model reads a copy of the config)."""
    model = LoopModel(tiny_dory())
    model.backbone.model.config = copy.deepcopy(model.backbone.config)
    with pytest.raises(UsageError, match=r"dory: .*depth_key n_recurrent_loops did not change the number of visits "
                                         r"\(10 at depth 1 and 2; declared 6 and 8\); transformers .* does not run "
                                         r"dory as sst-interp declares it"):
        check_loop_trace(model)


def test_recorded_iterations_are_the_observed_visits_not_the_declarations_arithmetic() -> None:
    """The recorder counts: the k-th call of a recorded layer in one forward call is iteration k, and so is the k-th
    lens call, whatever the declaration's addresses say (here they say iteration 1, and 9 for the lens)."""
    model = LoopModel(tiny_dory())
    sites = [(module, lambda kwargs, address=address: (1, address(kwargs)[1]))
             for module, address in DORY_LOOP.visit_sites(model.backbone)]
    lens = [(module, lambda kwargs: 9) for module, _ in DORY_LOOP.lens_sites(model.backbone)]
    config = RecordConfig(full_positions=2, sketch_positions=0, top_k=4)
    with VisitRecorder(sites, lens, model.lens, model.hidden_size, ["q"], config) as recorder:
        generate_looped(model, [[2, 17, 40]], 3, GenerationConfig(max_new_tokens=2), observer=recorder)
    columns = recorder.columns()
    hidden = columns["hidden"]
    addresses = sorted(zip(hidden["position"].tolist(), hidden["iteration"].tolist(), hidden["layer"].tolist()))
    assert addresses == sorted((p, i, l) for p in range(2) for i, l in DORY_LOOP.visits(model.config, 3))
    lens_rows = sorted(zip(columns["logits"]["position"].tolist(), columns["logits"]["iteration"].tolist()))
    assert lens_rows == [(p, i) for p in range(2) for i in (1, 2, 3)]


def test_a_declaration_reading_a_missing_config_field_is_one_error_line(folders: dict[str, Path], tmp_path: Path,
                                                                        capsys) -> None:
    for model, body, phrase in [
            ("toy", "layers=lambda c: [f'prelude.{i}' for i in range(c.n_pre)], looped=lambda c: (0, 1), "
                    "depth_key='mean_recurrence', norm='ln_f'",
             "mine: the declaration's layers(config) reads config field 'n_pre', which the model's config "
             "(ToyHuginnConfig) does not have (did you mean"),
            ("dory", "layers=lambda c: [f'model.layers.{i}' for i in range(c.num_layers)], "
                     "looped=lambda c: (c.n_input_layers, c.n_input_layers + c.n_loop_layers), "
                     "depth_key='n_recurrent_loops', norm='model.norm'",
             "reads config field 'num_layers', which the model's config (DoryConfig) does not have")]:
        out = tmp_path / f"out-{model}"
        fails_with_one_error_line(capsys, record_main, _record(folders, model, _loop_file(tmp_path, body), out),
                                  phrase)
        assert not out.exists()


def test_the_byo_example_declaration_passes(folders: dict[str, Path]) -> None:
    """The worked example of docs/bring-your-own.md passes on the toy model with its spare block (not declared,
    and never called, so not between the loop's visits)."""
    loop = load_loop_file(f"{LOOP_FILE}:TOY_HUGINN")
    backbone, _ = load_loop_backbone(str(folders["toy"]), loop, trust_remote_code=True)
    assert check_loop_trace(LoopModel(backbone, loop)).visits == {1: 4, 2: 6}


def test_the_error_lines_docs_show_are_the_checks_own(folders: dict[str, Path], tmp_path: Path, capsys) -> None:
    """docs/bring-your-own.md shows the trace check's error lines for two of the mistakes: they are what
    ``record`` prints."""
    shown = [line for line in (Path(__file__).parents[2] / "docs" / "bring-your-own.md").read_text().splitlines()
             if line.startswith("error: mine: the loop declaration")]
    printed = []
    for name in ("depth key not read", "loop too long"):
        model, body, _ = MISTAKES[name]
        capsys.readouterr()
        with pytest.raises(SystemExit):
            record_main(_record(folders, model, _loop_file(tmp_path, body), tmp_path / "out"))
        printed += [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert shown == printed

"""Opening a looped model's folder (``sst_interp.model.loop_folder``): a folder that cannot be recorded is one
``error:`` line before any weight loads (it was a traceback), ``--loop-option`` sets a setting the family declares
changeable at inference and is part of the run's identity, and ``--dtype auto`` honours a float64 folder on the CPU.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from sst_interp.cli.intervene import main as intervene_main
from sst_interp.cli.record import main as record_main
from sst_interp.model.loop_file import load_loop_file
from sst_interp.model.loop_model import LoopModel, load_loop_backbone, loop_compute_dtype
from sst_interp.model.loops import DORY_LOOP
from sst_interp.model.testing import tiny_dory
from sst_interp.store import Run
from tests.unit.byo import LOOP_FILE, save_toy_huginn
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

LOOP = f"{LOOP_FILE}:TOY_HUGINN"


@pytest.fixture(scope="module")
def dory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("dory") / "dory", "dory")


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_toy_huginn(tmp_path_factory.mktemp("toy") / "toy", dtype=torch.float64)


def _edited(folder: Path, tmp_path: Path, **fields: object) -> Path:
    copy = tmp_path / f"{folder.name}-edited"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, **fields}))
    return copy


@pytest.mark.parametrize("model, fields, phrase", [
    # Dory's config stores its layer counts doubled (attention and mlp blocks): 2 + 2 + 2 layers are 4 + 4 + 4
    ("dory", {"n_input_layers": 6}, "config.json of model folder {folder} is refused by its config class: "
                                    "n_input_layers + n_recurrent_layers + n_output_layers must equal "
                                    "num_hidden_layers (config.json has n_input_layers 6, n_output_layers 4, "
                                    "n_recurrent_layers 4, num_hidden_layers 12); correct config.json"),
    ("dory", {"recurrent_kv_cache_mode": "every_loop"},
     "Field 'recurrent_kv_cache_mode' expected one of ('per_loop', 'last_loop'), got every_loop (config.json has "
     "recurrent_kv_cache_mode 'every_loop'); correct config.json"),
    ("dory", {"hidden_size": 64}, "the weights of model folder {folder} do not fit its config.json: "
                                  "backbone.layers.0.lambda_1 is [32] in model.safetensors but the config builds "
                                  "[64] (config fields of that size: hidden_size, intermediate_size), and 54 more "
                                  "tensors; correct config.json (or the weights)"),
    ("toy", {"hidden_size": 48}, "the weights of model folder {folder} do not fit its config.json: adapter.weight is "
                                 "[32, 64] in model.safetensors but the config builds [48, 96] (config fields of that "
                                 "size: hidden_size)"),
])
def test_a_bad_folder_is_one_error_line_before_anything_loads(dory: Path, toy: Path, tmp_path: Path, capsys,
                                                              model: str, fields: dict, phrase: str) -> None:
    folder = _edited(dory if model == "dory" else toy, tmp_path, **fields)
    extra = ["--loop", LOOP, "--trust-remote-code"] if model == "toy" else []
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(folder), *extra, "--out", str(out)],
                              phrase.format(folder=folder))
    assert not out.exists()


def test_loop_option_sets_dorys_cache_mode_and_is_part_of_the_run(dory: Path, tmp_path: Path, capsys) -> None:
    """``record --model DORY --loop-option recurrent_kv_cache_mode=last_loop`` on a per_loop folder records what the
    folder records with ``last_loop`` written into its config.json (the only way before the flag), not what it
    records in its own mode; the manifest's ``loop.settings`` and the identity say so, and a resume with another
    value (or none) is refused."""
    argv = [*FAST, "--depths", "2", "--limit", "1"]
    runs = {}
    for name, folder, option in [("flag", dory, ["--loop-option", "recurrent_kv_cache_mode=last_loop"]),
                                 ("edited", _edited(dory, tmp_path, recurrent_kv_cache_mode="last_loop"), []),
                                 ("own", dory, [])]:
        assert record_main([*argv, "--model", str(folder), *option, "--out", str(tmp_path / name)]) == 0
        runs[name] = Run.open(tmp_path / name)
    manifest = runs["flag"].manifest
    assert manifest["loop"]["settings"] == {"recurrent_kv_cache_mode": "last_loop"}
    assert manifest["identity"]["loop_options"] == {"recurrent_kv_cache_mode": "last_loop"}
    assert runs["own"].manifest["loop"]["settings"] == {"recurrent_kv_cache_mode": "per_loop"}
    assert "loop_options" not in runs["own"].manifest["identity"]
    flag, edited, own = (next(iter(runs[name].hidden(2))).values for name in ("flag", "edited", "own"))
    assert np.array_equal(flag, edited, equal_nan=True)
    assert not np.array_equal(flag[1], own[1], equal_nan=True)  # position 1 reads the cache: the modes differ
    for other, shown in ((["--loop-option", "recurrent_kv_cache_mode=per_loop"], "{'recurrent_kv_cache_mode': "
                                                                                 "'per_loop'}"), ([], "None")):
        fails_with_one_error_line(capsys, record_main, [*argv, "--model", str(dory), *other, "--out",
                                                        str(tmp_path / "flag")],
                                  f"loop_options: {{'recurrent_kv_cache_mode': 'last_loop'}} -> {shown}")


def model_prompt(folder: Path, run: Run, question_id: str) -> list[int]:
    """The token ids ``record`` fed for ``question_id`` (the folder's tokenizer on the recorded prompt)."""
    prompt = run.questions().set_index("question_id").loc[question_id, "prompt"]
    return list(AutoTokenizer.from_pretrained(folder)(prompt).input_ids)


@pytest.mark.parametrize("option, phrase", [
    ("recurrent_kv_cache_mode=every_loop", "--loop-option recurrent_kv_cache_mode=every_loop: DoryConfig allows "
                                           "per_loop, last_loop"),
    ("n_recurrent_loops=2", "--loop-option n_recurrent_loops: dory declares no such setting (settings changeable at "
                            "inference: recurrent_kv_cache_mode); --depths sets n_recurrent_loops"),
    ("recurrent_kv_cache_mode", "is not KEY=VALUE"),
])
def test_a_bad_loop_option_is_one_error_line(dory: Path, tmp_path: Path, capsys, option: str, phrase: str) -> None:
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(dory), "--loop-option", option,
                                                    "--out", str(out)], phrase)
    assert not out.exists()


def test_loop_option_for_a_family_without_settings_or_an_sst_is_refused(tmp_path: Path, capsys) -> None:
    hrm = save_tiny_model(tmp_path / "hrm", "hrm_text")
    out = tmp_path / "out"
    fails_with_one_error_line(capsys, record_main, [*FAST, "--model", str(hrm), "--loop-option", "x=1",
                                                    "--out", str(out)],
                              "--loop-option x: hrm_text declares no such setting (settings changeable at "
                              "inference: none)")
    fails_with_one_error_line(capsys, record_main, [*FAST, "--loop-option", "x=1", "--out", str(out)],
                              "--loop-option sets a looped family's setting; an SST has none")
    assert not out.exists()


def test_dtype_auto_computes_a_float64_folder_in_float64_on_the_cpu(toy: Path, tmp_path: Path) -> None:
    """A float64 folder recorded with ``--dtype auto`` on the CPU computes in float64 (it was float32 without a word):
    every recorded hidden state is the float64 forward's, rounded once to the stored float32, and the numerics
    fingerprint names the compute dtype."""
    out = tmp_path / "run"
    assert record_main([*FAST, "--model", str(toy), "--loop", LOOP, "--trust-remote-code", "--depths", "2",
                        "--limit", "1", "--dtype", "auto", "--out", str(out)]) == 0
    run = Run.open(out)
    assert run.manifest["dtype"] == "float32" and run.manifest["identity"]["numerics"]["dtype"] == "float64"
    loop = load_loop_file(LOOP)
    backbone, tokenizer = load_loop_backbone(str(toy), loop, dtype="float64", trust_remote_code=True)
    model = LoopModel(backbone, loop)
    row = next(run.generations().itertuples())
    prompt = model_prompt(toy, run, row.question_id)
    sequence = prompt + [int(t) for t in row.token_ids]
    block = next(iter(run.hidden(2)))
    with model.at_depth(2), torch.no_grad():
        out64 = backbone(torch.tensor([sequence[:len(prompt)]]), output_hidden_states=True)
    visits = loop.visits(model.config, 2)
    for state, (iteration, layer) in zip(out64.hidden_states, visits, strict=True):
        assert torch.equal(torch.as_tensor(block.values[0, iteration - 1, layer]), state[0, -1].float())


@pytest.mark.parametrize("folder, asked, device, expected, note", [
    (torch.float64, "auto", "cpu", torch.float64, None),
    (torch.float64, "float32", "cpu", torch.float32, None),
    (torch.bfloat16, "auto", "cpu", torch.float32, None),
    (torch.float32, "auto", "cuda", torch.bfloat16, "[--dtype auto: the folder's float32 weights compute in bfloat16 "
                                                    "on cuda; pass --dtype float32 to compute in float32]"),
    (torch.float64, "auto", "cuda:0", torch.bfloat16, "the folder's float64 weights compute in bfloat16 on cuda:0"),
])
def test_the_compute_dtype_honours_or_names_the_folders(folder: torch.dtype, asked: str, device: str,
                                                        expected: torch.dtype, note: str | None) -> None:
    dtype, said = loop_compute_dtype(SimpleNamespace(dtype=folder), asked, device)
    assert dtype == expected
    assert (said is None) if note is None else (note in said)


def test_dorys_options_are_declared_once() -> None:
    assert DORY_LOOP.options == ("recurrent_kv_cache_mode",)
    assert DORY_LOOP.setting_values(tiny_dory(cache_mode="last_loop").config) == {"recurrent_kv_cache_mode":
                                                                                   "last_loop"}


def test_an_experiments_loop_option_runs_and_records_every_condition_with_it(dory: Path, tmp_path: Path) -> None:
    """``intervene ... --loop-option recurrent_kv_cache_mode=last_loop`` records its conditions as ``record`` does with
    the same option: the clean depth-2 run's settings and identity say last_loop, and its states are the ones
    ``record --loop-option`` records, not the folder's own per_loop ones."""
    option = ["--loop-option", "recurrent_kv_cache_mode=last_loop"]
    argv = [*FAST, "--limit", "1"]
    assert intervene_main(["window", "--out", str(tmp_path / "exp"), "--model", str(dory), *argv, "--depth", "2",
                           "--size", "1", "--controls", "none", *option]) == 0
    assert record_main([*argv, "--depths", "1,2", "--model", str(dory), *option, "--out", str(tmp_path / "flag")]) == 0
    assert record_main([*argv, "--depths", "1,2", "--model", str(dory), "--out", str(tmp_path / "own")]) == 0
    clean = Run.open(tmp_path / "exp" / "runs" / "clean")
    assert clean.manifest["loop"]["settings"] == {"recurrent_kv_cache_mode": "last_loop"}
    assert clean.manifest["identity"]["loop_options"] == {"recurrent_kv_cache_mode": "last_loop"}
    mine, flag, own = (next(iter(Run.open(tmp_path / name).hidden(2))).values
                       for name in ("exp/runs/clean", "flag", "own"))
    assert np.array_equal(mine, flag, equal_nan=True)
    assert not np.array_equal(mine[1], own[1], equal_nan=True)  # position 1 reads the cache: the modes differ

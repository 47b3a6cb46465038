"""The features command's refusals: each is one ``error:`` line, exit 2, with nothing written (issue 55's bad
inputs that belong to dictionaries)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sst_interp.cli.features import main
from tests.unit.conftest import fails_with_one_error_line
from tests.unit.features.planted import planted_directions, write_planted_run

#: The small training every refusal test would start (and must not get to).
QUICK = ["--steps", "2", "--batch-size", "8", "--buffer", "16", "--width", "8", "--k", "2", "--device", "cpu"]


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def refuses(capsys, argv: list[str], pattern: str, *watched: Path) -> None:
    """``main(argv)`` is one error line holding ``pattern`` and leaves every ``watched`` folder as it was."""
    before = [_listing(folder) for folder in watched]
    fails_with_one_error_line(capsys, main, argv, pattern)
    assert [_listing(folder) for folder in watched] == before


@pytest.fixture(scope="module")
def narrow_run(tmp_path_factory) -> Path:
    """A planted run of width 12 (the dictionaries are of width 16)."""
    return write_planted_run(tmp_path_factory.mktemp("narrow") / "run", planted_directions(8, 12), questions=6)


@pytest.fixture(scope="module")
def stateless_run(tmp_path_factory) -> Path:
    """A run with logits but no full hidden states."""
    return write_planted_run(tmp_path_factory.mktemp("stateless") / "run", planted_directions(8, 16), questions=6,
                             hidden=False)


@pytest.fixture(scope="module")
def one_iteration_run(tmp_path_factory) -> Path:
    """A run at depth 1 only: every layer is visited once (no loop to share a dictionary over)."""
    return write_planted_run(tmp_path_factory.mktemp("flat") / "run", planted_directions(8, 16), questions=6,
                             depths=(1,))


def test_a_run_without_full_states_at_the_site(capsys, stateless_run, tmp_path):
    refuses(capsys, ["train", "--run", str(stateless_run), "--layer", "0", "--out", str(tmp_path / "d"), *QUICK],
            "holds no full hidden states at depth 2", stateless_run, tmp_path)


def test_an_iteration_the_run_did_not_record(capsys, planted_run, tmp_path):
    refuses(capsys, ["train", "--run", str(planted_run), "--layer", "0", "--iterations", "2,3", "--out",
                     str(tmp_path / "d"), *QUICK], "did not record iteration 3 at layer 0", planted_run, tmp_path)
    refuses(capsys, ["train", "--run", str(planted_run), "--layer", "5", "--out", str(tmp_path / "d"), *QUICK],
            "there is no layer 5", planted_run, tmp_path)


def test_a_shared_layout_at_a_site_that_is_not_looped(capsys, one_iteration_run, planted_run, tmp_path):
    refuses(capsys, ["train", "--run", str(one_iteration_run), "--layer", "0", "--layout", "shared", "--out",
                     str(tmp_path / "d"), *QUICK], "is not looped at depth 1", one_iteration_run, tmp_path)
    refuses(capsys, ["train", "--run", str(planted_run), "--layer", "0", "--layout", "shared", "--iterations", "2",
                     "--out", str(tmp_path / "d"), *QUICK], "a shared dictionary spans", planted_run, tmp_path)


def test_a_family_layer_outside_the_loop_is_not_looped(capsys, tmp_path):
    """A natively looping family that visits layer 0 once per token at depth 2 (Inkling-2 Loop's layers before its
    loop, as the manifest's loop.iterations_per_layer says)."""
    loop = {"family": "inkling2_loop", "layers": ["pre", "loop.0"],
            "iterations_per_layer": {"1": [1, 1], "2": [1, 2]}}
    run = write_planted_run(tmp_path / "run", planted_directions(8, 16), questions=4, depths=(2,),
                            family={"family": "inkling2_loop", "loop": loop})
    refuses(capsys, ["train", "--run", str(run), "--layer", "0", "--layout", "shared", "--out",
                     str(tmp_path / "d"), *QUICK], "layer 0 (pre) is not looped", run)


def test_a_dictionary_of_another_width(capsys, shared_dictionary, narrow_run, tmp_path):
    refuses(capsys, ["evaluate", "--dictionary", str(shared_dictionary), "--run", str(narrow_run), "--no-splice",
                     "--out", str(tmp_path / "e")], "trained on states of width d = 16", shared_dictionary, tmp_path)


def test_a_dictionary_of_another_site(capsys, shared_dictionary, per_iteration, planted_run, tmp_path):
    refuses(capsys, ["evaluate", "--dictionary", str(shared_dictionary), "--layer", "1", "--no-splice", "--out",
                     str(tmp_path / "e")], "was trained on layer 0, not layer 1", shared_dictionary, tmp_path)
    refuses(capsys, ["evaluate", "--dictionary", str(per_iteration / "iteration-1"), "--iterations", "2",
                     "--no-splice", "--out", str(tmp_path / "e")], "covers iterations [1] of layer 0, not [2]",
            per_iteration, tmp_path)


def _family_run(folder: Path, layers: list[str]) -> Path:
    loop = {"family": "hrm_text", "layers": layers, "iterations_per_layer": {"1": [1, 1], "2": [2, 2]}}
    return write_planted_run(folder, planted_directions(8, 16), questions=8,
                             family={"family": "hrm_text", "loop": loop})


def test_a_run_of_another_family_or_whose_layer_is_another_module(capsys, shared_dictionary, tmp_path):
    """Same width and layer index, but another family's run, or the layer is another module: another site."""
    run = _family_run(tmp_path / "hrm", ["L0.L_module.layers.0", "H.H_module.layers.0"])
    refuses(capsys, ["evaluate", "--dictionary", str(shared_dictionary), "--run", str(run), "--no-splice", "--out",
                     str(tmp_path / "e")], "was trained on a sst run", shared_dictionary, tmp_path)
    from tests.unit.features.conftest import train

    train(run, tmp_path / "hrm-dictionary", layout="shared", steps=2, width=8, k=2, holdout=0.0)
    swapped = _family_run(tmp_path / "swapped", ["H.H_module.layers.0", "L0.L_module.layers.0"])
    refuses(capsys, ["evaluate", "--dictionary", str(tmp_path / "hrm-dictionary"), "--run", str(swapped),
                     "--no-splice", "--out", str(tmp_path / "e")],
            "was trained on layer 0 = L0.L_module.layers.0; in", tmp_path)


def test_comparing_against_dictionaries_of_another_width(capsys, shared_dictionary, planted_run, tmp_path):
    narrow = tmp_path / "narrow"
    from tests.unit.features.conftest import train

    train(planted_run, narrow, layout="per-iteration", steps=2, width=8, k=2)
    refuses(capsys, ["evaluate", "--dictionary", str(shared_dictionary), "--against", str(narrow), "--no-splice",
                     "--out", str(tmp_path / "e")], "compared at equal width", shared_dictionary, tmp_path)


def test_a_splice_of_a_run_that_cannot_be_rerun(capsys, shared_dictionary, tmp_path):
    """The planted run is a synthetic SST run whose model ('planted') exists nowhere: its quality numbers need no
    model, its splice is refused, saying how to go on."""
    refuses(capsys, ["evaluate", "--dictionary", str(shared_dictionary), "--out", str(tmp_path / "e")],
            "does not load here (could not load model 'planted'", shared_dictionary, tmp_path)
    refuses(capsys, ["evaluate", "--dictionary", str(shared_dictionary), "--out", str(tmp_path / "e")],
            "pass --model FOLDER (its backbone), or --no-splice", shared_dictionary, tmp_path)


def test_an_empty_dictionary_folder(capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    refuses(capsys, ["evaluate", "--dictionary", str(empty), "--no-splice"], "holds no dictionary (it is empty)",
            tmp_path)
    refuses(capsys, ["evaluate", "--dictionary", str(tmp_path / "absent"), "--no-splice"], "no dictionary folder at",
            tmp_path)


@pytest.mark.parametrize("damage, pattern", [
    ("weights", "differs from the sha256 its sidecar records"),
    ("config", "lacks SAELens' cfg.json"),
    ("sidecar", "is damaged (not JSON"),
    ("format", "is not a dictionary sidecar of this version"),
])
def test_a_corrupted_dictionary_folder(capsys, shared_dictionary, tmp_path, damage, pattern):
    folder = tmp_path / "copy"
    shutil.copytree(shared_dictionary, folder)
    if damage == "weights":
        data = bytearray((folder / "sae_weights.safetensors").read_bytes())
        data[-5] ^= 0xFF
        (folder / "sae_weights.safetensors").write_bytes(bytes(data))
    elif damage == "config":
        (folder / "cfg.json").unlink()
    elif damage == "sidecar":
        (folder / "sst_interp_dictionary.json").write_text("{not json")
    else:
        sidecar = json.loads((folder / "sst_interp_dictionary.json").read_text())
        (folder / "sst_interp_dictionary.json").write_text(json.dumps({**sidecar, "format_version": 99}))
    refuses(capsys, ["evaluate", "--dictionary", str(folder), "--no-splice", "--out", str(tmp_path / "e")], pattern,
            tmp_path)


def test_an_out_folder_in_use_is_refused_before_training(capsys, planted_run, tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    refuses(capsys, ["train", "--run", str(planted_run), "--layer", "0", "--out", str(used), *QUICK],
            "already exists and is not empty", tmp_path)


def test_settings_that_cannot_train(capsys, planted_run, tmp_path):
    refuses(capsys, ["train", "--run", str(planted_run), "--layer", "0", "--out", str(tmp_path / "d"), *QUICK[:-2],
                     "--k", "9"], "--width (8) must exceed --k (9)", tmp_path)
    refuses(capsys, ["train", "--run", str(planted_run), "--layer", "0", "--holdout", "1", "--out",
                     str(tmp_path / "d")], "--holdout is a fraction", tmp_path)

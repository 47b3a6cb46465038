"""``python -m sst_interp.features attribute`` on the shipped hops organism, with a small shared dictionary of the H
block trained live for 150 steps: its CSV is exactly the table of
:func:`~sst_interp.experiments.feature_attribution.feature_attribution` called with the same arguments, its default
target and foil are the counterfactual's and the clean prompt's answers, and each bad input is one error line with
nothing written. A dictionary of a recorded (tiny HRM-Text) run reruns the model that run names, as exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from sst_interp.cli.features import main
from sst_interp.cli.record import main as record_main
from sst_interp.experiments.feature_attribution import feature_attribution
from sst_interp.experiments.hops_patching import kept_pairs
from sst_interp.experiments.trace import Target
from sst_interp.features.live_train import load_organism, train_live
from sst_interp.features.meta import SIDECAR
from sst_interp.features.options import TrainOptions
from sst_interp.features.splice import load_family_model
from sst_interp.model.generation import GenerationConfig
from sst_interp.organism.task import split_items
from sst_interp.organism.tokenizer import hops_tokenizer
from sst_interp.store import Run
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model
from tests.unit.features.conftest import train

pytestmark = pytest.mark.usefixtures("one_thread")

DEPTH, LAYER = 2, 1


@pytest.fixture(scope="module")
def dictionary(tmp_path_factory) -> Path:
    """A shared dictionary of the H block (layer 1) over iterations 1 and 2 of the organism run at depth 2."""
    out = tmp_path_factory.mktemp("attribute") / "layer1"
    torch.set_num_threads(1)
    train_live(TrainOptions(live="hops-organism", layer=LAYER, layout="shared", questions=100, depth=DEPTH,
                            width=256, k=8, steps=150, batch_size=256, lr=3e-3, device="cpu", out=out))
    return out


@pytest.fixture(scope="module")
def organism():
    model, spec, _ = load_organism("hops-organism")
    return model, spec


@pytest.fixture(scope="module")
def pair(organism):
    """A test question A and its counterfactual B, both answered right at DEPTH, with different answers."""
    model, spec = organism
    return next((a, b) for _, a, b in kept_pairs(model, hops_tokenizer(), split_items(spec, "test", 20), DEPTH)
                if a.answer != b.answer)


def _direct(model, folder: Path, pair, target: str, foil: str, iteration: int, verify: int) -> pd.DataFrame:
    tokenizer = hops_tokenizer()
    clean, counterfactual = (tokenizer(q.prompt)["input_ids"] for q in pair)
    target_id, foil_id = tokenizer.convert_tokens_to_ids([target, foil])
    config = GenerationConfig(max_new_tokens=1, pad_token_id=int(tokenizer.pad_token_id))
    return feature_attribution(model, folder, clean, counterfactual, Target("clean", 0, target_id, ()), DEPTH,
                               config, LAYER, 0, iteration, verify=verify, foil=foil_id)


def _argv(folder: Path, pair, *extra: str) -> list[str]:
    a, b = pair
    return ["attribute", "--dictionary", str(folder), "--clean", a.prompt, "--counterfactual", b.prompt,
            "--device", "cpu", *extra]


def _read(out: Path) -> pd.DataFrame:
    return pd.read_csv(out)


def test_the_csv_is_feature_attribution_called_directly(capsys, dictionary, organism, pair, tmp_path):
    a, b = pair
    out = tmp_path / "table.csv"
    # target and foil swapped against the defaults, so that the flags, not the defaults, are what is compared
    assert main(_argv(dictionary, pair, "--iteration", "1", "--target", a.answer, "--foil", b.answer,
                      "--depth", str(DEPTH), "--verify", "3", "--out", str(out))) == 0
    expected = _direct(organism[0], dictionary, pair, a.answer, b.answer, iteration=1, verify=3)
    assert len(expected) > 4 and expected["real"].notna().sum() == 4  # 3 verified features and the joint patch
    pd.testing.assert_frame_equal(_read(out), expected, check_exact=True)
    printed = capsys.readouterr().out
    assert f"M of the clean prompt: {expected.attrs['clean_metric']:.6g}" in printed
    assert f"logit('{a.answer}') - logit('{b.answer}')" in printed and f"wrote {out}" in printed


def test_the_defaults_are_the_answers_of_the_two_prompts(capsys, dictionary, organism, pair, tmp_path):
    a, b = pair
    out = tmp_path / "table.csv"
    assert main(_argv(dictionary, pair, "--iteration", "2", "--out", str(out))) == 0
    assert f"M = logit('{b.answer}') - logit('{a.answer}')" in capsys.readouterr().out
    expected = _direct(organism[0], dictionary, pair, b.answer, a.answer, iteration=2, verify=5)
    pd.testing.assert_frame_equal(_read(out), expected, check_exact=True)


@pytest.fixture(scope="module")
def hrm_dictionary(tmp_path_factory) -> tuple[Path, Path]:
    """A shared dictionary of layer 1 over iterations 1 and 2 of a recorded tiny HRM-Text run, and the run."""
    root = tmp_path_factory.mktemp("hrm")
    model = save_tiny_model(root / "model", "hrm_text")
    torch.set_num_threads(1)
    assert record_main([*FAST, "--model", str(model), "--depths", "2", "--limit", "6", "--out", str(root / "run")]) == 0
    train(root / "run", root / "d", layer=1, layout="shared", width=64, k=4, steps=50, batch_size=16, buffer=64)
    return root / "d", root / "run"


def test_a_dictionary_of_a_family_run_reruns_the_model_the_run_recorded(hrm_dictionary, tmp_path):
    folder, run = hrm_dictionary
    out = tmp_path / "table.csv"
    prompts = ["What is 2+3?", "What is 2+4?"]
    # the random model answers both prompts alike, so the target and foil are given
    assert main(["attribute", "--dictionary", str(folder), "--iteration", "1", "--clean", prompts[0],
                 "--counterfactual", prompts[1], "--target", "7", "--foil", "5", "--verify", "2", "--device", "cpu",
                 "--out", str(out)]) == 0
    model, tokenizer = load_family_model(Run.open(run), None, "cpu")
    clean, counterfactual = (tokenizer(prompt)["input_ids"] for prompt in prompts)
    vocabulary = tokenizer.get_vocab()
    config = GenerationConfig(max_new_tokens=1, pad_token_id=int(tokenizer.pad_token_id))
    expected = feature_attribution(model, folder, clean, counterfactual, Target("clean", 0, vocabulary["7"], ()), 2,
                                   config, 1, 0, 1, verify=2, foil=vocabulary["5"])
    assert len(expected) > 2 and expected["real"].notna().sum() == 3
    pd.testing.assert_frame_equal(_read(out), expected, check_exact=True)


def _sst_dictionary(dictionary: Path, root: Path) -> Path:
    """The dictionary with a sidecar saying it was trained on an SST run (the SAELens files, which the sidecar's
    hashes cover, unchanged)."""
    folder = root / "sst"
    shutil.copytree(dictionary, folder)
    meta = json.loads((folder / SIDECAR).read_text())
    meta.update(source={}, run="runs/sst", model={"family": "sst", "model": None, "checkpoint_sha256": None})
    (folder / SIDECAR).write_text(json.dumps(meta))
    return folder


@pytest.mark.parametrize("extra, pattern", [
    (["--iteration", "3", "--depth", "3"], "covers iterations [1, 2]"),
    (["--iteration", "3"], "--iteration 3 is outside 1-2"),
    (["--iteration", "1", "--layer", "0"], "trained on layer 1"),
    (["--iteration", "1", "--position", "1"], "beyond the target's position 0"),
    (["--iteration", "1", "--target", "8 7"], "--target '8 7' is 2 tokens"),
    (["--iteration", "1", "--foil", "?d"], "--foil '?d' is 2 tokens"),
    (["--iteration", "1", "--target", "7", "--foil", "7"], "the target and the foil are the same token"),
    (["--iteration", "1", "--verify", "-1"], "--verify must be >= 0"),
], ids=["iteration-not-covered", "iteration-past-depth", "another-layer", "position-past-target",
        "target-not-one-token", "foil-not-one-token", "target-is-foil", "negative-verify"])
def test_bad_input_is_one_error_line_and_writes_nothing(capsys, dictionary, pair, tmp_path, extra, pattern):
    out = tmp_path / "table.csv"
    fails_with_one_error_line(capsys, main, _argv(dictionary, pair, *extra, "--out", str(out)), pattern)
    assert list(tmp_path.iterdir()) == []


def test_a_bad_dictionary_or_output_is_one_error_line(capsys, dictionary, pair, tmp_path):
    out = tmp_path / "table.csv"
    fails_with_one_error_line(capsys, main, _argv(tmp_path / "absent", pair, "--iteration", "1", "--out", str(out)),
                              "no dictionary folder at")
    fails_with_one_error_line(capsys, main, _argv(_sst_dictionary(dictionary, tmp_path), pair, "--iteration", "1",
                                                  "--out", str(out)), "trained on an SST run")
    fails_with_one_error_line(capsys, main, _argv(dictionary, pair, "--iteration", "1", "--out", str(tmp_path)),
                              "is a folder")
    fails_with_one_error_line(capsys, main, _argv(dictionary, pair, "--iteration", "1", "--out",
                                                  str(tmp_path / "missing" / "t.csv")), "does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sst"]

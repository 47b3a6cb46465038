"""Experiment a through its command: a window over every layer in freeze mode is exactly depth 1, each condition is
an ordinary run, and bad input is one error: line with nothing written."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sst_interp import study
from sst_interp.catalogue import lookup
from sst_interp.cli.intervene import main
from sst_interp.experiments.manifest import read_manifest
from sst_interp.experiments.window import window_spec, windows
from sst_interp.store import Run
from tests.unit.conftest import fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _argv(model, out, *extra, mode="sequential"):
    return ["window", "--out", str(out), "--model", str(model), "--demo-preset", "--prompt-mode", mode,
            "--limit", "4", "--batch-size", "2", "--max-new-tokens", "6", "--full-positions", "3", "--top-k", "6",
            "--device", "cpu", "--depth", "3", "--resamples", "200", *extra]


def _fails(capsys, argv, pattern):
    fails_with_one_error_line(capsys, main, argv, pattern)


def test_windows_cover_every_layer():
    assert windows(18, 6, 6) == [tuple(range(0, 6)), tuple(range(6, 12)), tuple(range(12, 18))]
    assert windows(5, 2, 2) == [(0, 1), (2, 3), (3, 4)]  # the last window ends at the top layer
    zero = window_spec((1, 2), 3, "zero").interventions[0]
    assert (zero.site.stream, zero.site.iterations, zero.operation.kind) == ("state_in", (2, 3), "zero")
    freeze = window_spec((1, 2), 3, "freeze").interventions[0]
    assert (freeze.site.stream, freeze.site.iterations, freeze.operation.kind) == ("layer_out", (1, 2), "freeze")


# sequential: position 0 is a one-column pass like the iterations after it, so depth 1 is reproduced bit for bit;
# two_pass: position 0's iteration 1 is the last column of the prompt pass, which rounds differently from a
# one-column pass (the same 1e-6 as alpha 0 vs the backbone), but its carried state is frozen too; none (the demo
# preset's default, issue 30): position 0's iteration 1 reads no state, so the frozen iterations 2..3 read none either
@pytest.mark.parametrize("mode, tolerance", [("sequential", 0.0), ("two_pass", 1e-5), ("none", 1e-5)])
def test_freezing_every_layer_is_depth_one(tmp_path, capsys, mode, tolerance):
    model = save_tiny_model(tmp_path / "model")
    out = tmp_path / "exp"
    assert main(_argv(model, out, "--size", "3", "--stride", "3", "--controls", "none", mode=mode)) == 0
    table = pd.read_parquet(out / "window.parquet").set_index("condition")
    clean, frozen = Run.open(out / "runs" / "clean"), Run.open(out / "runs" / "window-0-2")
    deep = clean.generations().set_index(["question_id", "depth"])
    shallow_tokens = {q: list(t) for q, t in deep.xs(1, level="depth")["token_ids"].items()}
    frozen_tokens = {q: list(t) for q, t in frozen.generations().set_index("question_id")["token_ids"].items()}
    assert frozen_tokens == shallow_tokens
    # iterations 2..3 repeat iteration 1: the recorded states are depth 1's at every iteration
    for one, three in zip(clean.hidden(1), frozen.hidden(3)):
        for iteration in range(3):
            np.testing.assert_allclose(three.values[:, iteration], one.values[:, 0], rtol=0, atol=tolerance)
    # so the window's row is the clean depth-1 row: accuracy, flips, first-token log-prob change
    for column in ("accuracy_pct", "accuracy_change_pp", "broken", "fixed", "logprob_change_mean"):
        assert table.loc["window-0-2", column] == pytest.approx(table.loc["clean depth 1", column], abs=1e-4)
    assert table.loc["clean depth 3", "logprob_change_mean"] == 0.0
    # the same comparison at a later position: the window still reads exactly like depth 1 there
    assert main(_argv(model, out, "--size", "3", "--stride", "3", "--logprob-position", "1", "--controls", "none",
                      mode=mode)) == 0
    later = pd.read_parquet(out / "window.parquet").set_index("condition")
    assert later.loc["window-0-2", "logprob_change_mean"] == pytest.approx(
        later.loc["clean depth 1", "logprob_change_mean"], abs=1e-4)
    assert later.loc["clean depth 1", "logprob_change_mean"] != table.loc["clean depth 1", "logprob_change_mean"]
    assert main(_argv(model, out, "--size", "3", "--stride", "3", "--controls", "none", mode=mode)) == 0  # position 0
    manifest = read_manifest(out, "window")
    assert set(manifest["conditions"]) == {"clean", "window-0-2"}
    assert manifest["conditions"]["window-0-2"]["spec"]["interventions"][0]["operation"]["kind"] == "freeze"
    assert Run.open(out / "runs" / "window-0-2").manifest["intervention"] == manifest["conditions"]["window-0-2"]["spec"]
    # rerunning resumes: nothing is recorded again, the same table comes out
    before = (out / "runs" / "clean" / "manifest.json").read_bytes()
    assert main(_argv(model, out, "--size", "3", "--stride", "3", "--controls", "none", mode=mode)) == 0
    assert (out / "runs" / "clean" / "manifest.json").read_bytes() == before
    pd.testing.assert_frame_equal(pd.read_parquet(out / "window.parquet").set_index("condition"), table)


def test_the_mean_and_resample_controls_are_rows_beside_the_window(tmp_path):
    # issue 30: zero shrinks the residual stream instead of removing the stream; mean and resample give the blend
    # a state of the right scale that is not the question's own, and are recorded beside every window by default
    model = save_tiny_model(tmp_path / "model")
    out = tmp_path / "exp"
    assert main(_argv(model, out, "--size", "3", "--stride", "3")) == 0
    table = pd.read_parquet(out / "window.parquet").set_index("condition")
    assert list(table["mode"]) == ["clean", "clean", "freeze", "mean", "resample"]
    assert list(table.index[2:]) == ["window-0-2", "window-0-2-mean", "window-0-2-resample"]
    manifest = read_manifest(out, "window")
    for name, kind in (("window-0-2-mean", "mean"), ("window-0-2-resample", "resample")):
        rule = manifest["conditions"][name]["spec"]["interventions"][0]
        assert rule["site"] == {"stream": "state_in", "layers": [0, 1, 2], "iterations": [2, 3], "positions": [0, 1, 2]}
        assert rule["operation"]["kind"] == kind and rule["operation"]["depth"] == 3
        assert rule["operation"]["run"] == str(out / "runs" / "clean")
    assert table.loc["window-0-2-resample", "correction"] == table.loc["window-0-2", "correction"] == "holm over 3 cells"
    changes = table["logprob_change_bound_high"]
    # each baseline does something, and something other than the freeze and than each other
    assert abs(changes["window-0-2-mean"]) > 1e-4 and abs(changes["window-0-2-resample"]) > 1e-4
    assert len({round(changes[c], 6) for c in ("window-0-2", "window-0-2-mean", "window-0-2-resample")}) == 3
    # nothing moves before iteration 2: the baselines' iteration-1 states at position 0 are the clean run's
    clean = {block.question_id: block.values for block in Run.open(out / "runs" / "clean").hidden(3)}
    for block in Run.open(out / "runs" / "window-0-2-mean").hidden(3):
        np.testing.assert_array_equal(block.values[0, 0], clean[block.question_id][0, 0])
        assert not np.array_equal(block.values[0, 1], clean[block.question_id][0, 1])


def test_the_reference_baselines_are_refused_for_an_ema_linked_sst():
    from sst_interp.experiments.window import WindowConfig
    from sst_interp.kernels.errors import UsageError

    WindowConfig(depth=3, size=3).check(3, 3, "direct")
    WindowConfig(depth=3, size=3, controls=()).check(3, 3, "ema_linked")
    with pytest.raises(UsageError, match="only under the update 'direct'"):
        WindowConfig(depth=3, size=3).check(3, 3, "ema_linked")


@pytest.mark.parametrize("extra, pattern", [
    (["--controls", "mean,melt"], "--controls must be among freeze, zero, mean, resample, got melt"),
    (["--logprob-position", "3"], "--logprob-position 3 is beyond --full-positions 3"),
    (["--depth", "1"], "--depth must be at least 2"),
    (["--size", "9"], "--size 9 exceeds the model's 3 layers"),
    (["--stride", "0"], "--stride must be at least 1"),
    (["--size", "0"], "--size must be at least 1"),
    (["--mode", "melt"], "invalid choice"),
])
def test_bad_window_flags_write_nothing(tmp_path, capsys, extra, pattern):
    model = save_tiny_model(tmp_path / "model")
    _fails(capsys, _argv(model, tmp_path / "out", *extra), pattern)
    assert not (tmp_path / "out").exists()


def test_bad_trace_and_steer_flags_write_nothing(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "model")
    common = ["--model", str(model), "--demo-preset", "--limit", "2", "--device", "cpu", "--full-positions", "3"]
    _fails(capsys, ["trace", "--out", str(tmp_path / "t"), *common, "--layers", "0,7"], "layers [7] do not exist")
    _fails(capsys, ["trace", "--out", str(tmp_path / "t"), *common, "--positions", "4"], "--full-positions 3")
    _fails(capsys, ["steer", "--out", str(tmp_path / "s"), *common, "--probe", str(tmp_path / "nope")], "no probe at")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    _fails(capsys, ["trace", "--out", str(tmp_path / "busy"), *common], "holds no experiment-*.json")
    assert not (tmp_path / "t").exists() and not (tmp_path / "s").exists()
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["notes.txt"]


def test_the_report_shows_the_experiment_and_refuses_a_folder_without_one(tmp_path, capsys):
    from sst_interp.cli.report import main as report

    model = save_tiny_model(tmp_path / "model")
    out = tmp_path / "exp"
    assert main(_argv(model, out, "--size", "2", "--stride", "1")) == 0
    argv = ["--run", str(out / "runs" / "clean"), "--out", str(tmp_path / "rep"), "--quiet",
            "--only", "tab_intervention_*"]
    assert report([*argv, "--experiment", str(out)]) == 0
    shown = pd.read_csv(tmp_path / "rep" / "tab_intervention_window.csv")
    written = pd.read_csv(out / "window.csv")
    assert list(shown["experiment"].unique()) == ["exp"]
    pd.testing.assert_frame_equal(shown.drop(columns="experiment"), written)
    assert not (tmp_path / "rep" / "tab_intervention_steer.csv").exists()  # skipped: no steer experiment
    # the same table through the registry entry the report stacks: documented columns, the numbers as written
    experiment = study.open_experiment(out)
    support = experiment.available().set_index("label")
    assert support.loc["tab:intervention_window", "available"]  # available() lists canonical keys
    assert "holds no steer experiment" in support.loc["tab:intervention_steer", "reason"]
    tidy = experiment.intervention_window()
    assert list(tidy.columns) == list(lookup("tab_intervention_window").columns)
    pd.testing.assert_frame_equal(tidy.astype({"condition": object, "mode": object}), written, check_dtype=False)
    assert set(written["mode"]) == {"clean", "freeze", "mean", "resample"}
    assert any("window" in note for note in experiment.notes("tab_intervention_window"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        report([*argv, "--out", str(tmp_path / "rep2"), "--experiment", str(tmp_path / "model")])
    assert info.value.code == 2 and "holds no experiment-*.json" in capsys.readouterr().err
    assert not (tmp_path / "rep2").exists()

"""record --intervention: the intervened run is an ordinary run (analyses read it), the spec and the runs it patches
from are part of its identity, and bad specs are one error: line before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sst_interp import study
from sst_interp.cli.record import main
from sst_interp.store import Run
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _argv(model, out, *extra):
    return FAST + ["--model", str(model), "--out", str(out), "--depths", "1,2", "--limit", "3", "--batch-size", "2",
                   "--demo-preset", "--full-positions", "5", *extra]


def _fails(capsys, argv, pattern):
    fails_with_one_error_line(capsys, main, argv, pattern)


def test_an_intervened_record_is_an_ordinary_run_and_part_of_its_identity(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "model")
    main(_argv(model, tmp_path / "clean"))
    spec = tmp_path / "zero.yaml"
    spec.write_text("interventions:\n  - site: {stream: layer_out, iterations: [2], positions: [0, 1]}\n"
                    "    operation: {kind: zero}\n")
    main(_argv(model, tmp_path / "zeroed", "--intervention", str(spec)))
    run = Run.open(tmp_path / "zeroed")
    assert run.manifest["intervention"] == {"interventions": [
        {"site": {"stream": "layer_out", "iterations": [2], "positions": [0, 1]}, "operation": {"kind": "zero",
                                                                                             "scale": 1.0}}]}
    clean = Run.open(tmp_path / "clean")
    # depth 1 never reaches iteration 2: identical to the clean run; depth 2 records the zeroed outputs
    for left, right in zip(clean.hidden(1), run.hidden(1)):
        np.testing.assert_array_equal(left.values, right.values)
    block = next(iter(run.hidden(2)))
    assert not block.values[0, 1].any() and block.values[0, 0].any()  # position 0: iteration 2 zeroed, 1 not
    effect = study.open(tmp_path / "zeroed").intervention_effect(tmp_path / "clean").set_index("depth")
    assert effect.loc[1, "broken"] == effect.loc[1, "fixed"] == 0
    assert effect.loc[1, "first_token_logprob_change_mean"] == 0.0
    study.open(tmp_path / "zeroed").available()  # every analysis reads it as any other run
    # the identity: the same --out without the intervention, or with another spec, is refused
    _fails(capsys, _argv(model, tmp_path / "zeroed"), "")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"interventions": [{"site": {"stream": "alpha"},
                                                    "operation": {"kind": "set_alpha", "value": 0}}]}))
    _fails(capsys, _argv(model, tmp_path / "zeroed", "--intervention", str(other)), "")


@pytest.mark.parametrize("text, pattern", [
    ('{"interventions": [{"site": {"stream": "residual"}, "operation": {"kind": "zero"}}]}',
     "unknown intervention stream 'residual'"),
    ('{"interventions": [{"site": {"stream": "layer_out", "layers": [9]}, "operation": {"kind": "zero"}}]}',
     "layers [9] do not exist in a model with 3 layers"),
    ('{"interventions": [{"site": {"stream": "layer_out"}, "operation": {"kind": "patch", "run": "/nonexistent"}}]}',
     "/nonexistent"),
    ("{not json", "not a valid spec file"),
])
def test_bad_specs_are_refused_before_anything_is_written(tmp_path, capsys, text, pattern):
    model = save_tiny_model(tmp_path / "model")
    spec = tmp_path / "spec.json"
    spec.write_text(text)
    _fails(capsys, _argv(model, tmp_path / "out", "--intervention", str(spec)), pattern)
    assert not (tmp_path / "out").exists()

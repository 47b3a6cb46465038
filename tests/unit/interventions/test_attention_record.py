"""``record --intervention`` with an attention rule, on an SST and a looped family: the run records the pattern the
layer used (with ``--attention``), and a head or layer the model lacks or a key outside the context is one
``error:`` line, exit 2, nothing written."""

from __future__ import annotations

import json

import pytest

from sst_interp.cli.record import main
from sst_interp.store import Run
from tests.unit.conftest import FAST, fails_with_one_error_line, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _argv(model, out, spec, *extra):
    return FAST + ["--model", str(model), "--out", str(out), "--depths", "2", "--limit", "3", "--batch-size", "2",
                   "--intervention", str(spec), *extra]


def _spec(path, site: dict, operation: dict):
    path.write_text(json.dumps({"interventions": [{"site": {"stream": "attention", **site}, "operation": operation}]}))
    return path


@pytest.mark.parametrize("family", ["gemma3", "hrm_text"])
def test_a_recorded_run_holds_the_pattern_the_intervention_set(tmp_path, family):
    model = save_tiny_model(tmp_path / "model", family)
    # layer 2: Gemma 3's full-attention layer (a sliding layer's query does not see key 1: test_attention_patch.py)
    spec = _spec(tmp_path / "set.json", {"layers": [2], "heads": [0], "positions": [0], "iterations": [2]},
                 {"kind": "set", "attend_to": [1]})
    extra = ("--demo-preset",) if family == "gemma3" else ()
    assert main(_argv(model, tmp_path / "run", spec, "--attention", "2:0", *extra)) == 0
    run = Run.open(tmp_path / "run")
    assert run.manifest["intervention"]["interventions"][0]["operation"]["attend_to"] == [1]
    attention = run.attention(2)
    site = attention[(attention["position"] == 0) & (attention["iteration"] == 2)]
    assert site["question_id"].nunique() == 3  # every question, whatever its prompt's length (left padding)
    for _, rows in site.groupby("question_id"):
        assert rows.set_index("key_position")["weight"].to_dict() == {k: float(k == 1) for k in rows["key_position"]}
    before = attention[(attention["position"] == 0) & (attention["iteration"] == 1)]
    assert (before.groupby("question_id")["weight"].max() < 1).all()  # iteration 1 attends as it did


@pytest.mark.parametrize("family", ["gemma3", "hrm_text"])
@pytest.mark.parametrize("site, operation, pattern", [
    ({"heads": [5]}, {"kind": "uniform"}, "head 5 does not exist; the attention of the layers it names has 2 heads"),
    ({"layers": [9]}, {"kind": "uniform"}, "layers [9] do not exist"),
    ({"positions": [1]}, {"kind": "set", "attend_to": [3, 500]}, "key positions [500] lie outside the context"),
])
def test_a_head_layer_or_key_the_model_lacks_is_one_error_line(tmp_path, capsys, family, site, operation, pattern):
    model = save_tiny_model(tmp_path / "model", family)
    spec = _spec(tmp_path / "bad.json", site, operation)
    fails_with_one_error_line(capsys, main, _argv(model, tmp_path / "out", spec), pattern)
    assert not (tmp_path / "out").exists()

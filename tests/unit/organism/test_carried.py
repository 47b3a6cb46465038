"""An organism carries its task: ``--questions hops`` asks a named organism the spec it was trained on, a different
spec given explicitly is used with one stderr line, and the organism's tokenizer refuses text it cannot encode (one
``error:`` line, exit 2, nothing written) instead of mapping it to ``<pad>``."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from sst_interp.checkpoints import NAMED_MODELS, resolve_model
from sst_interp.cli.generate import main as generate_main
from sst_interp.cli.record import main as record_main
from sst_interp.kernels.errors import UsageError
from sst_interp.model.testing import char_tokenizer
from sst_interp.organism.carried import ORGANISM_FILE, task_source_options, trained_spec
from sst_interp.organism.task import HopsSpec
from sst_interp.organism.tokenizer import check_organism_text, counted_query_excess, hops_tokenizer, unknown_pieces
from sst_interp.store import Run
from tests.unit.conftest import fails_with_one_error_line

#: the spec each named organism was trained on, as its docs state it (docs/organism.md)
TRAINED_BINDINGS = {"hops-organism": 8, "hops-sst-backbone": 10, "hops-overthink": 10}
#: exact-match counts of hops-sst on the first 48 test questions of its 10-binding task, per hop count (the shipped
#: subset counts of tests/unit/organism/test_shipped_organism.py, there computed from the weights directly)
SST_SUBSET_COUNTS = {1: 8, 2: 8, 3: 6, 4: 1, 5: 4, 6: 4}


@pytest.mark.parametrize("name", sorted(NAMED_MODELS))
def test_every_named_organism_declares_the_spec_it_was_trained_on(name):
    spec = trained_spec(resolve_model(name))
    assert spec is not None and spec.bindings == TRAINED_BINDINGS[name]
    kept = json.loads((Path(resolve_model(name)) / ORGANISM_FILE).read_text())
    assert spec.bindings == kept["train"]["bindings"] and spec.max_hops == kept["train"]["max_hops"]


def test_the_trained_spec_fills_what_the_source_options_leave_open(tmp_path):
    folder = resolve_model("hops-sst-backbone")
    options, note = task_source_options("hops", folder, {"n": 12, "split": "validation"})
    assert options == {**asdict(HopsSpec(bindings=10)), "n": 12, "split": "validation"} and note is None
    options, note = task_source_options("hops", folder, {"bindings": 10, "chains": 3})  # the same values: no note
    assert options["bindings"] == 10 and note is None
    options, note = task_source_options("hops", folder, {"bindings": 8, "counted": "false"})
    assert options["bindings"] == 8 and note.count("\n") == 0
    assert "bindings=8 (trained: 10)" in note and "counted" not in note  # "false" is the trained False
    # another question set, a folder that is no organism, no model: the options as given
    assert task_source_options("demo", folder, {"n": 3}) == ({"n": 3}, None)
    assert task_source_options("hops", tmp_path, {"n": 3}) == ({"n": 3}, None)
    assert task_source_options("hops", None, {}) == ({}, None)


def test_an_unreadable_organism_file_is_a_usage_error(tmp_path):
    (tmp_path / ORGANISM_FILE).write_text("{not json")
    with pytest.raises(UsageError, match="not a readable organism file"):
        trained_spec(tmp_path)
    (tmp_path / ORGANISM_FILE).write_text(json.dumps({"task": {"bindings": 8, "colour": "red"}}))
    with pytest.raises(UsageError, match="colour"):
        trained_spec(tmp_path)


@pytest.mark.usefixtures("one_thread")
def test_record_asks_the_sst_organism_its_own_spec_and_reproduces_its_counts(tmp_path, capsys):
    out = tmp_path / "run"
    assert record_main(["--model", "hops-sst-backbone", "--checkpoint", "hops-sst", "--questions", "hops",
                        "--source-option", "n=48", "--depths", "1", "--device", "cpu", "--out", str(out)]) == 0
    assert "differs" not in capsys.readouterr().err
    run = Run.open(out)
    questions = run.questions().set_index("question_id")
    assert {len(prompt.split()) - 1 for prompt in questions["prompt"]} == {10}  # 10 bindings, then the query
    generations = run.generations().set_index("question_id")
    hops = questions["metadata"].map(lambda m: (json.loads(m) if isinstance(m, str) else m)["hops"])
    counts = generations["correct"].groupby(hops.reindex(generations.index)).sum()
    assert counts.to_dict() == SST_SUBSET_COUNTS


@pytest.mark.usefixtures("one_thread")
def test_a_spec_other_than_the_training_one_is_used_with_one_line_on_stderr(tmp_path, capsys):
    out = tmp_path / "run"
    assert record_main(["--model", "hops-sst-backbone", "--checkpoint", "hops-sst", "--questions", "hops",
                        "--source-option", "n=2", "--source-option", "bindings=8", "--depths", "1", "--device", "cpu",
                        "--out", str(out)]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "differs" in line]
    assert len(notes) == 1 and "bindings=8 (trained: 10)" in notes[0]
    assert {len(prompt.split()) - 1 for prompt in Run.open(out).questions()["prompt"]} == {8}


@pytest.mark.parametrize("flags, phrase", [
    (["--source-option", "bindings=27"], "at most 26 variables exist"),  # more variables than the letters a-z
    (["--source-option", "counted=true", "--source-option", "max_hops=10", "--source-option", "bindings=14"],
     "states its count in one digit"),  # a two-digit count is two tokens, not the one count token
    (["--source-option", "counted=maybe"], "counted='maybe': give true or false"),
])
def test_a_hops_spec_the_organism_cannot_encode_is_one_error_line(tmp_path, capsys, flags, phrase):
    out = tmp_path / "run"
    fails_with_one_error_line(capsys, record_main, ["--model", "hops-organism", "--questions", "hops", *flags,
                                                    "--depths", "1", "--device", "cpu", "--out", str(out)], phrase)
    assert not out.exists()


def test_the_organism_tokenizer_check_names_what_it_cannot_encode():
    assert unknown_pieces("c=b a=7 b=a ?c") == [] and unknown_pieces("c=b b=7 ?2c") == []
    assert unknown_pieces("C=b a=7 ?C") == [("C=b", "C"), ("C=b", "="), ("?C", "C")]
    assert unknown_pieces("c= b ?c") == [("c=", "=")]  # a space inside a binding
    assert counted_query_excess("c=b b=a a=7 ?3c") is None and counted_query_excess("c=b ?c") is None
    assert counted_query_excess("c=b b=7 ?3c") == ("?3c", 3, 2)
    assert counted_query_excess("c=b b=a a=x ?3c") is None  # a=x: x is bound nowhere, the chain holds 3
    assert counted_query_excess("c=b b=c ?5c") is None  # a loop never ends
    check_organism_text(char_tokenizer(), "Anything at all")  # another tokenizer: nothing to check
    with pytest.raises(UsageError, match="'A'"):
        check_organism_text(hops_tokenizer(), "c=b ?A")


@pytest.mark.parametrize("prompt, phrase", [
    ("C=b a=7 b=a ?C", "has 'C' (in 'C=b')"),  # a capital letter (the tokenizer would make it <pad>)
    ("c= b a=7 b=a ?c", "has '=' (in 'c=')"),  # a space inside a binding
    ("c=b b=7 ?3c", "asks ?3c, 3 hops, but the chain of 'c' in it has 2 bindings"),  # a counted query too long
])
def test_generate_refuses_a_prompt_the_organism_cannot_encode(capsys, prompt, phrase):
    fails_with_one_error_line(capsys, generate_main, ["--model", "hops-sst-backbone", "--checkpoint", "hops-sst",
                                                      "--prompt", prompt, "--depths", "1", "--device", "cpu"], phrase)
    assert capsys.readouterr().out == ""


def test_record_refuses_questions_the_organism_cannot_encode(tmp_path, capsys):
    out = tmp_path / "run"
    fails_with_one_error_line(capsys, record_main, ["--model", "hops-organism", "--questions", "demo", "--limit", "1",
                                                    "--depths", "1", "--device", "cpu", "--out", str(out)],
                              "which the hops organism's tokenizer cannot encode")
    assert not out.exists()

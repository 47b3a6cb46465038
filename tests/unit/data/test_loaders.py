"""GSM8K, MATH-500 and HumanEval loaders, path lookup, the registry and its errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from sst_interp.data import data_file, files, load_questions
from sst_interp.data.loaders import gsm8k_reference
from sst_interp.kernels.errors import UsageError


def test_gsm8k_fixture_references_drop_commas_keep_signs(fixtures: Path) -> None:
    questions = load_questions("gsm8k", fixtures / "gsm8k_tiny.jsonl")
    assert [q.reference for q in questions] == ["1234", "-5", "4"]
    assert [q.question_id for q in questions] == ["gsm8k-test-0000", "gsm8k-test-0001", "gsm8k-test-0002"]
    assert questions[0].prompt.endswith("How many hens are there now?\nAnswer:")
    assert questions[0].metadata["solution"].endswith("#### 1,234")
    assert gsm8k_reference("work\n#### 7") == "7"
    with pytest.raises(UsageError, match="####"):
        gsm8k_reference("no final line")


def test_math500_fixture(fixtures: Path) -> None:
    questions = load_questions("math500", fixtures / "math500_tiny.jsonl")
    assert [q.question_id for q in questions] == ["tiny/prealgebra/1.json", "tiny/algebra/2.json"]
    assert questions[0].reference == "\\frac{3}{4}"
    assert questions[1].metadata["level"] == 2 and questions[1].metadata["subject"] == "Algebra"


def test_humaneval_fixture_reference_is_check_code(fixtures: Path) -> None:
    questions = load_questions("humaneval", fixtures / "humaneval_tiny.jsonl.gz")
    task = questions[0]
    assert task.question_id == "Tiny/0"
    assert task.prompt.startswith("def add_one(x: int) -> int:")
    assert task.reference.rstrip().endswith("check(add_one)")
    assert "def check(candidate):" in task.reference
    assert task.metadata["entry_point"] == "add_one"
    assert task.metadata["canonical_solution"] == "    return x + 1\n"


def test_folder_layout_and_data_dir_env(fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gsm8k").mkdir()
    shutil.copy(fixtures / "gsm8k_tiny.jsonl", tmp_path / "gsm8k" / "test.jsonl")
    assert len(load_questions("gsm8k", tmp_path)) == 3  # folder with the shared layout
    assert len(load_questions("gsm8k", tmp_path / "gsm8k")) == 3  # folder holding the bare file
    monkeypatch.setenv("SST_INTERP_DATA_DIR", str(tmp_path))
    assert len(load_questions("gsm8k")) == 3
    with pytest.raises(UsageError, match="math500/test.jsonl"):
        load_questions("math500")


def test_offline_hub_download_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def offline(**kwargs):
        calls.append(kwargs)
        raise OSError("network unreachable")

    monkeypatch.setattr("sst_interp.data.files.hf_hub_download", offline)
    # Online as far as the pre-check can tell (the test session itself runs with HF_HUB_OFFLINE=1).
    monkeypatch.setattr("sst_interp.data.files.hub_unreachable_reason", lambda: None)
    with pytest.raises(UsageError, match="could not download openai/gsm8k.*pass --data PATH"):
        load_questions("gsm8k")
    assert calls == [
        {"repo_id": "openai/gsm8k", "filename": "main/test-00000-of-00001.parquet", "repo_type": "dataset"}
    ]


def test_hub_parquet_copy_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "test.parquet"
    pq.write_table(pa.table({"question": ["Q?"], "answer": ["x\n#### 2,000"]}), parquet)
    monkeypatch.setattr(files, "_download", lambda source, hub, expected: parquet)
    questions = load_questions("gsm8k")
    assert [q.reference for q in questions] == ["2000"]


def test_missing_and_unreadable_files_name_path_and_format(fixtures: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nothing.jsonl"
    with pytest.raises(UsageError, match=f"{missing}.*does not exist.*GSM8K JSONL"):
        load_questions("gsm8k", missing)
    with pytest.raises(UsageError, match="bad.jsonl: line 2 is not JSON.*GSM8K JSONL"):
        load_questions("gsm8k", fixtures / "bad.jsonl")
    with pytest.raises(UsageError, match="lacks keys \\['answer'\\]"):
        wrong = tmp_path / "wrong.jsonl"
        wrong.write_text(json.dumps({"question": "q"}) + "\n")
        load_questions("gsm8k", wrong)
    with pytest.raises(UsageError, match="cannot read.*HumanEval"):
        not_gzip = tmp_path / "HumanEval.jsonl.gz"
        not_gzip.write_text("plain text")
        load_questions("humaneval", not_gzip)
    with pytest.raises(UsageError, match="holds neither"):
        load_questions("math500", tmp_path)


def test_registry_errors_and_selection(fixtures: Path) -> None:
    with pytest.raises(UsageError, match="unknown question set 'mmlu'; known: demo, gsm8k, gpqa, math500, humaneval"):
        load_questions("mmlu")
    with pytest.raises(UsageError, match="no options \\['subset'\\]"):
        load_questions("gsm8k", fixtures / "gsm8k_tiny.jsonl", subset="x")
    with pytest.raises(UsageError, match="split"):
        load_questions("gsm8k", fixtures / "gsm8k_tiny.jsonl", split="dev")
    chosen = load_questions("gsm8k", fixtures / "gsm8k_tiny.jsonl", ids=["gsm8k-test-0002"], limit=5)
    assert [q.reference for q in chosen] == ["4"]
    with pytest.raises(UsageError, match="unknown question ids 'gsm8k-test-0009'"):
        load_questions("gsm8k", fixtures / "gsm8k_tiny.jsonl", ids=["gsm8k-test-0009"])


@pytest.mark.parametrize(("name", "rows"), [("gsm8k", 1319), ("math500", 500), ("humaneval", 164)])
def test_real_files_row_counts(shared_data: Path, name: str, rows: int) -> None:
    questions = load_questions(name, shared_data)
    assert len(questions) == rows
    assert len({q.question_id for q in questions}) == rows
    assert all(q.reference for q in questions)


def test_real_gsm8k_train_and_first_reference(shared_data: Path) -> None:
    assert len(load_questions("gsm8k", shared_data, split="train")) == 7473
    first = load_questions("gsm8k", shared_data, limit=1)[0]
    assert first.reference == "18"  # "... #### 18" in the first test row
    references = [q.reference for q in load_questions("gsm8k", shared_data)]
    assert all("," not in r for r in references)
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", r) for r in references), "every reference is a plain number"


@pytest.mark.parametrize(("name", "rows"), [("gsm8k", 32), ("math500", 24), ("humaneval", 24)])
def test_fixture_files_read_like_the_full_files(benchmark_fixtures: Path, name: str, rows: int) -> None:
    """The real first rows in tests/data/benchmarks: same loader, same first reference as the full file."""
    questions = load_questions(name, benchmark_fixtures)
    assert len(questions) == rows == len({q.question_id for q in questions})
    assert all(q.reference for q in questions)
    if name == "gsm8k":
        assert questions[0].reference == "18"
        assert len(load_questions("gsm8k", benchmark_fixtures, split="train")) == 48


def test_real_math500_levels(shared_data: Path) -> None:
    questions = load_questions("math500", shared_data)
    assert {q.metadata["level"] for q in questions} == {1, 2, 3, 4, 5}


def test_data_file_names_what_load_questions_reads(fixtures: Path, tmp_path: Path) -> None:
    assert data_file("demo") is None
    assert data_file("gsm8k", fixtures / "gsm8k_tiny.jsonl") == fixtures / "gsm8k_tiny.jsonl"
    (tmp_path / "gpqa").mkdir()
    shutil.copy(fixtures / "gpqa_tiny.csv", tmp_path / "gpqa" / "dataset.zip")  # a path check only
    assert data_file("gpqa", tmp_path, subset="main", password="x") == tmp_path / "gpqa" / "dataset.zip"
    with pytest.raises(UsageError, match="known"):
        data_file("mmlu")

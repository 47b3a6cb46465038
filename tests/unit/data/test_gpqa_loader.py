"""GPQA: in-memory zip reading, deterministic option shuffling, letters pointing at the correct answer.

The real-file tests compare against the zip's CSV in memory and never print question text.
"""

from __future__ import annotations

import collections
import csv
import hashlib
import io
import random
import zipfile
from pathlib import Path

import pytest
from scipy.stats import chisquare

from sst_interp.data import grade, load_questions
from sst_interp.data.gpqa import GPQA_PASSWORD, option_order
from sst_interp.kernels.errors import UsageError


def test_option_order_is_the_documented_seeded_shuffle() -> None:
    record_id = "recExample123"
    seed = int.from_bytes(hashlib.sha256(record_id.encode("utf-8")).digest()[:8], "big")
    expected = [0, 1, 2, 3]
    random.Random(seed).shuffle(expected)
    assert option_order(record_id) == expected
    assert sorted(option_order(record_id)) == [0, 1, 2, 3]
    orders = {tuple(option_order(f"rec{i}")) for i in range(200)}
    assert len(orders) > 12  # many of the 24 permutations occur


def test_fixture_csv_letters_point_at_correct_answer(fixtures: Path) -> None:
    questions = load_questions("gpqa", fixtures / "gpqa_tiny.csv")
    correct = {"recTiny0001": "green", "recTiny0002": "8", "recTiny0003": "100", "recTiny0004": "Mercury"}
    assert [q.question_id for q in questions] == list(correct)
    for q in questions:
        assert q.choices["ABCD".index(q.reference)] == correct[q.question_id]
        assert q.metadata["option_order"] == option_order(q.question_id)
        assert sorted(q.choices) == sorted(set(q.choices))
        for letter, choice in zip("ABCD", q.choices):
            assert f"\n{letter}) {choice}\n" in q.prompt
        assert grade(q, f" {q.reference}) {correct[q.question_id]}").correct
    assert "Assume ordinary pigments." in questions[0].prompt  # multi-line field kept whole
    assert questions[0].metadata["subdomain"] == "Art"


def test_unknown_and_experts_subsets_are_refused(fixtures: Path) -> None:
    with pytest.raises(UsageError, match="validators"):
        load_questions("gpqa", fixtures / "gpqa_tiny.csv", subset="experts")
    with pytest.raises(UsageError, match="unknown GPQA subset"):
        load_questions("gpqa", fixtures / "gpqa_tiny.csv", subset="platinum")
    with pytest.raises(UsageError, match="lacks GPQA columns"):
        load_questions("gpqa", fixtures / "math500_tiny.jsonl")


def _zip_rows(zip_path: Path, subset: str) -> dict[str, dict[str, str]]:
    with zipfile.ZipFile(zip_path) as archive:
        text = archive.read(f"dataset/gpqa_{subset}.csv", pwd=GPQA_PASSWORD.encode()).decode("utf-8-sig")
    return {row["Record ID"].strip(): row for row in csv.DictReader(io.StringIO(text, newline=""))}


def test_real_diamond_is_deterministic_correct_and_balanced(shared_data: Path) -> None:
    zip_path = shared_data / "gpqa" / "dataset.zip"
    first = load_questions("gpqa", zip_path)
    second = load_questions("gpqa", shared_data)
    assert len(first) == 198
    assert [q.reference for q in first] == [q.reference for q in second]
    assert [q.choices for q in first] == [q.choices for q in second]
    rows = _zip_rows(zip_path, "diamond")
    wrong = [
        q.question_id
        for q in first
        if q.choices["ABCD".index(q.reference)] != rows[q.question_id]["Correct Answer"].strip()
    ]
    assert wrong == [], "letters not pointing at the correct answer (ids only)"
    counts = collections.Counter(q.reference for q in first)
    assert set(counts) == set("ABCD")
    assert chisquare([counts[letter] for letter in "ABCD"]).pvalue > 0.05
    assert all(q.metadata["subset"] == "diamond" for q in first)


def test_real_main_subset_size(shared_data: Path) -> None:
    assert len(load_questions("gpqa", shared_data, subset="main")) == 448


def test_wrong_password_is_a_usage_error(shared_data: Path) -> None:
    with pytest.raises(UsageError, match="wrong password"):
        load_questions("gpqa", shared_data, password="not-the-password")

"""``python -m sst_interp.organism validate`` on bad input: one ``error:`` line, exit 2, no output folder."""

from __future__ import annotations

import pytest

from sst_interp.cli.organism import main as organism_main
from tests.unit.conftest import fails_with_one_error_line, save_tiny_model


def test_a_folder_that_is_not_a_run_is_refused(tmp_path, capsys):
    out = tmp_path / "validation"
    fails_with_one_error_line(capsys, organism_main, ["validate", "--run", str(tmp_path), "--out", str(out)],
                              "is not a run directory (no manifest.json)")
    assert not out.exists()


@pytest.mark.parametrize("flags, pattern", [(["--folds", "1"], "--folds at least 2"),
                                            (["--patch-questions", "0"], "--table-questions must be at least 1"),
                                            (["--patch-pairs", "0"], "--patch-pairs, --attribution-questions"),
                                            (["--attribution-questions", "0"], "must be at least 1")])
def test_sizes_that_cannot_run_are_refused(tmp_path, capsys, flags, pattern):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text("{}")
    out = tmp_path / "validation"
    fails_with_one_error_line(capsys, organism_main, ["validate", "--run", str(tmp_path / "run"), "--out", str(out),
                                                      *flags], pattern)
    assert not out.exists()


def test_a_model_that_is_not_an_organism_is_refused(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text("{}")
    model = save_tiny_model(tmp_path / "hrm", "hrm_text")
    out = tmp_path / "validation"
    fails_with_one_error_line(capsys, organism_main, ["validate", "--run", str(tmp_path / "run"), "--out", str(out),
                                                      "--model", str(model)], "is not an organism folder")
    assert not out.exists()

"""A recording that does not fit on the disk is refused before anything is written, unless the user insists."""

from __future__ import annotations

import pytest

from sst_interp.cli.record import main
from sst_interp.store import Run
from tests.unit.conftest import FAST, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_run_larger_than_the_free_space_is_refused_unless_allowed(tmp_path, monkeypatch, capsys):
    model = save_tiny_model(tmp_path / "model")
    monkeypatch.setattr("sst_interp.store.space._free", lambda out: 1000)  # 1 kB free
    out = tmp_path / "run"
    argv = FAST + ["--model", str(model), "--out", str(out), "--depths", "1", "--limit", "2", "--demo-preset"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the model-loading progress bars
    assert err.startswith("error: disk: ~") and "NOT ENOUGH SPACE" in err and "--allow-low-disk" in err
    assert not out.exists()
    main(argv + ["--allow-low-disk"])
    assert Run.open(out).question_ids(1) == ["demo-000", "demo-001"]


def test_resuming_with_another_batch_size_is_refused(tmp_path, capsys):
    """Batch size changes recorded values (left padding), so it is part of the run identity."""
    model = save_tiny_model(tmp_path / "model")
    out = tmp_path / "run"
    argv = FAST + ["--model", str(model), "--out", str(out), "--depths", "1", "--limit", "2", "--demo-preset"]
    main(argv + ["--batch-size", "1"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv + ["--batch-size", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "batch_size" in err
    main(argv + ["--batch-size", "1"])  # the same settings resume

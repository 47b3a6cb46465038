"""Bad inputs to the notebook entry points of :mod:`sst_interp.study`: each is one UsageError line that names what
to pass instead, raised before anything is computed or written."""

from __future__ import annotations

import pytest

from sst_interp import study
from sst_interp.kernels.errors import UsageError


@pytest.mark.parametrize("opener, argument, says", [
    (study.open, "missing", "is not a run directory (no manifest.json); pass the --out of a record run"),
    (study.open, 42, "expected a run directory path or a Run, got int"),
    (study.open_checkpoint, "missing", "is not a folder; pass an SST checkpoint folder"),
    (study.open_experiment, "missing", "is not a folder; pass the --out of python -m sst_interp.intervene"),
    (study.open_training, "missing", "has no train_log.csv; pass a training output folder"),
    (study.open_comparison, ["missing"], "is not a run directory (no manifest.json)"),
])
def test_a_bad_input_is_one_line_naming_the_fix(tmp_path, opener, argument, says):
    if argument == "missing":
        argument = tmp_path / "missing"
    elif argument == ["missing"]:
        argument = [tmp_path / "missing"]
    before = sorted(tmp_path.iterdir())
    with pytest.raises(UsageError) as caught:
        opener(argument)
    message = str(caught.value)
    assert says in message and "\n" not in message, message
    assert sorted(tmp_path.iterdir()) == before  # nothing written

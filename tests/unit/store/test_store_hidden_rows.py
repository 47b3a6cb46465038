"""Run.hidden_rows: a shard file's rows, narrowed to the asked coordinates, hold exactly the values Run.hidden
arranges on its grid (any dtype, row order or filter), only of completed questions, with pages CRC-checked."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from sst_interp.store import CorruptRunError, Run
from tests.unit.store.test_store_hidden_raw import IDS, _bits, _write


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_rows_hold_the_hidden_values_bit_for_bit(tmp_path, run_settings, batch_factory, dtype, shuffle):
    run = _write(tmp_path, run_settings, batch_factory, dtype, shuffle, ragged=True)
    filters = [{}, {"turn": 1}, {"layers": [2]}, {"positions": [1], "iterations": [2]}, {"layers": [0, 2]}]
    for depth in (1, 2):
        blocks = {(b.question_id, b.turn): b for b in run.hidden(depth)}
        for kwargs in filters:
            rows = 0
            for chunk in run.hidden_rows(depth, **kwargs):
                for name, wanted in (("turn", kwargs.get("turn")), ("layer", kwargs.get("layers")),
                                     ("position", kwargs.get("positions")), ("iteration", kwargs.get("iterations"))):
                    if wanted is not None:
                        assert set(getattr(chunk, name)) <= set(np.atleast_1d(wanted))
                for r in range(len(chunk)):
                    block = blocks[(chunk.question_id[r], chunk.turn[r])]
                    cell = block.values[list(block.positions).index(chunk.position[r]),
                                        list(block.iterations).index(chunk.iteration[r]),
                                        list(block.layers).index(chunk.layer[r])]
                    assert np.array_equal(_bits(chunk.values[r]), _bits(cell))
                rows += len(chunk)
            assert rows == _stored_rows(run, depth, kwargs), kwargs  # every stored row of the filter, once


def _stored_rows(run: Run, depth: int, kwargs: dict) -> int:
    """How many stored rows at ``depth`` the filter keeps, counted from the shards with pyarrow alone."""
    frame = pd.concat(pq.read_table(f, columns=["turn", "position", "iteration", "layer"]).to_pandas()
                      for f in (run.path / "hidden" / f"depth={depth}").glob("*.parquet"))
    keep = np.ones(len(frame), dtype=bool)
    for column, flag in (("turn", "turn"), ("position", "positions"), ("iteration", "iterations"),
                         ("layer", "layers")):
        if flag in kwargs:
            keep &= np.isin(frame[column], np.atleast_1d(kwargs[flag]))
    return int(keep.sum())


def test_rows_of_a_question_not_completed_are_left_out(tmp_path, run_settings, batch_factory):
    run = _write(tmp_path, run_settings, batch_factory, "float32", False, ragged=False)
    run._status[2] = [q for q in IDS if q != "q2"]  # as if q2's depth-2 batch had not been committed
    seen = {q for chunk in run.hidden_rows(2) for q in chunk.question_id}
    assert seen == set(IDS) - {"q2"}
    assert {q for chunk in run.hidden_rows(1) for q in chunk.question_id} == set(IDS)


def test_a_damaged_page_is_one_error_naming_the_file(tmp_path, run_settings, batch_factory):
    run = _write(tmp_path, run_settings, batch_factory, "float32", False, ragged=False)
    shard = next((run.path / "hidden" / "depth=2").glob("*.parquet"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the data pages (the footer is at the end)
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptRunError, match=str(shard.name)):
        for _ in Run.open(run.path).hidden_rows(2):
            pass

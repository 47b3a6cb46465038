"""Run.hidden_raw: the values as stored give exactly Run.hidden's numbers (widened, or as magnitudes), whatever the
row order, filters, dtype or gaps in the grid."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.store import Run, RunWriter

IDS = ["q1", "q2", "q3"]


def _write(tmp_path, run_settings, batch_factory, dtype: str, shuffle: bool, ragged: bool):
    path = tmp_path / "run"
    rng = np.random.default_rng(3)
    with RunWriter.create_or_resume(path, run_settings["identity"], run_settings["extra"](dtype)) as writer:
        writer.write_questions(run_settings["questions"](IDS))
        for depth in (1, 2):
            batch = batch_factory(IDS, depth, shuffle=shuffle, turns=2)
            hidden = batch["hidden"]
            values = hidden["values"] * rng.choice([-1.0, 1.0], size=hidden["values"].shape).astype(np.float32)
            values[0, :3] = [np.nan, -np.inf, -0.0]
            values[1, 0] = -np.nan
            hidden["values"] = values
            if ragged and depth == 2:  # q2 lacks (turn 0, position 1, iteration 2, layer 0): a gap in its grid
                gap = (hidden["question_id"] == "q2") & (hidden["turn"] == 0) & (hidden["position"] == 1) & \
                    (hidden["iteration"] == 2) & (hidden["layer"] == 0)
                batch["hidden"] = {k: np.asarray(v)[~gap] for k, v in hidden.items()}
            writer.submit(depth, IDS, **batch)
    return Run.open(path)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("ragged", [False, True])
def test_raw_blocks_give_the_hidden_values_bit_for_bit(tmp_path, run_settings, batch_factory, dtype, shuffle, ragged):
    run = _write(tmp_path, run_settings, batch_factory, dtype, shuffle, ragged)
    filters = [{}, {"turn": 0}, {"layers": [2]}, {"positions": [1]}, {"question_ids": ["q2"], "turn": 0,
                                                                       "layers": [0, 2], "positions": [1]}]
    for depth in (1, 2):
        for kwargs in filters:
            plain = list(run.hidden(depth, **kwargs))
            raw = list(run.hidden_raw(depth, **kwargs))
            assert [(b.question_id, b.turn) for b in raw] == [(b.question_id, b.turn) for b in plain]
            for a, b in zip(plain, raw, strict=True):
                for axis in ("positions", "iterations", "layers"):
                    assert np.array_equal(getattr(a, axis), getattr(b, axis))
                assert b.raw.dtype == (np.uint16 if dtype == "bfloat16" else np.float32)
                assert np.array_equal(_bits(b.values()), _bits(a.values))
                assert np.array_equal(_bits(b.magnitudes()), _bits(np.abs(a.values)))
                last = (slice(None), len(b.iterations) - 1)
                assert np.array_equal(_bits(b.values(last)), _bits(a.values[last]))
                assert np.array_equal(_bits(b.magnitudes(last)), _bits(np.abs(a.values[last])))
                gap = ragged and depth == 2 and b.question_id == "q2" and b.turn == 0 and \
                    0 in b.layers and 1 in b.positions and 2 in b.iterations
                assert b.complete == (not gap)
                assert np.isnan(a.values).all(axis=-1).any() == gap  # the gap is NaN in both


def test_grid_arrange_matches_scatter_in_every_layout():
    import pyarrow as pa

    from sst_interp.store.rows import Grid

    rng = np.random.default_rng(0)
    cells = [(p, i, layer) for p in range(2) for i in (1, 2) for layer in range(3)]
    for order, drop in [("sorted", 0), ("shuffled", 0), ("shuffled", 2)]:
        rows = list(rng.permutation(len(cells))) if order == "shuffled" else list(range(len(cells)))
        rows = rows[drop:]
        coords = np.array([cells[j] for j in rows])
        table = pa.table({"position": coords[:, 0], "iteration": coords[:, 1], "layer": coords[:, 2]})
        values = rng.integers(0, 2 ** 16, size=(len(rows), 5)).astype(np.uint16)
        grid = Grid(table, ("position", "iteration", "layer"), "test")
        assert grid.complete == (drop == 0) and grid.in_order == (order == "sorted")
        assert np.array_equal(grid.arrange(values, 7, np.uint16), grid.scatter(values, 7, np.uint16))

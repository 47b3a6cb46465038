"""RunWriter -> Run: every table round-trips with values at their real coordinates, streamed per question."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run, RunWriter

IDS = ["q1", "q2", "q3"]


def _write(tmp_path, run_settings, batch_factory, dtype="float32", shuffle=False, turns=1):
    path = tmp_path / "run"
    with RunWriter.create_or_resume(path, run_settings["identity"], run_settings["extra"](dtype)) as writer:
        writer.write_questions(run_settings["questions"](IDS))
        for depth in (1, 2):
            # batches submitted in an order different from questions.parquet
            writer.submit(depth, ["q3", "q1"], **batch_factory(["q3", "q1"], depth, shuffle=shuffle, turns=turns))
            writer.submit(depth, ["q2"], **batch_factory(["q2"], depth, shuffle=shuffle, turns=turns))
    return path


@pytest.mark.parametrize("shuffle", [False, True])
def test_hidden_values_come_back_at_their_coordinates(tmp_path, run_settings, batch_factory, planted, shuffle):
    run = Run.open(_write(tmp_path, run_settings, batch_factory, shuffle=shuffle))
    assert run.depths == [1, 2] and run.hidden_size == 8 and run.num_layers == 3 and run.dtype == "float32"
    assert run.question_ids(2) == IDS  # questions.parquet order, not submission order
    blocks = list(run.hidden(2))
    assert [b.question_id for b in blocks] == IDS
    for block in blocks:
        assert block.values.shape == (2, 2, 3, 8)  # [P, I, L, d]
        assert block.positions.tolist() == [0, 1] and block.iterations.tolist() == [1, 2]
        assert block.layers.tolist() == [0, 1, 2]
        for p in range(2):
            for i in (1, 2):
                for layer in range(3):
                    expected = planted(block.question_id, 2, 0, p, i, layer)
                    assert np.array_equal(block.values[p, i - 1, layer], expected)


def test_bfloat16_run_round_trips_bits(tmp_path, run_settings, batch_factory):
    import torch

    path = tmp_path / "run"
    batch = batch_factory(["q1"], 1)
    values = torch.from_numpy(batch["hidden"]["values"]).to(torch.bfloat16)
    values[0, 0] = float("nan")
    values[0, 1] = float("-inf")
    values[0, 2] = 1e-40  # subnormal in bf16
    batch["hidden"]["values"] = values  # a bf16 tensor, as the recorder hands it over
    with RunWriter.create_or_resume(path, run_settings["identity"], run_settings["extra"]("bfloat16")) as writer:
        writer.write_questions(run_settings["questions"](["q1"]))
        writer.submit(1, ["q1"], **batch)
    run = Run.open(path)
    assert run.dtype == "bfloat16"
    assert pq.read_schema(next((path / "hidden" / "depth=1").glob("*.parquet"))).metadata[b"sst_interp.dtype"] \
        == b"bfloat16"
    (block,) = run.hidden(1)
    got = block.values.reshape(-1, 8)  # rows were submitted in (p, i, layer) order
    assert np.array_equal(got.view(np.uint32), values.float().numpy().view(np.uint32))


def test_logits_sketch_gates_round_trip(tmp_path, run_settings, batch_factory):
    run = Run.open(_write(tmp_path, run_settings, batch_factory, turns=2))
    (logit,) = [b for b in run.logits(2, question_ids=["q2"]) if b.turn == 1]
    assert logit.top_ids.shape == (2, 2, 4) and logit.argmax.shape == (2, 2)
    assert logit.top_ids[1, 1].tolist() == [12, 13, 14, 15]  # position 1, iteration 2: 10 * p + i + rank
    assert np.allclose(logit.entropy, [[0.1, 0.2], [0.1, 0.2]])
    assert np.array_equal(logit.tracked_logprobs[:, 1], -2 * np.ones((2, 4)))
    sketch = next(run.sketch(1, question_ids=["q1"]))
    assert sketch.top_indices.shape == (2, 1, 3, 3)
    assert sketch.top_indices[0, 0, 0].tolist() == [7, 6, 5]  # planted values increase along d
    gate = next(run.gates(2, question_ids=["q3"]))
    assert np.allclose(gate.active_fraction[0, :, 2], [0.31, 0.32])
    assert gate.sign_bits.shape == (2, 2, 3, 1)
    assert np.unpackbits(gate.sign_bits[0, 0, 0]).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_filters_and_turns(tmp_path, run_settings, batch_factory, planted):
    run = Run.open(_write(tmp_path, run_settings, batch_factory, turns=2))
    blocks = list(run.hidden(1, question_ids=["q2", "q1"], layers=[2], positions=[1]))
    assert [(b.question_id, b.turn) for b in blocks] == [("q2", 0), ("q2", 1), ("q1", 0), ("q1", 1)]
    assert blocks[1].values.shape == (1, 1, 1, 8)
    assert np.array_equal(blocks[1].values[0, 0, 0], planted("q2", 1, 1, 1, 1, 2))
    only_turn = list(run.hidden(1, turn=1))
    assert {b.turn for b in only_turn} == {1} and len(only_turn) == 3
    with pytest.raises(UsageError, match="not recorded at depth 1"):
        list(run.hidden(1, question_ids=["nope"]))


def test_one_row_group_per_question_and_a_question_reads_one_row_group(tmp_path, run_settings, batch_factory,
                                                                        monkeypatch):
    path = _write(tmp_path, run_settings, batch_factory)
    run = Run.open(path)
    shard = run.manifest["batches"]["1"][0]["shards"]["hidden"]
    meta = pq.read_metadata(path / shard["file"])
    assert shard["question_ids"] == ["q3", "q1"] and meta.num_row_groups == 2
    pf = pq.ParquetFile(path / shard["file"])
    for group, qid in enumerate(shard["question_ids"]):
        assert set(pf.read_row_group(group, columns=["question_id"]).column(0).to_pylist()) == {qid}
    calls = []
    original = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, i, *a, **k: calls.append(i) or original(self, i, *a, **k))
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("whole-shard read"))
    (block,) = run.hidden(1, question_ids=["q1"])
    assert block.question_id == "q1" and calls == [1]


def test_generations_and_questions(tmp_path, run_settings, batch_factory):
    run = Run.open(_write(tmp_path, run_settings, batch_factory))
    gens = run.generations()
    assert len(gens) == 6
    assert sorted(zip(gens.question_id, gens.depth)) == sorted((q, d) for q in IDS for d in (1, 2))
    assert gens.set_index(["question_id", "depth"]).loc[("q2", 1), "correct"]
    assert gens.depth_policy.eq("fixed").all() and (gens.chosen_depth == gens.depth).all()
    assert list(gens.token_ids.iloc[0]) == [1, 2, 3]
    assert run.questions().question_id.tolist() == IDS
    assert run.question_ids() == IDS

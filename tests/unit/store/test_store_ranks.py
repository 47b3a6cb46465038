"""Several writers in one run directory (the multi-process mode of ``torchrun`` recordings): rank 0 opens, the other
ranks join, all commit concurrently under the run's commit lock; no commit is lost, no batch id is reused, and the
run reads, verifies and resumes as a single-process one does."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from sst_interp.store import Run, RunWriter
from sst_interp.store.verify import verify_run

IDS = [f"q{i:02d}" for i in range(24)]


def _record_together(path, run_settings, batch_factory, world: int, depth: int, ids: list[str]) -> None:
    """Rank 0 opens, ranks 1.. join, then every rank submits its share of one-question batches at once."""
    writers = [RunWriter.create_or_resume(path, run_settings["identity"], run_settings["extra"](), world_size=world)]
    writers[0].write_questions(run_settings["questions"](IDS))
    writers += [RunWriter.join(path, run_settings["identity"], run_settings["extra"](), rank, world)
                for rank in range(1, world)]
    start = threading.Barrier(world)
    errors: list[BaseException] = []

    def work(rank: int) -> None:
        try:
            start.wait()
            with writers[rank] as writer:
                for qid in ids[rank::world]:
                    writer.submit(depth, [qid], **batch_factory([qid], depth))
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


@pytest.mark.parametrize("world", [2, 3])
def test_concurrent_ranks_lose_no_commit(tmp_path, run_settings, batch_factory, planted, world):
    path = tmp_path / "run"
    _record_together(path, run_settings, batch_factory, world, 1, IDS)
    run = Run.open(path)
    assert sorted(run.question_ids(1)) == IDS
    batches = run.manifest["batches"]["1"]
    numbers = [b["batch"] for b in batches]
    assert len(numbers) == len(IDS) == len(set(numbers))
    assert run.manifest["next_batch"] == max(numbers) + 1
    gens = run.generations()
    assert sorted(gens.question_id) == IDS and not gens.duplicated(["question_id", "depth"]).any()
    for block in run.hidden(1):  # every row where its question's planted values say it belongs
        np.testing.assert_array_equal(block.values[0, 0, 0], planted(block.question_id, 1, 0, 0, 1, 0))
    report = verify_run(path)
    assert report.ok and not report.strays, (report.damaged, report.strays)


def test_a_multi_process_run_resumes_alone_and_together(tmp_path, run_settings, batch_factory):
    path = tmp_path / "run"
    _record_together(path, run_settings, batch_factory, 2, 1, IDS[:10])
    with RunWriter.create_or_resume(path, run_settings["identity"], run_settings["extra"]()) as writer:
        assert writer.completed(1) == set(IDS[:10])
        writer.submit(1, IDS[10:12], **batch_factory(IDS[10:12], 1))
    _record_together(path, run_settings, batch_factory, 2, 2, IDS)
    run = Run.open(path)
    assert sorted(run.question_ids(1)) == IDS[:12] and sorted(run.question_ids(2)) == IDS
    every = [b["batch"] for batches in run.manifest["batches"].values() for b in batches]
    assert len(every) == len(set(every))
    assert verify_run(path).ok


def test_join_checks_the_run(tmp_path, run_settings):
    path = tmp_path / "run"
    with RunWriter.create_or_resume(path, run_settings["identity"], run_settings["extra"](), world_size=2):
        pass
    with pytest.raises(ValueError, match="rank 0 opens"):
        RunWriter.join(path, run_settings["identity"], run_settings["extra"](), 0, 2)
    with pytest.raises(ValueError, match="outside a world"):
        RunWriter.join(path, run_settings["identity"], run_settings["extra"](), 2, 2)
    with pytest.raises(Exception, match="different identity"):
        RunWriter.join(path, dict(run_settings["identity"], model="other"), run_settings["extra"](), 1, 2)

"""The training stream: held-out questions chosen by a hash (the same on every read), and endless batches of exactly
the asked size drawn from the training questions' states only, with or without rereading the shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sst_interp.features.batches import StateBatches
from sst_interp.features.sites import resolve_site
from sst_interp.features.states import Split, held_out, site_rows
from sst_interp.store import Run


def test_the_held_out_questions_split_the_run_the_same_way_every_time(planted_run: Path):
    ids = np.asarray(Run.open(planted_run).question_ids(2), dtype=object)
    heldout, train = Split("heldout", 0.2, 7).keep(ids), Split("train", 0.2, 7).keep(ids)
    assert not (heldout & train).any() and (heldout | train).all()
    assert 0.1 < heldout.mean() < 0.3  # 250 questions at 0.2
    assert heldout.tolist() == [held_out(q, 0.2, 7) for q in ids]
    assert Split("heldout", 0.2, 8).keep(ids).tolist() != heldout.tolist()  # the seed chooses


@pytest.mark.parametrize("buffer", [65536, 700])  # the training states fit (kept in memory) / do not (reread)
def test_batches_are_endless_exact_and_only_of_training_states(planted_run: Path, buffer: int):
    run = Run.open(planted_run)
    site = resolve_site(run, 0, [1, 2])
    split = Split("train", 0.2, 3)
    states = np.concatenate([p.values for p in site_rows(run, site, split)])
    heldout = np.concatenate([p.values for p in site_rows(run, site, Split("heldout", 0.2, 3))])
    batches = StateBatches(run, site, (1, 2), split, batch_size=96, buffer=buffer, seed=0)
    drawn = [next(batches) for _ in range(3 * len(states) // 96)]  # three passes' worth
    assert all(tuple(b.shape) == (96, 16) for b in drawn)
    assert batches.epochs >= 2
    assert dict(batches.tokens) == {1: len(states) // 2, 2: len(states) // 2}
    known = {row.tobytes() for row in states}
    assert all(row.tobytes() in known for b in drawn for row in b.numpy())
    assert not known & {row.tobytes() for row in heldout}
    first_pass = np.concatenate([b.numpy() for b in drawn])[: len(states) - 96]
    assert len({row.tobytes() for row in first_pass}) > 0.5 * len(first_pass)  # shuffled, not one state repeated

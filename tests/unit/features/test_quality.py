"""The quality table on states whose features are known: a dictionary that is the identity on the positive part
(feature j is active exactly where dimension j is positive), so every number has a value computed by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sst_interp.features.quality import DENSE, reconstruction_quality
from sst_interp.features.states import SiteRows


class ReluIdentity:
    """encode = relu, decode = identity (width = d)."""

    def encode(self, states):
        return torch.relu(torch.as_tensor(states, dtype=torch.float32))

    def decode(self, activations):
        return activations


class _Set:
    """A DictionarySet's surface (meta, layout, one dictionary per iteration) around one dictionary."""

    def __init__(self, dictionary, d, layout):
        self.meta = SimpleNamespace(width=d, d_in=d)
        self.layout = layout
        self._one = dictionary

    def __getitem__(self, iteration):
        return self._one


#: per (iteration, question): the state (4 dimensions). Feature 0 fires everywhere; feature 1 at iteration 1 only
#: (it dies at 2); feature 2 at iteration 2 on q0 and at iteration 3 on q1 (born at 2, disjoint firing sets
#: between 2 and 3); feature 3 never.
STATES = {
    (1, "q0"): [1.0, 2.0, -1.0, -0.5], (1, "q1"): [2.0, 1.0, -2.0, -1.0], (1, "q2"): [0.5, 3.0, -1.0, -2.0],
    (2, "q0"): [1.5, -1.0, 2.0, -0.5], (2, "q1"): [1.0, -0.5, -1.0, -1.0], (2, "q2"): [2.5, -2.0, -3.0, -0.5],
    (3, "q0"): [1.0, -1.0, -1.0, -1.5], (3, "q1"): [3.0, -1.0, 1.0, -1.0], (3, "q2"): [2.0, -3.0, -2.0, -2.0],
}


def site_rows(order: list[tuple[int, str]]) -> SiteRows:
    return SiteRows(question_id=np.array([q for _, q in order], dtype=object), turn=np.zeros(len(order), np.int64),
                    position=np.zeros(len(order), np.int64), iteration=np.array([i for i, _ in order]),
                    values=np.array([STATES[key] for key in order], dtype=np.float32))


def expected_fve(iteration: int) -> float:
    x = np.array([v for (i, _), v in STATES.items() if i == iteration], dtype=np.float64)
    error = ((x - np.maximum(x, 0)) ** 2).sum()
    return 1 - error / ((x - x.mean(axis=0)) ** 2).sum()


def test_the_table_of_a_shared_dictionary_holds_the_hand_values():
    keys = list(STATES)
    # two shard files, the second holding q2 alone: sums and pairs run across files
    parts = [site_rows([k for k in keys if k[1] != "q2"]), site_rows([k for k in keys if k[1] == "q2"][::-1])]
    table = reconstruction_quality(_Set(ReluIdentity(), 4, "shared"), parts, (1, 2, 3)).set_index("iteration")
    assert table["states"].tolist() == [3, 3, 3]
    for i in (1, 2, 3):
        assert table.at[i, "fve"] == pytest.approx(expected_fve(i), rel=1e-12)
    assert table["l0"].tolist() == pytest.approx([2.0, 4 / 3, 4 / 3])
    assert table["dead"].tolist() == [2, 2, 2]  # iteration 1: features 2, 3; 2: 1, 3; 3: 1, 3
    assert table["dead_all"].tolist() == [1, 1, 1]  # feature 3
    assert DENSE < 1 / 3 and table["dense"].tolist() == [2, 2, 2]  # one token in three is already dense
    # 1 -> 2: feature 0 on all three at both (J = 1), feature 1 at 1 only and feature 2 at 2 only (J = 0)
    assert (table.at[1, "jaccard_next"], table.at[1, "shared_next"]) == (pytest.approx(1 / 3), 1)
    # 2 -> 3: feature 0 (J = 1), feature 2 on q0 then q1 (J = 0)
    assert (table.at[2, "jaccard_next"], table.at[2, "shared_next"]) == (0.5, 1)
    assert np.isnan(table.at[3, "jaccard_next"]) and np.isnan(table.at[1, "births"])
    assert (table.at[2, "births"], table.at[2, "deaths"]) == (1, 1)  # feature 2 born, feature 1 died
    assert (table.at[3, "births"], table.at[3, "deaths"]) == (0, 0)


def test_per_iteration_dictionaries_get_no_loop_columns():
    table = reconstruction_quality(_Set(ReluIdentity(), 4, "per-iteration"), [site_rows(list(STATES))], (1, 2, 3))
    assert table[["dead_all", "jaccard_next", "shared_next", "births", "deaths"]].isna().all().all()
    assert table["fve"].tolist() == pytest.approx([expected_fve(i) for i in (1, 2, 3)], rel=1e-12)

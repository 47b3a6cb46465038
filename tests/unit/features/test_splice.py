"""Spliced-in accuracy and loss on a tiny HRM-Text run and a tiny SST run: a reconstruction that is the identity
gives exactly the clean numbers at every iteration (the splice goes through the intervention layer's ``map`` and
changes nothing else), zeroing the state moves the loss, the clean rerun of the SST rebuilt from its run's identity is
the recording (tokens and first-token log-probs), and ``evaluate`` writes the per-iteration table with the splice
columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from sst_interp.cli.features import main
from sst_interp.cli.record import main as record_main
from tests.unit.conftest import FAST, save_tiny_model
from tests.unit.features.conftest import train

pytestmark = pytest.mark.usefixtures("one_thread")


def _recorded(root: Path, family: str, depths: str) -> Path:
    """A run of 6 demo questions recorded from a tiny ``family`` model saved under ``root``."""
    model = save_tiny_model(root / "model", family)
    out = root / "run"
    torch.set_num_threads(1)
    assert record_main([*FAST, "--model", str(model), "--depths", depths, "--limit", "6", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def hrm_run(tmp_path_factory) -> Path:
    return _recorded(tmp_path_factory.mktemp("hrm"), "hrm_text", "2")


class _Identity:
    """A DictionarySet's surface whose reconstruction of every iteration is the state itself."""

    def __getitem__(self, iteration):
        return self

    def reconstruct(self, states: torch.Tensor) -> torch.Tensor:
        return states.clone()


def test_an_identity_reconstruction_splices_in_the_clean_numbers(hrm_run: Path):
    from sst_interp.features.sites import resolve_site
    from sst_interp.features.splice import load_family_model, splice_columns, splice_table
    from sst_interp.store import Run

    run = Run.open(hrm_run)
    site = resolve_site(run, 3, depth=2)
    ids = run.question_ids(2)
    model, tokenizer = load_family_model(run, None, "cpu")
    table = splice_table(run, _Identity(), site, ids, model, tokenizer, batch_size=4)
    assert table[["iteration", "condition"]].values.tolist() == [[0, "clean"], [1, "spliced"], [1, "zero"],
                                                                [2, "spliced"], [2, "zero"]]
    clean = table.iloc[0]
    spliced = table[table.condition == "spliced"]
    assert (spliced["accuracy"] == clean.accuracy).all() and (spliced["loss"] == clean.loss).all()
    # the clean loss is that of the run's own first tokens: small but not zero for a random model
    assert 0 < clean.loss < 20 and (table["questions"] == len(ids)).all()
    zero = table[table.condition == "zero"]
    assert (zero["loss"] != clean.loss).any()
    columns = splice_columns(table).set_index("iteration")
    for iteration in (1, 2):  # (zero - spliced) / (zero - clean): 1 exactly where zeroing costs anything
        gap = columns.at[iteration, "loss_zero"] - columns.at[iteration, "loss_clean"]
        assert columns.at[iteration, "loss_recovered"] == 1.0 if gap > 0 else pd.isna(columns.at[iteration,
                                                                                                "loss_recovered"])


def test_evaluate_writes_the_per_iteration_table_with_the_splice(hrm_run: Path, tmp_path: Path, capsys):
    dictionary = tmp_path / "dictionary"
    train(hrm_run, dictionary, layer=3, layout="shared", steps=20, batch_size=16, width=32, k=4, holdout=0.5,
          buffer=64)
    out = tmp_path / "evaluation"
    assert main(["evaluate", "--dictionary", str(dictionary), "--out", str(out), "--batch-size", "4"]) == 0
    table = pd.read_parquet(out / "quality.parquet")
    assert table["iteration"].tolist() == [1, 2] and (table["layout"] == "shared").all()
    assert {"fve", "l0", "dead", "dense", "jaccard_next", "births", "accuracy_spliced", "loss_zero",
            "loss_recovered"} <= set(table.columns)
    assert pd.read_csv(out / "quality.csv")["iteration"].tolist() == [1, 2]
    assert "accuracy_spliced" in capsys.readouterr().out


@pytest.fixture(scope="module")
def sst_run(tmp_path_factory) -> Path:
    return _recorded(tmp_path_factory.mktemp("sst"), "gemma3", "1,3")


def test_an_sst_run_is_spliced_into_the_sst_its_identity_names(sst_run: Path):
    from sst_interp.features.sites import resolve_site
    from sst_interp.features.splice import load_run_model, splice_columns, splice_table
    from sst_interp.model.sst import SSTModel
    from sst_interp.store import Run

    run = Run.open(sst_run)
    site = resolve_site(run, 1, depth=3)
    ids = run.question_ids(3)
    model, tokenizer = load_run_model(run, None, "cpu")
    assert isinstance(model, SSTModel)
    table = splice_table(run, _Identity(), site, ids, model, tokenizer, batch_size=4)
    clean = table.iloc[0]
    # the clean rerun is the recording: its accuracy, and its loss is -log p of the recorded first token, read from
    # the recorded top-K log-probs of position 0 at the last iteration
    gens = run.generations()
    gens = gens[gens["depth"] == 3].set_index("question_id")
    assert clean.accuracy == gens.loc[ids, "correct"].astype(float).mean()
    recorded = []
    for block in run.logits(3):
        first = int(gens.at[block.question_id, "token_ids"][0])
        top_ids, top_logprobs = block.top_ids[0, -1], block.top_logprobs[0, -1]
        assert first == int(top_ids[0])  # greedy: the emitted token is the top one
        recorded.append(-float(top_logprobs[0]))
    assert clean.loss == pytest.approx(float(np.mean(recorded)), abs=1e-5)
    spliced = table[table.condition == "spliced"]
    assert (spliced["accuracy"] == clean.accuracy).all() and (spliced["loss"] == clean.loss).all()
    zero = table[table.condition == "zero"]
    assert (zero["loss"] != clean.loss).all()  # zeroing a layer's output at any iteration moves the first token
    assert splice_columns(table)["iteration"].tolist() == [1, 2, 3]

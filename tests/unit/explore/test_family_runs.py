"""The explorer on recorded HRM-Text, Inkling-2 Loop, Dory and bring-your-own (the toy Huginn-style model of
``tests/unit/byo``) runs (tiny random models): every view answers, the cells a family never visits are empty (not a
top-k of NaNs), and the per-layer logit lens reads the family's layers through its own norm and head (its top token
at the carried state's layer is the recorded lens argmax); on a bring-your-own run it says in one line why it does not
run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sst_interp.cli.record import main as record_main
from sst_interp.store import Run
from tests.unit.byo import LOOP_FILE, save_toy_huginn
from tests.unit.conftest import FAST, save_tiny_model
from tests.unit.explore.conftest import client_for

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=["hrm_text", "inkling2_loop", "dory", "byo"])
def family_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(request.param)
    torch.set_num_threads(1)
    if request.param == "byo":
        folder, extra = save_toy_huginn(root / "model"), ["--loop", f"{LOOP_FILE}:TOY_HUGINN", "--trust-remote-code"]
    else:
        folder, extra = save_tiny_model(root / "model", request.param), []
    assert record_main([*FAST, "--model", str(folder), "--depths", "1,2", "--limit", "2", "--out",
                        str(root / "run"), *extra]) == 0
    return root / "run"


def _visited(run: Run, depth: int) -> np.ndarray:
    """[depth, L] bool: the family visits layer l at iteration i (the manifest's loop)."""
    counts = run.manifest["loop"]["iterations_per_layer"][str(depth)]
    return np.array([[i <= c for c in counts] for i in range(1, depth + 1)])


def test_family_explorer_serves_every_view_of_a_family_run(family_run: Path) -> None:
    run, client = Run.open(family_run), client_for(family_run)
    assert client.get("/").status_code == 200
    assert client.get("/api/run").json()["depths"] == [1, 2]
    rows = client.get("/api/questions").json()["rows"]
    assert [r["question_id"] for r in rows] == sorted(run.question_ids(2))
    q = rows[0]["question_id"]
    gens = run.generations().set_index(["question_id", "depth"])
    for column in client.get(f"/api/question/{q}").json()["depths"]:
        (turn,) = column["turns"]
        assert [t["id"] for t in turn["tokens"]] == list(gens.loc[(q, column["depth"]), "token_ids"])
    visited = _visited(run, 2)
    both = visited[0] & visited[1]
    for position in (0, 1):
        view = client.get(f"/api/position?q={q}&depth=2&turn=0&pos={position}").json()
        overlap = np.array(view["overlap"], dtype=float)[0]  # iteration 1 vs 2, per layer
        assert (np.isnan(overlap) == ~both).all()
        assert ((overlap >= 0) & (overlap <= 1))[both].all()
        regime = np.array(view["regime"]["per_layer"], dtype=float)  # depth 1 iteration 1 vs depth 2 iteration 2
        assert (np.isnan(regime) == ~both).all()
        block = next(run.hidden(2, [q], positions=[position]))
        expected_norm = np.linalg.norm(block.values[0].astype(np.float64), axis=-1)  # [I, L], NaN where unvisited
        norm = np.array(view["norm"], dtype=float)
        assert (np.isnan(norm) == ~visited).all()
        assert norm[visited] == pytest.approx(expected_norm[visited], rel=1e-5)
    assert client.get(f"/api/token?q={q}&depth=2&turn=0&pos=0").status_code == 200
    assert client.get(f"/api/halting?q={q}").json()["available"] is False  # no --probe given


def test_family_explorer_layer_lens_reads_the_family_head(family_run: Path) -> None:
    run, client = Run.open(family_run), client_for(family_run)
    if run.manifest["identity"].get("loop"):
        # a bring-your-own run: the lens norm is declared in the --loop file and the model is the folder's own code,
        # neither of which the explorer runs (it guessed the decoder's norm, or failed in transformers' words)
        q = run.question_ids(2)[0]
        lens = client.get(f"/api/lens?q={q}&depth=2&turn=0&pos=0").json()
        assert not lens["available"] and lens["message"].startswith("a bring-your-own run (--loop ")
        assert run.manifest["identity"]["loop"] in lens["message"]
        return
    state = run.manifest["loop"]["state_layer"]
    visited = _visited(run, 2)
    for q in run.question_ids(2):
        for position in (0, 1):
            lens = client.get(f"/api/lens?q={q}&depth=2&turn=0&pos={position}").json()
            assert lens["available"], lens
            ids = np.array(lens["token_ids"])
            assert ((ids == -1) == ~visited).all()  # a cell the family never visits has no lens token
            assert all(piece == "\u2205" for row, seen in zip(lens["pieces"], visited)
                       for piece, s in zip(row, seen) if not s)
            # the recorded per-iteration logits are the family's lens on the carried state: the same top token
            block = next(run.logits(2, [q]))
            j = block.positions.tolist().index(position)
            assert ids[:, state].tolist() == block.argmax[j].tolist()

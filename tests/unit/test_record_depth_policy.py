"""`record --depth-policy probe:PATH`: the probe picks, during generation, the depth the offline simulation picks."""

import numpy as np
import pytest
import torch

from sst_interp.probe.io import ProbeMeta, save_probe
from sst_interp.probe.model import HaltingProbe, ProbeConfig
from sst_interp.cli.record import main as record_main
from sst_interp.store import Run
from tests.unit.conftest import FAST, save_tiny_model
from tests.unit.distributed_helpers import finish, torchrun_record

pytestmark = pytest.mark.usefixtures("one_thread")

PROBE_LAYER = 1
I_MAX = 3


def test_probe_policy_at_generation_matches_the_halting_simulation(tmp_path):
    model = save_tiny_model(tmp_path / "tiny", "llama")
    common = [*FAST, "--model", str(model), "--demo-preset", "--limit", "8", "--depths", "1,2,3"]
    record_main([*common, "--out", str(tmp_path / "flat")])
    flat = Run.open(tmp_path / "flat")

    # Position 0's iterations 1..i are the same computation at every depth >= i, so the flat depth-3 run holds the
    # state the policy sees after each iteration.
    states = {b.question_id: b.values[0, :, 0] for b in flat.hidden(I_MAX, layers=[PROBE_LAYER], positions=[0])}
    torch.manual_seed(3)
    probe = HaltingProbe(ProbeConfig(input_size=flat.hidden_size, hidden=10)).eval()
    with torch.no_grad():
        logits = {q: probe(torch.from_numpy(s)).reshape(-1).numpy() for q, s in states.items()}  # [I_MAX] each
    threshold = float(np.median(np.concatenate(list(logits.values()))))
    simulated = {q: next((i + 1 for i, v in enumerate(l) if v > threshold), I_MAX) for q, l in logits.items()}
    assert len(set(simulated.values())) > 1, "the probe should halt at different depths for different questions"

    save_probe(tmp_path / "probe", probe, ProbeMeta(layer=PROBE_LAYER, threshold=threshold, max_depth=I_MAX))
    record_main([*common, "--depth-policy", f"probe:{tmp_path / 'probe'}", "--out", str(tmp_path / "policy")])
    policy_run = Run.open(tmp_path / "policy")
    gens = policy_run.generations()
    chosen = dict(zip(gens["question_id"], gens["chosen_depth"]))
    assert chosen == simulated
    assert all(gens["depth"] == gens["chosen_depth"])
    assert set(gens["depth_policy"]) == {policy_run.manifest["depth_policy"]}
    assert policy_run.manifest["depth_policy"].startswith("probe:")
    # Each question's answer is the flat run's answer at the chosen depth: halting changes nothing else.
    flat_gens = flat.generations().set_index(["question_id", "depth"])
    for row in gens.itertuples():
        assert list(row.token_ids) == list(flat_gens.loc[(row.question_id, row.depth), "token_ids"])

    # Two torchrun processes (each question to one of them) record the same policy run.
    proc = torchrun_record([*common, "--depth-policy", f"probe:{tmp_path / 'probe'}", "--out", str(tmp_path / "two")])
    output = finish(proc)
    assert proc.returncode == 0, output[-3000:]
    two = Run.open(tmp_path / "two").generations().sort_values("question_id")
    assert dict(zip(two["question_id"], two["chosen_depth"])) == simulated
    assert two.token_ids.map(list).tolist() == gens.sort_values("question_id").token_ids.map(list).tolist()


def test_bad_depth_policy_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        record_main([*FAST, "--depth-policy", "probe:/no/such/probe", "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    assert "no such probe" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        record_main([*FAST, "--depth-policy", "adaptive", "--out", str(tmp_path / "y")])

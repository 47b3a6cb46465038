"""`record --depth-policy kl:TAU,max=K` (issue 23): iteration counts and shards recorded exactly, and the live run
equals the offline simulation from a fixed-depth run wherever the simulation claims exactness."""

import numpy as np
import pytest
import torch

from sst_interp.cli.record import main as record_main
from sst_interp.model.halting import parse_position_policy
from sst_interp.probe.policy_simulation import _rule_values, simulate_policy
from sst_interp.store import Run
from tests.unit.conftest import FAST, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

MAX = 3
VOCAB = 128  # the tiny models' vocabulary: --top-k VOCAB keeps the whole distribution (kl is exact)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("policy")
    model = save_tiny_model(root / "tiny")
    common = [*FAST, "--model", str(model), "--demo-preset", "--limit", "6", "--batch-size", "2",
              "--depths", str(MAX), "--top-k", str(VOCAB), "--full-positions", "5", "--max-new-tokens", "5"]
    record_main([*common, "--out", str(root / "flat")])
    return root, common, Run.open(root / "flat")


def _recorded_values(flat, rule):
    """The rule's recorded values at the iterations where exiting is a choice (< MAX), sorted."""
    policy = parse_position_policy(f"{rule}:1,max={MAX}", MAX)
    values = []
    states = {b.question_id: b for b in flat.hidden(MAX, layers=[flat.num_layers - 1])} if rule == "state" else {}
    for block in flat.logits(MAX):
        for p in range(len(block.positions)):
            st = states[block.question_id].values[p, :, 0] if rule == "state" else None
            vals = _rule_values(policy, block, p, st)[rule]
            values.extend(v for v in vals[:MAX - 1] if np.isfinite(v))
    return sorted(set(values))


def _revealing_tau(flat, rule):
    """Of the thresholds between consecutive recorded values, the one whose simulation is exact over the most
    positions while at least two positions exit early: the live run then has to match beyond position 0."""
    values = _recorded_values(flat, rule)
    best = None
    for low, high in zip(values, values[1:]):
        tau = float((low + high) / 2)
        sims = simulate_policy(flat, parse_position_policy(f"{rule}:{tau!r},max={MAX}", MAX))
        early = sum(i < MAX for s in sims for i in s.iterations)
        exact = sum(len(s.iterations) for s in sims)
        if early >= 2 and (best is None or exact > best[0]):
            best = (exact, tau)
    assert best is not None, f"no {rule} threshold makes two positions exit early"
    return best[1]


def _saved_probe(root, flat):
    """A random probe at layer 1 whose threshold is the median of its logits over the flat run's iterations < MAX,
    so it halts some positions early."""
    from sst_interp.probe.io import ProbeMeta, save_probe
    from sst_interp.probe.model import HaltingProbe, ProbeConfig

    torch.manual_seed(5)
    probe = HaltingProbe(ProbeConfig(input_size=flat.hidden_size, hidden=10)).eval()
    with torch.no_grad():
        logits = np.concatenate([probe(torch.from_numpy(b.values[:, :MAX - 1, 0].reshape(-1, flat.hidden_size)))
                                 .reshape(-1).numpy() for b in flat.hidden(MAX, layers=[1])])
    path = root / "probe"
    save_probe(path, probe, ProbeMeta(layer=1, threshold=float(np.median(logits)), max_depth=MAX))
    return path


@pytest.mark.parametrize("rule", ["kl", "entropy", "margin", "state", "probe-pos"])
def test_live_policy_run_equals_the_simulation_where_it_claims_exactness(recorded, rule):
    root, common, flat = recorded
    if rule == "probe-pos":
        text = f"probe-pos:{_saved_probe(root, flat)},max={MAX}"
    else:
        text = f"{rule}:{_revealing_tau(flat, rule)!r},max={MAX}"
    policy = parse_position_policy(text, MAX)
    out = root / f"live-{rule}"
    record_main([*common, "--depth-policy", text, "--out", str(out)])
    live = Run.open(out)

    assert live.manifest["depth_policy"] == policy.describe() and live.depths == [MAX]
    assert live.manifest["identity"]["depth_policy"] == policy.describe() if "identity" in live.manifest else True
    gens = live.generations().set_index("question_id")
    assert set(gens["depth_policy"]) == {policy.describe()}
    assert (gens["depth"] == MAX).all()
    iterations = {q: [int(i) for i in its] for q, its in gens["iterations"].items()}
    assert all(len(iterations[q]) == n for q, n in gens["n_tokens"].items())
    assert all(1 <= i <= MAX for its in iterations.values() for i in its)
    assert any(i < MAX for its in iterations.values() for i in its), "the threshold should make positions exit early"
    assert (gens["chosen_depth"] == [max(iterations[q]) for q in gens.index]).all()

    # The shards hold exactly the iterations that ran.
    for block in live.logits(MAX):
        for p, position in enumerate(block.positions):
            ran = block.iterations[block.argmax[p] >= 0].tolist()
            assert ran == list(range(1, iterations[block.question_id][position] + 1))
    for block in live.hidden(MAX):
        for p, position in enumerate(block.positions):
            ran = block.iterations[~np.isnan(block.values[p, :, 0, 0])].tolist()
            assert ran == list(range(1, iterations[block.question_id][position] + 1))

    exact_somewhere = 0
    for sim in simulate_policy(flat, policy):
        e = len(sim.iterations)
        tokens = [int(t) for t in gens.loc[sim.question_id, "token_ids"]]
        assert iterations[sim.question_id][:e] == sim.iterations, sim
        assert tokens[:e] == sim.tokens, sim
        if not sim.diverged:
            assert tokens == sim.tokens and iterations[sim.question_id] == sim.iterations
        exact_somewhere += e
    # Beyond position 0 somewhere (the thresholds of _revealing_tau are chosen so; the probe's is a plain median).
    assert exact_somewhere > len(gens) or (rule == "probe-pos" and exact_somewhere == len(gens))

    if rule == "entropy":  # every analysis reads the run; those comparing iterations at a fixed depth say why not
        from sst_interp import study

        table = study.open(out).available().set_index("measurement")
        for name in ("gap_distributions", "basin_shift_activity", "precision_proof", "convergence_monitoring",
                     "causal_ordering"):
            assert not table.loc[name, "available"] and "per-position depth policy" in table.loc[name, "reason"]
        assert table.loc["repetition", "available"]


def test_bad_policy_strings_are_one_error_line_and_exit_2(recorded, capsys):
    root, common, _ = recorded
    for text in ("kl:-1", "max=0", "kl:0.1,max=0", "wobble:0.3", "kl:0.1,min=4,max=3", "probe-pos:/no/such/probe"):
        with pytest.raises(SystemExit) as exit_info:
            record_main([*common, "--depth-policy", text, "--out", str(root / "bad")])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:"), err
    assert not (root / "bad").exists()


def test_simulation_refuses_what_it_cannot_compute_exactly(recorded, tmp_path):
    from sst_interp.kernels.errors import UsageError

    root, common, flat = recorded
    with pytest.raises(UsageError, match="recorded at depth 4"):
        simulate_policy(flat, parse_position_policy("entropy:1,max=4", 4))
    small = tmp_path / "small"
    record_main([*common[:-2], "--max-new-tokens", "2", "--top-k", "6", "--limit", "2", "--out", str(small)])
    with pytest.raises(UsageError, match="top-K only approximates KL"):
        simulate_policy(Run.open(small), parse_position_policy(f"kl:0.1,max={MAX}", MAX))
    assert simulate_policy(Run.open(small), parse_position_policy(f"margin:0.5,max={MAX}", MAX))


def test_simulation_cli_prints_one_row_per_policy_and_refuses_bad_strings(recorded, capsys, tmp_path):
    from sst_interp.cli.position_sim import main as sim_main

    root, _, flat = recorded
    tau = float(np.median(_recorded_values(flat, "entropy")))
    out = tmp_path / "sim.csv"
    assert sim_main(["--run", str(root / "flat"), "--policy", f"entropy:{tau!r}", "--policy", "margin:1",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "compute_fraction" in printed and "margin:1.0,min=1,max=3" in printed
    import pandas as pd

    table = pd.read_csv(out)
    assert len(table) == 2 * len(flat.generations())
    never = table[table["policy"] == "margin:1.0,min=1,max=3"]
    assert not never["diverged"].any() and (never["mean_iterations"] == MAX).all()  # margin:1 never exits early
    with pytest.raises(SystemExit) as exit_info:
        sim_main(["--run", str(root / "flat"), "--policy", "kl:-1"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error:")


def test_two_torchrun_processes_record_the_same_per_position_run(recorded):
    import dataclasses

    from tests.unit.distributed_helpers import finish, torchrun_record

    root, common, flat = recorded
    text = f"entropy:{float(np.median(_recorded_values(flat, 'entropy')))!r},max={MAX}"
    record_main([*common, "--depth-policy", text, "--out", str(root / "one")])
    proc = torchrun_record([*common, "--depth-policy", text, "--out", str(root / "two")])
    output = finish(proc)
    assert proc.returncode == 0, output[-3000:]
    one, two = Run.open(root / "one"), Run.open(root / "two")
    assert two.manifest["depth_policy"] == one.manifest["depth_policy"]
    a, b = (r.generations().sort_values("question_id").reset_index(drop=True) for r in (one, two))
    assert a.token_ids.map(list).tolist() == b.token_ids.map(list).tolist()
    assert a.iterations.map(list).tolist() == b.iterations.map(list).tolist()
    assert len({i for its in a.iterations for i in its}) > 1
    for kind in ("hidden", "logits"):
        mine = {blk.question_id: blk for blk in getattr(two, kind)(MAX)}
        theirs = {blk.question_id: blk for blk in getattr(one, kind)(MAX)}
        assert mine.keys() == theirs.keys() and mine
        for qid, blk in mine.items():
            for field in dataclasses.fields(blk):
                np.testing.assert_array_equal(getattr(blk, field.name), getattr(theirs[qid], field.name))

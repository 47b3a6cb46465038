"""Per-position depth policies in generation (issue 23): exact equivalences on tiny float64 models."""

import math
import statistics

import pytest
import torch

from sst_interp.kernels.errors import UsageError
from sst_interp.model import FixedDepth, GenerationConfig, generate, parse_position_policy
from sst_interp.model.halting import IterationSignals, rule_values

from .conftest import make_sst

MAX = 4
NEW = 8


class PassLog:
    """Observer: logits of every recorded pass by (row, position, iteration), for rows active in that pass."""

    def __init__(self):
        self.logits = {}

    def on_pass_start(self, info):
        pass

    def on_pass_end(self, info, logits):
        if info.position is None:
            return
        for row in torch.nonzero(info.active).flatten().tolist():
            key = (row, info.position, info.iteration)
            assert key not in self.logits, f"pass {key} announced twice for an active row"
            self.logits[key] = None if logits is None else logits[row].clone()

    def on_token(self, position, token_ids, active):
        pass


def run(sst, prompts, policy, prompt_mode="two_pass", new=NEW):
    log = PassLog()
    config = GenerationConfig(max_new_tokens=new, prompt_mode=prompt_mode, logits_every_iteration=True)
    result = generate(sst, prompts, policy, config, observer=log)
    return result, log


def assert_same_run(a, b):
    (ra, la), (rb, lb) = a, b
    assert ra.token_ids == rb.token_ids
    assert ra.iterations == rb.iterations
    assert set(la.logits) == set(lb.logits)
    for key, value in la.logits.items():
        assert torch.equal(value, lb.logits[key]), key


@pytest.fixture(scope="module")
def sst():
    return make_sst("gemma3")


@pytest.fixture(scope="module")
def prompts(tokenizer):
    # Equal lengths: no left padding, so batched rows see exactly what they see alone (see the padding caveat).
    texts = ["state stream", "iterate once", "halting rule", "depth policy"]
    ids = [tokenizer(t).input_ids for t in texts]
    assert len({len(p) for p in ids}) == 1
    return ids


@pytest.mark.parametrize("prompt_mode", ["two_pass", "sequential", "none"])
@pytest.mark.parametrize("text,depth", [("kl:0", MAX), ("state:0", MAX), ("margin:1", MAX), ("entropy:0", MAX),
                                        ("kl:inf", 2), ("state:inf", 2), ("kl:inf,min=3", 3),
                                        ("entropy:inf", 1), ("margin:0,min=2", 2)])
def test_degenerate_thresholds_equal_fixed_depth_bit_for_bit(sst, prompts, prompt_mode, text, depth):
    policy = parse_position_policy(f"{text},max={MAX}", default_max=MAX)
    assert policy.min_depth == depth or depth == MAX
    live = run(sst, prompts[:1], policy, prompt_mode)
    fixed = run(sst, prompts[:1], FixedDepth(depth), prompt_mode)
    assert live[0].iterations == [[depth] * NEW]
    assert_same_run(live, fixed)


def _median_threshold(sst, prompts, rule):
    """A threshold splitting the rule's values over a fixed-depth run, so rows halt at different iterations."""
    _, log = run(sst, prompts, FixedDepth(MAX))
    values = []
    for (row, pos, it), logits in log.logits.items():
        if it >= 2 and rule != "state":
            prev = log.logits[(row, pos, it - 1)]
            values.append(float(rule_values(rule, IterationSignals(it, logits[None], prev[None]))[0]))
    return float(torch.tensor(values).median())


@pytest.mark.parametrize("rule", ["kl", "entropy", "margin"])
def test_depth_stays_within_bounds_and_every_pass_is_announced_once(sst, prompts, rule):
    tau = _median_threshold(sst, prompts, rule)
    policy = parse_position_policy(f"{rule}:{tau!r},min=2,max={MAX}", default_max=MAX)
    result, log = run(sst, prompts, policy)
    counts = [c for row in result.iterations for c in row]
    assert all(2 <= c <= MAX for c in counts)
    assert len(set(counts)) > 1, "the threshold should make positions halt at different depths"
    for row, tokens in enumerate(result.token_ids):
        assert len(result.iterations[row]) == len(tokens)
        for position, count in enumerate(result.iterations[row]):
            ran = sorted(it for (r, p, it) in log.logits if r == row and p == position)
            assert ran == list(range(1, count + 1))  # exactly the iterations that ran, none after halting
        assert result.chosen_depth[row] == max(result.iterations[row])


@pytest.mark.parametrize("rule", ["kl", "entropy", "margin", "state"])
def test_batch_with_rows_at_different_depths_equals_each_row_alone(sst, prompts, rule):
    """Each row of a mixed-depth batch equals that row run alone. Bit for bit against the row alone at the same
    batch shape (its prompt in every row, so every row follows its path: what halting, restoring and masking must
    reproduce); against batch size 1, tokens and depths agree and logits to float64 rounding, because a different
    batch size alone changes the backbone's matmul rounding (already in the prefill, before any halting)."""
    if rule == "state":  # its values are not in the logits: take the first of a ladder of thresholds that splits
        policy = next(p for p in (parse_position_policy(f"state:{tau},max={MAX}", MAX)
                                  for tau in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0))
                      if len({c for row in run(sst, prompts, p)[0].iterations for c in row}) > 1)
    else:
        policy = parse_position_policy(f"{rule}:{_median_threshold(sst, prompts, rule)!r},max={MAX}", MAX)
    batched, blog = run(sst, prompts, policy)
    per_position = list(zip(*batched.iterations))
    assert any(len(set(column)) > 1 for column in per_position), "rows should halt at different depths"
    for row, prompt in enumerate(prompts):
        mine = {(p, i): v for (r, p, i), v in blog.logits.items() if r == row}
        same_shape, slog = run(sst, [prompt] * len(prompts), policy)
        single, alog = run(sst, [prompt], policy)
        for alone, log, exact in ((same_shape, slog, True), (single, alog, False)):
            assert alone.token_ids[0] == batched.token_ids[row]
            assert alone.iterations[0] == batched.iterations[row]
            theirs = {(p, i): v for (r, p, i), v in log.logits.items() if r == (row if exact else 0)}
            assert set(theirs) == set(mine)
            for key, value in theirs.items():
                if exact:
                    assert torch.equal(value, mine[key]), (row, key)
                else:
                    torch.testing.assert_close(value, mine[key], rtol=0, atol=1e-12)


def test_a_planted_rule_halts_where_the_distribution_settles(sst, prompts):
    """Planted: a threshold just above one position's measured KL at iteration 3 makes exactly that kind of step
    halt; the halting iteration is the first whose KL falls below it, as read from a full-depth run."""
    prompt = prompts[:1]
    _, log = run(sst, prompt, FixedDepth(MAX))
    kl = {(p, i): float(rule_values("kl", IterationSignals(i, log.logits[(0, p, i)][None],
                                                            log.logits[(0, p, i - 1)][None]))[0])
          for (_, p, i) in log.logits if i >= 2}
    tau = math.nextafter(kl[(0, 3)], math.inf)  # position 0 halts at 3 at the latest, and at 2 if KL_2 < tau
    live, _ = run(sst, prompt, parse_position_policy(f"kl:{tau!r},max={MAX}", MAX), new=1)
    expected = next(i for i in range(2, MAX + 1) if i == MAX or kl[(0, i)] < tau)
    assert live.iterations == [[expected]]
    assert expected <= 3


@pytest.mark.parametrize("text,message", [
    ("kl:-1", "must be >= 0"), ("max=0", "integer >= 1"), ("kl:0.1,max=0", "integer >= 1"),
    ("halting:0.1", "unknown rule"), ("kl", "unknown rule"), ("kl:abc", "must be a number"),
    ("kl:nan", "must be >= 0"), ("kl:0.1,min=5,max=4", "exceeds max"), ("kl:0.1,kl:0.2", "twice"),
    ("kl:0.1,,max=2", "empty item"), ("min=2", "names no rule"), ("kl:0.1,depth=3", "unknown bound"),
])
def test_bad_policy_strings_are_usage_errors(text, message):
    with pytest.raises(UsageError, match=message):
        parse_position_policy(text, default_max=4)


def test_policy_string_round_trips_through_describe():
    policy = parse_position_policy("kl:0.01,entropy:2.5,max=6", default_max=4)
    assert policy.describe() == "kl:0.01,entropy:2.5,min=1,max=6"
    exact = parse_position_policy(f"margin:{1 / 3!r}", default_max=2)
    assert parse_position_policy(exact.describe(), default_max=1) == exact
    assert parse_position_policy(policy.describe(), default_max=1) == policy


@pytest.mark.parametrize("rule", ["kl", "state"])
def test_planted_fixed_point_halts_at_iteration_two(prompts, rule):
    """Planted: a blend of exactly zero (a_max below float32's smallest subnormal, so alpha is 0) makes iteration 2
    repeat iteration 1 exactly at every position, so any pairwise rule with TAU > 0 halts at 2 everywhere, TAU = 0
    never halts, and the tokens are those of depth 1. Under the prompt mode ``sequential``: there position 0's first
    iteration is a one-column pass like every later one, whereas a multi-column prompt pass (``two_pass``, ``none``)
    rounds differently (transformers' eager attention takes its softmax in float32 even in a float64 model: about
    5e-8 on these logits), which a threshold of 1e-300 sees."""
    mode = "sequential"
    sst = make_sst("gemma3", a_min=0.0, a_max=1e-50)
    assert float(sst.alphas().abs().max()) == 0.0
    halted, _ = run(sst, prompts[:2], parse_position_policy(f"{rule}:1e-300,max={MAX}", MAX), mode)
    assert halted.iterations == [[2] * NEW, [2] * NEW]
    never, _ = run(sst, prompts[:2], parse_position_policy(f"{rule}:0,max={MAX}", MAX), mode)
    assert never.iterations == [[MAX] * NEW, [MAX] * NEW]
    assert halted.token_ids == never.token_ids == run(sst, prompts[:2], FixedDepth(1), mode)[0].token_ids
    # Where the blend is on, iteration 2 moves: the same threshold lets position 0 run past 2.
    moving, _ = run(make_sst("gemma3"), prompts[:2], parse_position_policy(f"{rule}:1e-300,max={MAX}", MAX),
                    mode)
    assert [row[0] for row in moving.iterations] == [MAX, MAX]


def test_probe_pos_needs_an_existing_probe_and_an_attached_one(tmp_path):
    with pytest.raises(UsageError, match="no such probe"):
        parse_position_policy(f"probe-pos:{tmp_path / 'missing'}", default_max=3)
    (tmp_path / "probe").mkdir()
    policy = parse_position_policy(f"probe-pos:{tmp_path / 'probe'},max=3", default_max=4)
    assert policy.describe() == f"min=1,max=3".join([f"probe-pos:{(tmp_path / 'probe').resolve()},", ""])
    with pytest.raises(RuntimeError, match="attached"):
        policy.halt(IterationSignals(1, hidden=torch.zeros(1, 4)), 1, torch.device("cpu"))
    halts = policy.with_probe(lambda h: h[:, 0] > 0, layer=1)
    fired = halts.halt(IterationSignals(1, hidden=torch.tensor([[1.0, 0.0], [-1.0, 0.0]])), 2, torch.device("cpu"))
    assert fired.tolist() == [True, False] and halts.probe_layer == 1 and halts.min_depth == 1


def test_probe_pos_in_generation_halts_where_the_probe_says(sst, prompts):
    """A probe reading layer 1 that halts when the first coordinate of its output exceeds a threshold: position 0
    runs to the first iteration whose layer-1 output (read by a hook at fixed depth) exceeds it."""
    outputs = {}
    log = {"key": None}

    class Keys(PassLog):
        def on_pass_start(self, info):
            log["key"] = None if info.position is None else (info.position, info.iteration)

    handle = sst.layers[1].register_forward_hook(
        lambda m, i, o: outputs.__setitem__(log["key"], o[0, -1, 0].item()) if log["key"] else None)
    try:
        generate(sst, prompts[:1], FixedDepth(MAX), GenerationConfig(max_new_tokens=1), observer=Keys())
    finally:
        handle.remove()
    threshold = statistics.median(outputs[(0, i)] for i in range(1, MAX + 1))
    expected = next((i for i in range(1, MAX + 1) if outputs[(0, i)] > threshold), MAX)
    policy = parse_position_policy(f"entropy:0,max={MAX}", MAX)
    policy = type(policy)(rules=(), min_iterations=1, max_depth=MAX, probe_path="planted")
    policy = policy.with_probe(lambda h: h[:, 0] > threshold, layer=1)
    result, _ = run(sst, prompts[:1], policy, new=1)
    assert result.iterations == [[expected]]
    assert expected < MAX, f"the planted probe should halt early here: {outputs}"


class _HaltAtTwo:
    """A per-turn policy (the DepthPolicy protocol, like the halting probe) that halts at iteration 2."""

    max_depth = MAX
    probe_layer = None

    def should_halt(self, iteration, hidden):
        return iteration >= 2

    def describe(self):
        return "halt-at-2"


def test_per_turn_policies_record_the_depth_they_chose_at_every_position(sst, prompts):
    result, log = run(sst, prompts[:2], _HaltAtTwo())
    assert result.chosen_depth == [2, 2]
    assert result.iterations == [[2] * NEW, [2] * NEW]
    assert_same_run((result, log), run(sst, prompts[:2], FixedDepth(2)))

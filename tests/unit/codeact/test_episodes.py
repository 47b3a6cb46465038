"""The episode loop on a real (tiny, scripted) model and the real sandbox: exact conversations, masking, and the
kept KV cache equal to recomputing the whole conversation."""

from __future__ import annotations

import pytest
import torch

from sst_interp.codeact.episode import EpisodeConfig, run_episodes
from sst_interp.codeact.format import encode_with_actions
from sst_interp.hooks import RecordConfig, Recorder
from sst_interp.model.generation import GenerationConfig, generate
from tests.unit.codeact.scripted import EPISODE_CONFIG, FORMAT, SCRIPTS, conversation, question


def _generation(prompt_mode: str = "two_pass") -> GenerationConfig:
    return GenerationConfig(max_new_tokens=60, prompt_mode=prompt_mode, eos_token_ids=(1,), pad_token_id=0,
                            logits_every_iteration=True)


EXPECTED = {  # question id -> (stop reason, final answer, tool status per turn)
    "mul": ("finish_session", "42", ["ok", "ok"]),
    "err": ("no_code", "5", ["ok", "error", "none"]),
    "text": ("no_code", "5", ["none"]),
}


@pytest.mark.parametrize("depth", [1, 2])
def test_batched_episodes_act_out_their_scripts_exactly(scripted, sandbox_config, depth):
    sst, tok = scripted
    prompts = [question(s).prompt for s in SCRIPTS]
    batch = run_episodes(sst, tok, prompts, depth, _generation(), EPISODE_CONFIG, sandbox_config)
    for script, prompt, episode in zip(SCRIPTS, prompts, batch.episodes):
        stop, answer, statuses = EXPECTED[script.question_id]
        assert [t.text for t in episode.turns] == list(script.turns)
        assert episode.stop_reason == stop and episode.final_answer == answer
        assert [t.tool_status for t in episode.turns] == statuses
        assert [t.chosen_depth for t in episode.turns] == [depth] * len(script.turns)
        # The conversation the model saw is exactly the one it was trained on, tool responses included.
        expected = "".join(text for text, _ in conversation(script, sandbox_config))
        assert episode.conversation(prompt, FORMAT) == expected
    err = batch.episodes[1].turns[1]
    assert "NameError" in err.tool_output and err.code == "print(y)"
    assert batch.episodes[0].turns[0].tool_output == "42"
    assert batch.sandbox_s > 1.0  # the err episode sleeps 1.5 s in its first block: the code really ran


def test_an_episode_alone_gives_the_same_tokens_as_in_a_batch(scripted, sandbox_config):
    sst, tok = scripted
    batch = run_episodes(sst, tok, [question(s).prompt for s in SCRIPTS], 1, _generation(), EPISODE_CONFIG,
                         sandbox_config)
    for index, script in enumerate(SCRIPTS):
        alone = run_episodes(sst, tok, [question(script).prompt], 1, _generation(), EPISODE_CONFIG, sandbox_config)
        assert [t.token_ids for t in alone.episodes[0].turns] == [t.token_ids for t in batch.episodes[index].turns]


class _Position0Logits:
    """Observer keeping the logits of every (turn, position 0, iteration) pass."""

    def __init__(self):
        self.logits, self.turn = {}, 0

    def on_pass_start(self, info):
        self.current = info

    def on_pass_end(self, info, logits):
        if info.position == 0 and logits is not None:
            self.logits[(info.turn, info.iteration)] = logits.clone()

    def on_token(self, position, token_ids, active):
        pass


def test_kept_cache_equals_recomputing_the_whole_conversation(scripted, sandbox_config):
    """Sequential prompt mode with the state carried across turns is the exact recurrence over the whole
    conversation, so turn 1's position-0 logits must equal a single from-scratch call on the full context.

    At depth 1 only: at depth k > 1 the model-turn positions ran k iterations (their KV entries and carried state
    are iteration k's), while a single call would read those tokens as prompt, at one iteration each."""
    depth = 1
    sst, tok = scripted
    script = SCRIPTS[0]
    config = EpisodeConfig(**{**EPISODE_CONFIG.__dict__, "carry_across_turns": True})
    observer = _Position0Logits()
    episode = run_episodes(sst, tok, [question(script).prompt], depth, _generation("sequential"), config,
                           sandbox_config, observer=observer).episodes[0]
    pieces = conversation(script, sandbox_config)
    context = "".join(text for text, _ in pieces[:3])  # first turn, model turn 0, tool response
    ids = encode_with_actions(context, tok, FORMAT.action_tokens)[0]
    reference = _Position0Logits()
    result = generate(sst, [ids], depth, GenerationConfig(max_new_tokens=1, prompt_mode="sequential",
                                                           logits_every_iteration=True), observer=reference)
    assert result.token_ids[0][0] == episode.turns[1].token_ids[0]
    for iteration in range(1, depth + 1):
        torch.testing.assert_close(observer.logits[(1, iteration)], reference.logits[(0, iteration)],
                                   rtol=0, atol=1e-4)
    # Without the carry, turn 1 starts from a zero state: a different (not an equal) computation.
    fresh = _Position0Logits()
    run_episodes(sst, tok, [question(script).prompt], depth, _generation("sequential"), EPISODE_CONFIG,
                 sandbox_config, observer=fresh)
    assert (fresh.logits[(1, depth)] - reference.logits[(0, depth)]).abs().max() > 1e-5


def test_recorder_sees_each_turn_once_and_never_a_finished_row(scripted, sandbox_config):
    sst, tok = scripted
    ids = [s.question_id for s in SCRIPTS]
    with Recorder.for_model(sst, ids, RecordConfig(full_positions=3, sketch_positions=2, top_k=5)) as recorder:
        batch = run_episodes(sst, tok, [question(s).prompt for s in SCRIPTS], 2, _generation(), EPISODE_CONFIG,
                             sandbox_config, observer=recorder)
    columns = recorder.columns()
    hidden, logits = columns["hidden"], columns["logits"]
    seen = {(q, int(t)) for q, t in zip(hidden["question_id"], hidden["turn"])}
    expected = {(s.question_id, t) for s, e in zip(SCRIPTS, batch.episodes) for t in range(len(e.turns))}
    assert seen == expected
    keys = list(zip(logits["question_id"], logits["turn"], logits["position"], logits["iteration"]))
    assert len(keys) == len(set(keys))  # nothing recorded twice
    for script, episode in zip(SCRIPTS, batch.episodes):
        for turn in episode.turns:
            rows = [i for i, k in enumerate(keys) if k[0] == script.question_id and k[1] == turn.turn]
            n = min(len(turn.token_ids), 5)
            assert sorted({keys[i][2] for i in rows}) == list(range(n))
            final = {keys[i][2]: int(logits["argmax"][i]) for i in rows if keys[i][3] == 2}
            assert [final[p] for p in range(n)] == turn.token_ids[:n]


class _DepthPerTurn:
    """A depth policy that halts at a set depth for each model turn of a one-row batch (it counts position-0
    first iterations to know the turn): shows that the decision is taken again at every turn's position 0."""

    probe_layer = None

    def __init__(self, depths):
        self.depths, self.turn, self.max_depth = depths, -1, max(depths)

    def should_halt(self, iteration, hidden):
        if iteration == 1:
            self.turn += 1
        return iteration >= self.depths[self.turn]

    def describe(self):
        return f"per-turn{self.depths}"


def test_the_depth_policy_decides_at_position0_of_every_turn(scripted, sandbox_config):
    sst, tok = scripted
    script = SCRIPTS[1]  # three model turns
    policy = _DepthPerTurn([2, 1, 3])
    with Recorder.for_model(sst, [script.question_id], RecordConfig(full_positions=2, sketch_positions=1,
                                                                    top_k=5)) as recorder:
        episode = run_episodes(sst, tok, [question(script).prompt], policy, _generation(), EPISODE_CONFIG,
                               sandbox_config, observer=recorder).episodes[0]
    assert [t.chosen_depth for t in episode.turns] == [2, 1, 3]
    assert [t.text for t in episode.turns] == list(script.turns)
    logits = recorder.columns()["logits"]
    for turn, depth in enumerate([2, 1, 3]):
        iterations = {int(i) for t, i in zip(logits["turn"], logits["iteration"]) if int(t) == turn}
        assert iterations == set(range(1, depth + 1))
    assert episode.depth_policy == "per-turn[2, 1, 3]"

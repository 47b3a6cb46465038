"""CodeACT episodes under a per-position depth policy (issue 23): each model turn decides per token, the scripts are
still acted out exactly, and each turn records one iteration count per generated token."""

from __future__ import annotations

import torch

from sst_interp.codeact.episode import run_episodes
from sst_interp.model.generation import GenerationConfig
from sst_interp.model.halting import IterationSignals, parse_position_policy, rule_values
from tests.unit.codeact.scripted import EPISODE_CONFIG, SCRIPTS, question

MAX = 3


class _Margins:
    """Observer: the margin of every pass at iterations < MAX (where exiting is a choice)."""

    def __init__(self):
        self.values = []

    def on_pass_start(self, info):
        pass

    def on_pass_end(self, info, logits):
        if info.position is not None and logits is not None and info.iteration < MAX:
            for row in torch.nonzero(info.active).flatten().tolist():
                self.values.append(float(rule_values("margin", IterationSignals(1, logits[row:row + 1]))[0]))

    def on_token(self, position, token_ids, active):
        pass


def test_episodes_under_a_per_position_policy_act_out_their_scripts(scripted, sandbox_config):
    sst, tok = scripted
    generation = GenerationConfig(max_new_tokens=60, prompt_mode="two_pass", eos_token_ids=(1,), pad_token_id=0)
    prompts = [question(s).prompt for s in SCRIPTS]
    margins = _Margins()
    calibration = GenerationConfig(max_new_tokens=60, prompt_mode="two_pass", eos_token_ids=(1,), pad_token_id=0,
                                   logits_every_iteration=True)
    run_episodes(sst, tok, prompts, MAX, calibration, EPISODE_CONFIG, sandbox_config, observer=margins)
    # About half the positions exit before MAX: a threshold near the median margin, but in the widest gap between
    # observed margins of the middle half, never on an observed value. A position whose margin sat exactly on the
    # threshold would flip between the batch and a run alone, whose logits differ in the last bits.
    values = sorted(set(margins.values))
    middle = values[len(values) // 4: 3 * len(values) // 4 + 1]
    low, high = max(zip(middle, middle[1:]), key=lambda pair: pair[1] - pair[0])
    policy = parse_position_policy(f"margin:{(low + high) / 2!r},max={MAX}", MAX)
    batch = run_episodes(sst, tok, prompts, policy, generation, EPISODE_CONFIG, sandbox_config)
    counts = []
    for script, episode in zip(SCRIPTS, batch.episodes):
        assert [t.text for t in episode.turns] == list(script.turns)
        assert episode.depth_policy == policy.describe()
        for turn in episode.turns:
            assert len(turn.iterations) == len(turn.token_ids)
            assert all(1 <= i <= MAX for i in turn.iterations)
            assert turn.chosen_depth == max(turn.iterations)
            counts.extend(turn.iterations)
    assert len(set(counts)) > 1, "positions should halt at different depths"
    # Each episode alone: the same tokens and the same iteration counts as in the batch.
    for index, script in enumerate(SCRIPTS):
        alone = run_episodes(sst, tok, [question(script).prompt], policy, generation, EPISODE_CONFIG, sandbox_config)
        assert [t.token_ids for t in alone.episodes[0].turns] == [t.token_ids for t in batch.episodes[index].turns]
        assert [t.iterations for t in alone.episodes[0].turns] == [t.iterations for t in batch.episodes[index].turns]

"""The codeact protocol: one batch of multi-turn CodeACT episodes, recorded inline per model turn and graded.

Rows written per batch (docs/format.md): ``generations`` gets one row per model turn (``turn`` 0, 1, ...) with
``code``, ``tool_output`` and ``tool_status``; every turn row repeats its episode's verdict (``extracted_answer``,
``correct``, ``grader``), which belongs to the episode; ``episodes`` gets one row per episode. Hidden, logits,
sketch and gate rows carry the model turn in ``turn`` and restart ``position`` at 0 in every turn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sst_interp.codeact.episode import run_episodes
from sst_interp.codeact.grading import grade_episode
from sst_interp.hooks import Recorder
from sst_interp.record.completion import batch_generation_config, intervened
from sst_interp.record.identity import episode_config
from sst_interp.record.options import RecordOptions


def record_episode_batch(sst: Any, tokenizer: Any, batch: list[Any], depth: Any, options: RecordOptions, config: Any,
                         sandbox: Any, tally: Any = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], Any]:
    """Run and record one batch of episodes (``batch``: questions whose prompt is the CodeACT first turn).

    Returns:
        (generation rows, episode rows, writer columns, the :class:`~sst_interp.codeact.episode.EpisodeBatch`).
    """

    gen_config = batch_generation_config(sst, tokenizer, options)
    ids = [q.question_id for q in batch]
    with Recorder.for_model(sst, ids, config) as recorder, \
            intervened(sst, options, ids, recorder, tally) as observer:
        result = run_episodes(sst, tokenizer, [q.prompt for q in batch], depth, gen_config, episode_config(options),
                              sandbox, observer=observer)
    generation_rows, episode_rows = [], []
    for question, episode in zip(batch, result.episodes):
        verdict = grade_episode(question, episode, sandbox)
        # A per-position policy files every episode under its maximum depth (the shards' partition).
        filed = depth.max_depth if getattr(depth, "per_position", False) else episode.chosen_depth
        for turn in episode.turns:
            generation_rows.append({
                "question_id": question.question_id, "depth": filed, "turn": turn.turn,
                "token_ids": turn.token_ids, "text": turn.text, "n_tokens": len(turn.token_ids),
                "stop_reason": turn.stop_reason, "extracted_answer": verdict.extracted_answer,
                "correct": bool(verdict.correct), "grader": verdict.grader, "depth_policy": episode.depth_policy,
                "chosen_depth": turn.chosen_depth, "code": turn.code, "tool_output": turn.tool_output,
                "tool_status": turn.tool_status, "appended_tokens": turn.appended_tokens,
                "prompt_tokens": episode.prompt_tokens if turn.turn == 0 else 0,
                "iterations": np.asarray(turn.iterations, dtype=np.int32),
            })
        episode_rows.append({
            "question_id": question.question_id, "depth": filed, "n_turns": len(episode.turns),
            "stop_reason": episode.stop_reason, "final_answer": episode.final_answer,
            "correct": bool(verdict.correct), "grader": verdict.grader, "depth_policy": episode.depth_policy,
            "chosen_depth": filed, "extracted_answer": verdict.extracted_answer,
            "context_tokens": episode.context_tokens,
        })
    return generation_rows, episode_rows, recorder.columns(), result

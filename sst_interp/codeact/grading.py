"""Grading a CodeACT episode (the episode, not a turn, is right or wrong).

- demo, gsm8k, gpqa, math500: the source's grader (:data:`sst_interp.data.grading.GRADERS`) on the final answer,
  i.e. ``finish_session``'s argument, or the text of a final turn without code; not cut at stop strings (those
  belong to the completion protocol).
- humaneval: the blocks the episode ran without error, in order, form the completion; it is run with the task's
  tests in the sandbox. ``finish_session`` is defined as a no-op there, since the blocks may call it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sst_interp.data.grading import GRADERS, GradeResult
from sst_interp.data.question import Question
from sst_interp.kernels.errors import UsageError

FINISH_STUB = "def finish_session(*args, **kwargs):\n    return None\n"


def humaneval_completion(episode: Any) -> str:
    """The completion an episode wrote for a HumanEval task: every block that ran ``ok``, in order ("" if none)."""
    blocks = [turn.code for turn in episode.turns if turn.tool_status == "ok" and turn.code.strip()]
    return "\n\n".join(blocks)


def grade_episode(question: Question, episode: Any, sandbox: Any = None) -> GradeResult:
    """Grade ``episode`` (an :class:`~sst_interp.codeact.episode.EpisodeResult`) for ``question``."""
    grader = GRADERS.get(question.source)
    if grader is None:
        raise UsageError(f"no grader for source {question.source!r}; known: {sorted(GRADERS)}")
    if question.source == "humaneval":
        code = humaneval_completion(episode)
        if not code:
            return GradeResult("no code ran", False, "humaneval_exec")
        completion = f"\n{FINISH_STUB}\n{code}\n"
        question = replace(question, prompt=str(question.metadata.get("task_prompt", question.prompt)))
        if sandbox is not None:
            return grader(question, completion, sandbox=sandbox)
        return grader(question, completion)
    return grader(question, episode.final_answer)

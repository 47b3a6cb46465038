"""The CodeACT episode loop: a batch of episodes advanced turn by turn on one KV cache (docs/format.md).

For each model turn: every episode still running generates until ``</execute>``, ``<end_of_turn>``, EOS or the
per-turn token limit (:meth:`~sst_interp.model.generation.GenerationSession.run_turn`); the code of each finished
turn runs in that episode's own sandboxed interpreter (variables survive between blocks; the interpreters of a
batch run in parallel threads); the output comes back as a tool-response user turn, which is appended and prefilled
on top of the kept cache in the prompt mode, its last token being generated position 0 of the next turn. Episodes
waiting for others, or finished, are masked rows: they are computed but never recorded.

An episode ends (``stop_reason``):

- ``finish_session``: its code called ``finish_session(answer)``; ``answer`` is the final answer that is graded;
- ``no_code``: a model turn ended without a closed ``<execute>`` block; that turn's text is the final answer
  (a CodeACT runtime takes a text-only turn as the model's reply);
- ``max_turns``: ``max_turns`` model turns ran without ``finish_session`` (final answer empty);
- ``token_budget``: a turn used all ``max_new_tokens`` without ending, or the next turn would not fit in
  ``max_context_tokens`` (final answer empty).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

from sst_interp.codeact.format import (
    ActionFormat,
    decode_with_actions,
    encode_tool_turn,
    encode_with_actions,
    extract_code,
)
from sst_interp.kernels.errors import UsageError
from sst_interp.model.depth_policy import DepthPolicy, as_depth_policy
from sst_interp.model.generation import GenerationConfig, GenerationSession
from sst_interp.model.observers import GenerationObserver
from sst_interp.sandbox import PythonSession, SandboxConfig


@dataclass(frozen=True)
class EpisodeConfig:
    """Options of the episode loop.

    Args:
        max_turns: most model turns per episode (``record --max-turns``, default 5).
        max_context_tokens: most tokens in an episode's context (prompt, every turn and tool response); a turn that
            would not fit with its full ``max_new_tokens`` ends the episode with ``token_budget``.
        carry_across_turns: whether a tool-response segment starts from the state the model turn before it ended
            with (``True``) or from a zero state like a prompt (``False``, the default).
        tool_output_chars: most characters of tool output (stdout, then stderr) put into the conversation; longer
            output is cut and marked ``... [truncated N chars]``.
        fmt: the conversation format and action token ids.
    """

    max_turns: int = 5
    max_context_tokens: int = 4096
    carry_across_turns: bool = False
    tool_output_chars: int = 2000
    fmt: ActionFormat = field(default_factory=ActionFormat)

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise UsageError(f"--max-turns must be at least 1, got {self.max_turns}")
        if self.tool_output_chars < 1:
            raise UsageError(f"--tool-output-chars must be at least 1, got {self.tool_output_chars}")
        if self.max_context_tokens < 2:
            raise UsageError(f"--max-context-tokens must be at least 2, got {self.max_context_tokens}")

    def to_dict(self) -> dict[str, Any]:
        """For the manifest."""
        return {"max_turns": self.max_turns, "max_context_tokens": self.max_context_tokens,
                "carry_across_turns": self.carry_across_turns, "tool_output_chars": self.tool_output_chars,
                **self.fmt.to_dict()}


@dataclass
class TurnRecord:
    """One model turn of an episode.

    Args:
        turn: 0-based model-turn index.
        token_ids: the tokens the model generated in this turn (up to and including the one that ended it).
        text: those tokens as text (action tokens and chat markers written out).
        stop_reason: why the turn ended: ``execute`` (``</execute>``), ``end_of_turn``, ``eos`` or
            ``max_new_tokens``.
        code: the executed block ("" if none).
        tool_output: what went back to the model (stdout, then stderr; capped), "" if nothing ran.
        tool_status: ``ok`` | ``error`` | ``timeout`` | ``none`` (nothing ran).
        chosen_depth: iterations per position in this turn (the depth policy decides at each turn's position 0).
        appended_tokens: tokens of the tool-response segment that followed this turn (0 if none).
        iterations: iterations each generated position of this turn ran (one per token).
    """

    turn: int
    token_ids: list[int]
    text: str
    stop_reason: str
    code: str = ""
    tool_output: str = ""
    tool_status: str = "none"
    chosen_depth: int = 0
    appended_tokens: int = 0
    iterations: list[int] = field(default_factory=list)


@dataclass
class EpisodeResult:
    """One finished episode: its turns, why it ended and its final answer (see the module docstring)."""

    turns: list[TurnRecord]
    stop_reason: str
    final_answer: str
    prompt_tokens: int
    context_tokens: int
    depth_policy: str

    @property
    def chosen_depth(self) -> int:
        """The depth of the first model turn (the depth the episode is filed under)."""
        return self.turns[0].chosen_depth

    def conversation(self, prompt: str, fmt: ActionFormat) -> str:
        """The whole conversation as text: the prompt, every model turn and every tool response."""
        parts = [prompt]
        for turn in self.turns:
            parts.append(turn.text)
            if turn.appended_tokens:
                parts.append(fmt.tool_turn(turn.tool_output))
        return "".join(parts)


@dataclass
class EpisodeBatch:
    """The episodes of one batch and where its time went (seconds, wall clock, for the whole batch).

    ``generate_s`` covers every model pass (including the prefills of appended tool turns, also counted alone in
    ``append_prefill_s``); ``sandbox_s`` the interpreters' start and the code runs; ``other_s`` tokenising and
    bookkeeping.
    """

    episodes: list[EpisodeResult]
    generate_s: float = 0.0
    append_prefill_s: float = 0.0
    sandbox_s: float = 0.0
    other_s: float = 0.0


def tool_output_text(stdout: str, stderr: str, limit: int) -> str:
    """stdout, then stderr, cut to ``limit`` characters with a marker saying how much was dropped."""
    text = stdout
    if stderr:
        text = f"{text}\n{stderr}" if text and not text.endswith("\n") else text + stderr
    text = text.rstrip("\n")
    if len(text) > limit:
        text = f"{text[:limit]}\n... [truncated {len(text) - limit} chars]"
    return text


def turn_stop_reason(tokens: list[int], fmt: ActionFormat, end_of_turn_id: int | None, eos_ids: set[int]) -> str:
    """Why a model turn ended, from its last token."""
    last = tokens[-1] if tokens else None
    if last == fmt.execute_close_id:
        return "execute"
    if end_of_turn_id is not None and last == end_of_turn_id:
        return "end_of_turn"
    if last in eos_ids:
        return "eos"
    return "max_new_tokens"


def end_of_turn_id(tokenizer: Any, fmt: ActionFormat) -> int | None:
    """The token id of the end-of-turn marker, or None when the tokenizer has no such single token."""
    ids = tokenizer(fmt.turn_end, add_special_tokens=False)["input_ids"]
    return int(ids[0]) if len(ids) == 1 else None


class _Running:
    """Bookkeeping of one episode while the batch runs."""

    def __init__(self, prompt_tokens: int) -> None:
        self.turns: list[TurnRecord] = []
        self.context = prompt_tokens
        self.prompt_tokens = prompt_tokens
        self.stop_reason: str | None = None
        self.final_answer = ""
        self.sandbox: PythonSession | None = None


def run_episodes(
    sst: Any,
    tokenizer: Any,
    prompts: list[str],
    policy: int | DepthPolicy,
    generation: GenerationConfig,
    config: EpisodeConfig,
    sandbox: SandboxConfig,
    observer: GenerationObserver | None = None,
) -> EpisodeBatch:
    """Run one batch of CodeACT episodes to the end.

    Args:
        sst: the model.
        tokenizer: its tokenizer.
        prompts: the first-turn text of each episode (:meth:`ActionFormat.first_turn`), [B].
        policy: the depth policy (decides at position 0 of every model turn).
        generation: decoding options; ``max_new_tokens`` is per model turn. Its EOS ids are extended with
            ``</execute>`` and the end-of-turn marker.
        config: :class:`EpisodeConfig`.
        sandbox: how model code runs (:class:`~sst_interp.sandbox.SandboxConfig`).
        observer: receives every model pass (e.g. a :class:`~sst_interp.hooks.Recorder`); ``PassInfo.turn``
            says which model turn a pass belongs to.

    Returns:
        :class:`EpisodeBatch` with one :class:`EpisodeResult` per prompt.
    """
    policy = as_depth_policy(policy)
    fmt = config.fmt
    clock = time.perf_counter()
    timings = {"generate": 0.0, "append": 0.0, "sandbox": 0.0}
    eot = end_of_turn_id(tokenizer, fmt)
    eos_ids = set(generation.eos_token_ids)
    turn_enders = eos_ids | {fmt.execute_close_id} | ({eot} if eot is not None else set())
    generation = replace(generation, eos_token_ids=tuple(sorted(turn_enders)), stop_strings=())
    encoded = [encode_with_actions(text, tokenizer, fmt.action_tokens)[0] for text in prompts]
    running = [_Running(len(ids)) for ids in encoded]
    session = GenerationSession(sst, encoded, policy, generation, observer, carry_across_turns=config.carry_across_turns)
    with ExitStack() as stack, session, ThreadPoolExecutor(max_workers=max(1, len(prompts))) as pool:
        for turn in range(config.max_turns):
            started = time.perf_counter()
            result = session.run_turn()
            timings["generate"] += time.perf_counter() - started
            if turn > 0:
                timings["append"] += session.last_prefill_s
            rows = [row for row, episode in enumerate(running) if episode.stop_reason is None]
            executing = {}
            for row in rows:
                episode = running[row]
                tokens = list(result.token_ids[row])
                record = TurnRecord(turn=turn, token_ids=tokens, stop_reason=turn_stop_reason(tokens, fmt, eot, eos_ids),
                                    text=decode_with_actions(tokens, tokenizer, fmt.action_tokens),
                                    chosen_depth=int(result.chosen_depth[row]),
                                    iterations=list(result.iterations[row]))
                episode.turns.append(record)
                episode.context += len(tokens)
                code = extract_code(record.text) if record.stop_reason == "execute" else None
                if record.stop_reason == "max_new_tokens":
                    episode.stop_reason = "token_budget"
                elif code is None:
                    episode.stop_reason = "no_code"
                    episode.final_answer = _answer_text(record.text, fmt)
                else:
                    record.code = code
                    if episode.sandbox is None:
                        episode.sandbox = stack.enter_context(PythonSession(sandbox))
                    executing[row] = pool.submit(episode.sandbox.execute, code)
            started = time.perf_counter()
            outcomes = {row: future.result() for row, future in executing.items()}
            timings["sandbox"] += time.perf_counter() - started
            segments: list[list[int] | None] = [None] * len(prompts)
            for row, outcome in outcomes.items():
                episode, record = running[row], running[row].turns[-1]
                record.tool_status = outcome.status
                record.tool_output = tool_output_text(outcome.stdout, outcome.stderr, config.tool_output_chars)
                if outcome.finish_answer is not None:
                    episode.stop_reason, episode.final_answer = "finish_session", outcome.finish_answer
                elif turn + 1 >= config.max_turns:
                    episode.stop_reason = "max_turns"
                else:
                    segment = encode_tool_turn(record.tool_output, tokenizer, fmt)
                    # +1: the token that ended the turn is fed again in front of the segment.
                    if episode.context + len(segment) + generation.max_new_tokens > config.max_context_tokens:
                        episode.stop_reason = "token_budget"
                    else:
                        record.appended_tokens = len(segment)
                        episode.context += len(segment)
                        segments[row] = segment
            for episode in running:
                if episode.stop_reason is not None and episode.sandbox is not None:
                    started = time.perf_counter()
                    episode.sandbox.close()
                    timings["sandbox"] += time.perf_counter() - started
                    episode.sandbox = None
            if all(segment is None for segment in segments):
                break
            session.append(segments)
    episodes = [EpisodeResult(turns=e.turns, stop_reason=e.stop_reason or "max_turns", final_answer=e.final_answer,
                              prompt_tokens=e.prompt_tokens, context_tokens=e.context, depth_policy=policy.describe())
                for e in running]
    total = time.perf_counter() - clock
    other = max(0.0, total - timings["generate"] - timings["sandbox"])
    return EpisodeBatch(episodes, generate_s=timings["generate"], append_prefill_s=timings["append"],
                        sandbox_s=timings["sandbox"], other_s=other)


def _answer_text(text: str, fmt: ActionFormat) -> str:
    """A text-only turn as an answer: without the end-of-turn marker and surrounding space."""
    return text.replace(fmt.turn_end, "").replace("<eos>", "").strip()

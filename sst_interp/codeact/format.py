r"""The CodeACT conversation format (paper app:dataset_format) and its tokenisation, shared by training and episodes.

One episode, as the model sees it (Gemma 3 chat markers; ``{...}`` are filled)::

    <bos><start_of_turn>user\n{system}\n\n{task}<end_of_turn>\n<start_of_turn>model\n\n<execute>\n{code}\n</execute>
    <end_of_turn>\n<start_of_turn>user\n<tool_response>\n{output}\n</tool_response><end_of_turn>\n<start_of_turn>model\n\n
    <execute>\nfinish_session("The answer is 18.")\n</execute>

(wrapped here; the real string has no line breaks but the ``\n`` shown.) Every prompt segment ends with the model-turn
opening ``<start_of_turn>model\n`` followed by the ``\n`` that the training traces put before ``<execute>``: the
tokenizer merges the two newlines into one token, and a prompt that ends after a single newline is a different token
sequence from everything the model was trained on (in the project's feasibility check, with ``model\n`` the trained
checkpoint skipped ``<execute>`` on 12 of 12 questions, with ``model\n\n`` it emitted it).

The action tokens are not in the Gemma 3 vocabulary as text: they are cut out before tokenisation and replaced by
reserved ids (262140 and 262141 on Gemma 3), exactly as training does, so prompts and training text always tokenise
the same way. A model turn ends when the model emits the closing action token or the end-of-turn marker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

EXECUTE_OPEN = "<execute>"
EXECUTE_CLOSE = "</execute>"
GEMMA3_ACTION_IDS: tuple[tuple[str, int], ...] = ((EXECUTE_OPEN, 262140), (EXECUTE_CLOSE, 262141))


@dataclass(frozen=True)
class ActionFormat:
    """The strings and token ids of a CodeACT conversation.

    Args:
        action_tokens: (string, reserved token id) of ``<execute>`` and ``</execute>`` (Gemma 3: 262140, 262141;
            other families pick their own unused ids and record them in the checkpoint and the manifest).
        bos: the beginning-of-sequence marker written at the start of the text.
        user_open: opens a user turn.
        model_open: opens a model turn, including the newline the traces put before ``<execute>``.
        turn_end: closes a turn.
        tool_open, tool_close: wrap the tool's output inside a user turn.
    """

    action_tokens: tuple[tuple[str, int], ...] = GEMMA3_ACTION_IDS
    bos: str = "<bos>"
    user_open: str = "<start_of_turn>user\n"
    model_open: str = "<start_of_turn>model\n\n"
    turn_end: str = "<end_of_turn>"
    tool_open: str = "<tool_response>\n"
    tool_close: str = "\n</tool_response>"

    @property
    def execute_open_id(self) -> int:
        return dict(self.action_tokens)[EXECUTE_OPEN]

    @property
    def execute_close_id(self) -> int:
        return dict(self.action_tokens)[EXECUTE_CLOSE]

    def first_turn(self, system: str, task: str) -> str:
        """The text of an episode's start: the user turn (system text, blank line, task), then the model opening."""
        user = f"{system}\n\n{task}" if system else task
        return f"{self.bos}{self.user_open}{user}{self.turn_end}\n{self.model_open}"

    def tool_turn(self, output: str) -> str:
        """What follows a model turn that ended at ``</execute>``: end of the model turn, the tool response as a user
        turn, and the next model opening."""
        return (f"{self.turn_end}\n{self.user_open}{self.tool_open}{output}{self.tool_close}{self.turn_end}\n"
                f"{self.model_open}")

    def to_dict(self) -> dict[str, Any]:
        """For manifests and checkpoints."""
        return {"action_tokens": {text: token for text, token in self.action_tokens}, "model_open": self.model_open,
                "turn_end": self.turn_end, "user_open": self.user_open}


def encode_with_actions(
    text: str, tokenizer: Any, action_tokens: Sequence[tuple[str, int]], add_special_tokens: bool = False
) -> tuple[list[int], list[tuple[int, int]]]:
    """Tokenise ``text``, mapping each action token string to its reserved id (training and episodes use this).

    Returns:
        ``(ids, offsets)``: token ids and each token's character span in ``text`` (special tokens the tokenizer adds
        get an empty span at 0).
    """
    actions = dict(action_tokens)
    if actions:
        pattern = "|".join(re.escape(token) for token in sorted(actions, key=len, reverse=True))
        pieces = re.split(f"({pattern})", text)
    else:
        pieces = [text]
    ids: list[int] = []
    offsets: list[tuple[int, int]] = []
    cursor = 0
    first = True
    for piece in pieces:
        if not piece:
            continue
        if piece in actions:
            ids.append(actions[piece])
            offsets.append((cursor, cursor + len(piece)))
        else:
            encoded = tokenizer(piece, add_special_tokens=add_special_tokens and first, return_offsets_mapping=True)
            ids.extend(int(i) for i in encoded["input_ids"])
            offsets.extend((cursor + a, cursor + b) if b > a else (0, 0) for a, b in encoded["offset_mapping"])
        first = False
        cursor += len(piece)
    return ids, offsets


def special_strings(tokenizer: Any, action_tokens: Sequence[tuple[str, int]]) -> list[str]:
    """Every string the tokenizer (or the action mapping) would turn into a control or action id when it appears
    in text: the tokenizer's special added tokens (chat markers, ``<bos>``, ``<unusedN>``, ...) and the action
    token strings."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return sorted({*(token.content for token in added.values() if token.special), *(t for t, _ in action_tokens)},
                  key=len, reverse=True)


_SPECIAL_PATTERNS: dict[tuple[int, tuple[tuple[str, int], ...]], re.Pattern[str]] = {}


def _special_pattern(tokenizer: Any, action_tokens: Sequence[tuple[str, int]]) -> re.Pattern[str]:
    """A regex matching any of :func:`special_strings` (compiled once per tokenizer: Gemma 3 has ~6,000)."""
    key = (id(tokenizer), tuple(action_tokens))
    if key not in _SPECIAL_PATTERNS:
        _SPECIAL_PATTERNS[key] = re.compile("|".join(map(re.escape, special_strings(tokenizer, action_tokens))))
    return _SPECIAL_PATTERNS[key]


def encode_tool_turn(output: str, tokenizer: Any, fmt: ActionFormat) -> list[int]:
    """Token ids of ``fmt.tool_turn(output)`` where ``output`` (tool output: written by model code) is plain text.

    Tool output that holds no special-token string tokenises exactly as the whole turn always did. Output that
    holds one (``<end_of_turn>``, ``<start_of_turn>``, ``<execute>``, ...) is encoded on its own with the
    tokenizer's ``split_special_tokens``, so those strings become ordinary text tokens and never the control or
    action ids; the turn's own markers around it keep theirs.
    """
    whole = fmt.tool_turn(output)
    if _special_pattern(tokenizer, fmt.action_tokens).search(output) is None:
        return encode_with_actions(whole, tokenizer, fmt.action_tokens)[0]
    start = whole.index(output, len(fmt.turn_end) + len(fmt.user_open))
    before, after = whole[:start], whole[start + len(output):]
    text_ids = tokenizer(output, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return [*encode_with_actions(before, tokenizer, fmt.action_tokens)[0], *(int(i) for i in text_ids),
            *encode_with_actions(after, tokenizer, fmt.action_tokens)[0]]


def decode_with_actions(token_ids: Sequence[int], tokenizer: Any, action_tokens: Sequence[tuple[str, int]]) -> str:
    """Token ids -> text, with the reserved action ids written as their strings (special tokens kept)."""
    by_id = {token: text for text, token in action_tokens}
    parts: list[str] = []
    run: list[int] = []
    for token in token_ids:
        if int(token) in by_id:
            if run:
                parts.append(tokenizer.decode(run, skip_special_tokens=False))
                run = []
            parts.append(by_id[int(token)])
        else:
            run.append(int(token))
    if run:
        parts.append(tokenizer.decode(run, skip_special_tokens=False))
    return "".join(parts)


def extract_code(turn_text: str) -> str | None:
    """The code of a model turn: the text after its last ``<execute>`` up to ``</execute>`` (or, when the model
    closed a block it never opened, everything before ``</execute>``). None when the turn holds no closed block."""
    close = turn_text.find(EXECUTE_CLOSE)
    if close < 0:
        return None
    body = turn_text[:close]
    opening = body.rfind(EXECUTE_OPEN)
    if opening >= 0:
        body = body[opening + len(EXECUTE_OPEN):]
    return body.strip("\n")

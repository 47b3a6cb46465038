"""Training data: JSONL reading, tokenisation with model-turn loss masks, packing and deterministic batching.

Row formats (one JSON object per line):

- ``{"text": "<bos><start_of_turn>user\\n...<end_of_turn>\\n<start_of_turn>model\\n...<end_of_turn>\\n..."}``: a
  pre-formatted chat string (paper app:dataset_format). Tokens after each ``<start_of_turn>model`` marker up to
  and including the turn's ``<end_of_turn>`` are labelled (the paper: "all tokens between <start_of_turn>model and
  the corresponding <end_of_turn> (inclusive) receive labels"); everything else (user turns, tool responses,
  ``<bos>``, delimiters outside model turns) gets -100. A model turn with no closing marker runs to the end of the
  text. The text is tokenised without adding special tokens (it already holds ``<bos>``).
- ``{"prompt": "...", "completion": "..."}``: a plain continuation (used by the ``--demo`` preset, whose questions are
  plain lines a base model continues). The prompt is tokenised as generation tokenises it (special tokens added);
  every completion token is a model-turn token.

The custom action tokens (paper: ``<execute>`` and ``</execute>``) are not in the tokenizer's vocabulary; they are
cut out of the text before tokenisation and replaced by their reserved ids, as an added token would be.

Order is deterministic (no shuffling, tab:hyperparameters): micro-batch ``k`` holds sequences ``k * B .. k * B + B - 1``
and the order repeats unchanged for later epochs, for the SST and the baseline alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sst_interp.codeact.format import GEMMA3_ACTION_IDS, encode_with_actions
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.jsonlines import json_objects

IGNORE_INDEX = -100


@dataclass(frozen=True)
class DataFormat:
    """How rows are read and masked.

    Args:
        text_field: JSON key of the pre-formatted chat string.
        model_turn_start: marker opening a model turn (tokens after it are labelled).
        turn_end: marker closing a turn (included in a model turn's labels).
        action_tokens: token string -> reserved vocabulary id.
        max_seq_len: examples longer than this are cut on the right.
    """

    text_field: str = "text"
    model_turn_start: str = "<start_of_turn>model"
    turn_end: str = "<end_of_turn>"
    action_tokens: tuple[tuple[str, int], ...] = GEMMA3_ACTION_IDS
    max_seq_len: int = 8192


@dataclass(frozen=True)
class TokenizedExample:
    """One tokenised training example.

    Args:
        index: 0-based position of the example in its file.
        input_ids: [T] int64.
        labels: [T] int64: the token id where the token is a model-turn token, else -100 (not shifted).
        truncated: whether the example was cut to ``max_seq_len``.
    """

    index: int
    input_ids: np.ndarray
    labels: np.ndarray
    truncated: bool = False


@dataclass(frozen=True)
class PackedSequence:
    """One training sequence: a single example or, when packing, several consecutive ones.

    Args:
        example_indices: indices of the examples it holds, in order.
        input_ids: [T] int64.
        labels: [T] int64 (not shifted; -100 where unlabelled).
        position_ids: [T] int64, restarting at 0 at every document.
        segment_starts: [T] bool, True at the first token of every document.
    """

    example_indices: tuple[int, ...]
    input_ids: np.ndarray
    labels: np.ndarray
    position_ids: np.ndarray
    segment_starts: np.ndarray


@dataclass
class Batch:
    """A micro-batch on a device.

    Args:
        input_ids: [B, T] long.
        labels: [B, T] long (not shifted; position t's label is predicted from position t-1).
        position_ids: [B, T] long; restart at 0 at each document and at the right padding, so the backbone builds a
            block-diagonal causal mask (documents and padding never attend to each other).
        segment_starts: [B, T] bool, True where a document (or the padding) starts: the state stream reads zero there.
        example_indices: per row, the example indices it holds.
        num_label_tokens: labelled positions after the shift (the loss's token count).
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor
    segment_starts: torch.Tensor
    example_indices: list[tuple[int, ...]]
    num_label_tokens: int

    def to(self, device: torch.device | str) -> Batch:
        """The batch on ``device``."""
        return Batch(
            self.input_ids.to(device),
            self.labels.to(device),
            self.position_ids.to(device),
            self.segment_starts.to(device),
            self.example_indices,
            self.num_label_tokens,
        )


def data_format_from_config(config: Any) -> DataFormat:
    """The :class:`DataFormat` of a :class:`~sst_interp.train.config.TrainConfig`."""
    return DataFormat(
        text_field=config.text_field,
        model_turn_start=config.model_turn_start,
        turn_end=config.turn_end,
        action_tokens=tuple(sorted(config.action_tokens.items())),
        max_seq_len=config.max_seq_len,
    )


# ------------------------------------------------------------------------------------------------ reading
def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file: one JSON object per non-blank line.

    Raises:
        UsageError: missing file, a line that is not JSON (with its line number), or a line that is not an object.
    """
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"training data file not found: {path}; pass an existing JSONL file")
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for number, row in json_objects(
                handle,
                not_json=lambda line, error: f"{path}, line {line}: not valid JSON ({error}); fix or remove that line",
                not_object=lambda line, value: f"{path}, line {line}: expected a JSON object, got "
                                               f"{type(value).__name__}"):
            row["_line"] = number
            rows.append(row)
    if not rows:
        raise UsageError(f"{path} holds no examples; write one JSON object per line")
    return rows


# ------------------------------------------------------------------------------------------------ tokenising
def model_turn_spans(text: str, fmt: DataFormat) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the labelled text of every model turn.

    A span starts right after a ``model_turn_start`` marker and ends after the next ``turn_end`` marker (inclusive),
    or at the end of the text when the turn is not closed.
    """
    spans = []
    cursor = 0
    while True:
        opening = text.find(fmt.model_turn_start, cursor)
        if opening < 0:
            return spans
        start = opening + len(fmt.model_turn_start)
        closing = text.find(fmt.turn_end, start)
        end = len(text) if closing < 0 else closing + len(fmt.turn_end)
        spans.append((start, end))
        cursor = end


def check_rows(rows: list[dict[str, Any]], fmt: DataFormat, source: str = "data") -> None:
    """Check every row's shape without a tokenizer, so that ``train`` refuses a bad row before it loads a model or
    writes anything: a string ``text`` field holding a model turn with content, or string ``prompt`` and
    ``completion`` fields with a non-empty completion. A UsageError names the line (what :func:`tokenize_row`
    would say later)."""
    for index, row in enumerate(rows):
        line = row.get("_line", index + 1)
        text = row.get(fmt.text_field)
        if isinstance(text, str):
            if not any(text[start:end].strip() for start, end in model_turn_spans(text, fmt)):
                raise UsageError(f"{source}, line {line}: no model-turn tokens; a chat row needs a "
                                 f"{fmt.model_turn_start!r} turn with content")
        elif isinstance(row.get("prompt"), str) and isinstance(row.get("completion"), str):
            if not row["completion"]:
                raise UsageError(f"{source}, line {line}: no model-turn tokens; a prompt/completion row needs a "
                                 "non-empty completion")
        else:
            raise UsageError(f"{source}, line {line}: a row needs a string field {fmt.text_field!r} (a "
                             "pre-formatted chat string) or string fields 'prompt' and 'completion'")


def tokenize_row(row: dict[str, Any], tokenizer: Any, fmt: DataFormat, index: int, source: str = "data") -> TokenizedExample:
    """Tokenise one row and build its labels (see the module docstring for the row formats).

    Raises:
        UsageError: an unknown row format, or a row without model-turn tokens.
    """
    line = row.get("_line", index + 1)
    if isinstance(row.get(fmt.text_field), str):
        text = row[fmt.text_field]
        ids, offsets = encode_with_actions(text, tokenizer, fmt.action_tokens, add_special_tokens=False)
        spans = model_turn_spans(text, fmt)
        labelled = [
            offset[1] > offset[0] and any(start <= offset[0] < end for start, end in spans) for offset in offsets
        ]
    elif isinstance(row.get("prompt"), str) and isinstance(row.get("completion"), str):
        prompt_ids, _ = encode_with_actions(row["prompt"], tokenizer, fmt.action_tokens, add_special_tokens=True)
        completion_ids, _ = encode_with_actions(row["completion"], tokenizer, fmt.action_tokens, add_special_tokens=False)
        ids = prompt_ids + completion_ids
        labelled = [False] * len(prompt_ids) + [True] * len(completion_ids)
    else:
        raise UsageError(
            f"{source}, line {line}: a row needs a string field {fmt.text_field!r} (a pre-formatted chat string) or "
            f"string fields 'prompt' and 'completion'"
        )
    truncated = len(ids) > fmt.max_seq_len
    ids, labelled = ids[: fmt.max_seq_len], labelled[: fmt.max_seq_len]
    input_ids = np.asarray(ids, dtype=np.int64)
    labels = np.where(np.asarray(labelled, dtype=bool), input_ids, IGNORE_INDEX).astype(np.int64)
    if not (labels[1:] != IGNORE_INDEX).any():
        where = f" within the first {fmt.max_seq_len} tokens (raise --max-seq-len)" if truncated else ""
        raise UsageError(
            f"{source}, line {line}: no model-turn tokens{where}; a chat row needs a {fmt.model_turn_start!r} turn "
            f"with content, a prompt/completion row a non-empty completion"
        )
    return TokenizedExample(index, input_ids, labels, truncated)


def load_examples(path: str | Path, tokenizer: Any, fmt: DataFormat, vocab_size: int | None = None) -> list[TokenizedExample]:
    """Read and tokenise a JSONL file.

    Args:
        path: the JSONL file.
        tokenizer: a Hugging Face fast tokenizer (offsets are needed).
        fmt: the :class:`DataFormat`.
        vocab_size: the model's vocabulary size; action token ids at or above it are a :class:`UsageError`.
    """
    if vocab_size is not None:
        bad = {token: token_id for token, token_id in fmt.action_tokens if token_id >= vocab_size}
        if bad:
            raise UsageError(f"action token ids {bad} are outside the model's vocabulary of {vocab_size}; "
                             f"map them to reserved ids below {vocab_size} with --action-tokens")
    rows = read_jsonl(path)
    return [tokenize_row(row, tokenizer, fmt, index, source=str(path)) for index, row in enumerate(rows)]


# ------------------------------------------------------------------------------------------------ packing, batching
def _single(example: TokenizedExample) -> PackedSequence:
    length = len(example.input_ids)
    starts = np.zeros(length, dtype=bool)
    starts[0] = True
    return PackedSequence((example.index,), example.input_ids, example.labels, np.arange(length, dtype=np.int64), starts)


def pack_examples(examples: Sequence[TokenizedExample], max_len: int, pack: bool) -> list[PackedSequence]:
    """Turn examples into training sequences, in order.

    Args:
        examples: tokenised examples in file order.
        max_len: longest sequence when packing.
        pack: when False every example is its own sequence; when True consecutive examples are concatenated
            greedily (an example that does not fit starts the next sequence), each with its own position ids.
    """
    if not pack:
        return [_single(example) for example in examples]
    sequences: list[PackedSequence] = []
    group: list[TokenizedExample] = []
    used = 0
    for example in examples:
        if group and used + len(example.input_ids) > max_len:
            sequences.append(_concatenate(group))
            group, used = [], 0
        group.append(example)
        used += len(example.input_ids)
    if group:
        sequences.append(_concatenate(group))
    return sequences


def _concatenate(group: list[TokenizedExample]) -> PackedSequence:
    parts = [_single(example) for example in group]
    return PackedSequence(
        tuple(example.index for example in group),
        np.concatenate([p.input_ids for p in parts]),
        np.concatenate([p.labels for p in parts]),
        np.concatenate([p.position_ids for p in parts]),
        np.concatenate([p.segment_starts for p in parts]),
    )


def collate(sequences: Sequence[PackedSequence], pad_token_id: int) -> Batch:
    """Right-pad sequences into a :class:`Batch` (on the CPU).

    The padding of a row is its own segment (positions restart at 0, no labels), so no real token attends to it.
    """
    width = max(len(s.input_ids) for s in sequences)
    rows = len(sequences)
    input_ids = np.full((rows, width), pad_token_id, dtype=np.int64)
    labels = np.full((rows, width), IGNORE_INDEX, dtype=np.int64)
    position_ids = np.zeros((rows, width), dtype=np.int64)
    starts = np.zeros((rows, width), dtype=bool)
    for row, seq in enumerate(sequences):
        n = len(seq.input_ids)
        input_ids[row, :n], labels[row, :n] = seq.input_ids, seq.labels
        position_ids[row, :n], starts[row, :n] = seq.position_ids, seq.segment_starts
        if n < width:
            position_ids[row, n:] = np.arange(width - n)
            starts[row, n] = True
    return Batch(
        torch.from_numpy(input_ids),
        torch.from_numpy(labels),
        torch.from_numpy(position_ids),
        torch.from_numpy(starts),
        [s.example_indices for s in sequences],
        int((labels[:, 1:] != IGNORE_INDEX).sum()),
    )


class DataOrder:
    """The deterministic micro-batch sequence of a run (no shuffling; epochs repeat the same order).

    Args:
        sequences: training sequences in order.
        micro_batch_size: sequences per micro-batch.
        pad_token_id: padding id for :func:`collate`.
    """

    def __init__(self, sequences: Sequence[PackedSequence], micro_batch_size: int, pad_token_id: int) -> None:
        if not sequences:
            raise UsageError("no training sequences; the training file holds no usable examples")
        self.sequences = list(sequences)
        self.micro_batch_size = micro_batch_size
        self.pad_token_id = pad_token_id
        self.num_micro_batches = -(-len(self.sequences) // micro_batch_size)
        self._label_counts: dict[int, int] = {}

    def batch(self, position: int) -> Batch:
        """Micro-batch number ``position`` (0-based over the whole run; wraps around after each epoch)."""
        k = position % self.num_micro_batches
        chunk = self.sequences[k * self.micro_batch_size : (k + 1) * self.micro_batch_size]
        return collate(chunk, self.pad_token_id)

    def num_label_tokens(self, position: int) -> int:
        """``batch(position).num_label_tokens`` without collating the batch (what a data-parallel rank needs to know
        about the micro-batches of the other ranks)."""
        k = position % self.num_micro_batches
        if k not in self._label_counts:
            chunk = self.sequences[k * self.micro_batch_size : (k + 1) * self.micro_batch_size]
            self._label_counts[k] = sum(int((s.labels[1:] != IGNORE_INDEX).sum()) for s in chunk)
        return self._label_counts[k]

    def epoch(self, position: int) -> float:
        """Fractional epoch reached after ``position`` micro-batches."""
        return position / self.num_micro_batches

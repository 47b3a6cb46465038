"""Training data: exact loss masks, action tokens, bad input, packing and the deterministic order."""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.train.data import (
    IGNORE_INDEX,
    DataFormat,
    DataOrder,
    collate,
    load_examples,
    pack_examples,
    read_jsonl,
    tokenize_row,
)

from .conftest import ACTIONS, write_jsonl

FMT = DataFormat(action_tokens=tuple(ACTIONS.items()), max_seq_len=512)


def _ids(tokenizer, pieces):
    """Hand tokenisation: each piece is a special token, an action token or one character."""
    special = {"<bos>": 2}
    out = []
    for piece in pieces:
        if piece in ACTIONS:
            out.append(ACTIONS[piece])
        elif piece in special:
            out.append(special[piece])
        else:
            out.append(tokenizer.convert_tokens_to_ids(piece))
    return out


def test_chat_mask_labels_exactly_the_model_turns(tokenizer):
    text = (
        "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nab<execute>c</execute><end_of_turn>\n"
        "<start_of_turn>user\nx<end_of_turn>\n<start_of_turn>model\nd<end_of_turn>\n"
    )
    # (token, labelled) written out by hand from app:dataset_format: after "<start_of_turn>model" up to and
    # including its "<end_of_turn>".
    U, L = False, True
    expected = [
        ("<bos>", U), ("<start_of_turn>", U), *[(c, U) for c in "user\nhi"], ("<end_of_turn>", U), ("\n", U),
        ("<start_of_turn>", U), *[(c, U) for c in "model"],
        ("\n", L), ("a", L), ("b", L), ("<execute>", L), ("c", L), ("</execute>", L), ("<end_of_turn>", L),
        ("\n", U), ("<start_of_turn>", U), *[(c, U) for c in "user\nx"], ("<end_of_turn>", U), ("\n", U),
        ("<start_of_turn>", U), *[(c, U) for c in "model"],
        ("\n", L), ("d", L), ("<end_of_turn>", L), ("\n", U),
    ]
    ids = _ids(tokenizer, [tok for tok, _ in expected])
    labels = [i if lab else IGNORE_INDEX for i, (_, lab) in zip(ids, expected)]
    example = tokenize_row({"text": text}, tokenizer, FMT, index=0)
    assert example.input_ids.tolist() == ids
    assert example.labels.tolist() == labels
    assert ACTIONS["<execute>"] in example.input_ids and ACTIONS["</execute>"] in example.input_ids


def test_unclosed_model_turn_runs_to_the_end(tokenizer):
    example = tokenize_row({"text": "<start_of_turn>model\nok"}, tokenizer, FMT, index=0)
    assert (example.labels == IGNORE_INDEX).tolist() == [True] * 6 + [False] * 3


def test_prompt_completion_rows_label_the_completion(tokenizer):
    example = tokenize_row({"prompt": "6 + 3 =", "completion": " 9\n"}, tokenizer, FMT, index=0)
    prompt = tokenizer("6 + 3 =").input_ids  # with <bos>, as generation tokenises a prompt
    assert example.input_ids.tolist() == prompt + _ids(tokenizer, [" ", "9", "\n"])
    assert example.labels.tolist() == [IGNORE_INDEX] * len(prompt) + _ids(tokenizer, [" ", "9", "\n"])


def test_action_tokens_are_configurable(tokenizer):
    fmt = DataFormat(action_tokens=(("<run>", 120),), max_seq_len=512)
    example = tokenize_row({"text": "<start_of_turn>model\n<run>x<end_of_turn>"}, tokenizer, fmt, index=0)
    assert 120 in example.input_ids.tolist()
    plain = tokenize_row({"text": "<start_of_turn>model\n<execute>x<end_of_turn>"}, tokenizer, fmt, index=0)
    assert ACTIONS["<execute>"] not in plain.input_ids.tolist()  # not mapped: tokenised as characters


def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="training data file not found"):
        read_jsonl(tmp_path / "nope.jsonl")


def test_malformed_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "a"}\n\n{"text": oops}\n')
    with pytest.raises(UsageError, match=r"line 3: not valid JSON"):
        read_jsonl(path)


def test_rows_without_model_turn_tokens_are_refused(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "<start_of_turn>model\nok<end_of_turn>"},
                                              {"text": "<bos><start_of_turn>user\nonly a user<end_of_turn>\n"}])
    with pytest.raises(UsageError, match="line 2: no model-turn tokens"):
        load_examples(path, tokenizer, FMT)
    with pytest.raises(UsageError, match="line 1: a row needs a string field 'text'"):
        load_examples(write_jsonl(tmp_path / "e.jsonl", [{"question": "x"}]), tokenizer, FMT)


def test_action_ids_outside_the_vocabulary_are_refused(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "<start_of_turn>model\nok<end_of_turn>"}])
    with pytest.raises(UsageError, match="outside the model's vocabulary of 100"):
        load_examples(path, tokenizer, FMT, vocab_size=100)


def test_truncation_that_drops_every_label_is_refused(tokenizer):
    fmt = DataFormat(action_tokens=(), max_seq_len=5)
    with pytest.raises(UsageError, match="within the first 5 tokens"):
        tokenize_row({"text": "<bos>user text<start_of_turn>model\nok"}, tokenizer, fmt, index=0)


def _example(index, length, first_label):
    from sst_interp.train.data import TokenizedExample

    ids = np.arange(10 * index + 3, 10 * index + 3 + length, dtype=np.int64)
    labels = np.where(np.arange(length) >= first_label, ids, IGNORE_INDEX)
    return TokenizedExample(index, ids, labels)


def test_packing_restarts_positions_and_states_per_document():
    examples = [_example(0, 5, 2), _example(1, 4, 1), _example(2, 6, 3)]
    packed = pack_examples(examples, max_len=10, pack=True)
    assert [s.example_indices for s in packed] == [(0, 1), (2,)]
    assert packed[0].position_ids.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3]
    assert packed[0].segment_starts.tolist() == [True, False, False, False, False, True, False, False, False]
    batch = collate(packed, pad_token_id=0)
    assert batch.input_ids.shape == (2, 9)
    # the second row is padded: the padding is its own segment with positions from 0 and no labels
    assert batch.position_ids[1].tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2]
    assert batch.segment_starts[1].tolist() == [True] + [False] * 5 + [True, False, False]
    assert batch.labels[1, 6:].tolist() == [IGNORE_INDEX] * 3
    # labelled positions after the shift: (5-2) + (4-1) in row 0, 6-3 in row 1
    assert batch.num_label_tokens == 3 + 3 + 3
    assert [s.example_indices for s in pack_examples(examples, 10, pack=False)] == [(0,), (1,), (2,)]


def test_order_is_deterministic_and_wraps_around():
    examples = [_example(i, 4, 1) for i in range(5)]
    order = DataOrder(pack_examples(examples, 64, pack=False), micro_batch_size=2, pad_token_id=0)
    seen = [order.batch(p).example_indices for p in range(5)]
    assert seen == [[(0,), (1,)], [(2,), (3,)], [(4,)], [(0,), (1,)], [(2,), (3,)]]
    assert order.epoch(6) == 2.0

"""The looped organism: transformers' own HRM-Text, trained from scratch on the hops task at a loop count
sampled per batch, so that one model runs at every depth (as Geiping et al. train Huginn's recurrence).

Why HRM-Text: its lens at H-cycle ``i`` is ``lm_head(z_H)`` after cycle ``i``, which is exactly the logits the
model emits at depth ``i`` (cycles ``1..i`` compute the same whatever ``H_cycles`` is). So "what iteration ``i``
knows" and "what depth ``i`` answers" are one quantity, and the recorded lens needs no approximation. One block per
stack and one L-cycle keep an H-cycle small (two blocks), so the depth a question needs is a real constraint.

The whole forward is transformers' ``HrmTextForCausalLM``; this module only builds its config, its batches, and
the depth-by-hop evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
import torch
from transformers import HrmTextForCausalLM, PreTrainedTokenizerBase

from sst_interp.organism.tables import DepthByHop, tally_by_hop
from sst_interp.organism.task import QUERY, SEPARATOR, HopsQuestion, query_text

IGNORE_INDEX = -100


def set_depth(model: HrmTextForCausalLM, depth: int) -> None:
    """Run ``depth`` H-cycles per token from now on (the KV-slot count follows, as the recorder sets it).

    A one-pass model (the SST organism's backbone) has no loop: depth 1 leaves it as it is, another is a ValueError.
    """
    config = model.config
    if config.model_type != "hrm_text":
        if depth != 1:
            raise ValueError(f"a one-pass {config.model_type} model runs at depth 1 only, not {depth}")
        return
    config.H_cycles = depth
    config.num_hidden_layers = config.num_layers_per_stack * depth * (config.L_cycles + 1)


def training_text(question: HopsQuestion, follow_ups: Sequence[str | tuple[str, int]] = ()) -> str:
    """A training sequence: the prompt, its answer, then one more query per entry of ``follow_ups`` with its
    answer (e.g. ``c=b a=7 b=a ?c7 ?a7``): a variable (answer: its chain's digit), or a counted query ``(variable,
    k)`` (``?2c`` and the hop-k value).

    A recorded prompt is this sequence's prefix up to the first query's variable, so the extra queries only add
    supervised positions (each a lookup over the same bindings); they never change what the first query sees.
    """
    text = question.prompt + question.answer
    for entry in follow_ups:
        variable, count = (entry, None) if isinstance(entry, str) else entry
        chain = question.successors[variable]
        text += SEPARATOR + query_text(variable, count) + (chain[-1] if count is None else chain[count])
    return text


def encode_training(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forcing ids and labels of :func:`training_text` sequences (all of one length).

    Labels sit on every queried variable's column (target: the answer after it, the token after the variable that
    follows ``?`` or ``?k``); every other column is IGNORE_INDEX.

    Returns:
        input_ids and labels, both ``[batch, tokens]`` (``<bos>`` first).
    """
    rows = [tokenizer(text)["input_ids"] for text in texts]
    if len({len(row) for row in rows}) != 1:
        raise ValueError("training sequences of one batch differ in length; draw them from one HopsSpec and give "
                         "each the same number of follow-up queries")
    input_ids = torch.tensor(rows, dtype=torch.long)
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    query = tokenizer.convert_tokens_to_ids(QUERY)
    # every sequence has its queries at the same columns, because every prompt of a spec has one length; a query's
    # variable is the last token before its answer: ``?c`` or ``?3c``
    digits = torch.tensor(tokenizer.convert_tokens_to_ids(list("0123456789")))
    starts = (input_ids[0, :-2] == query).nonzero().flatten()
    counted = torch.isin(input_ids[0, starts + 1], digits)
    columns = starts + 1 + counted.long()
    labels[:, columns] = input_ids[:, columns + 1]
    return input_ids, labels


def encode_prompts(tokenizer: PreTrainedTokenizerBase, questions: Sequence[HopsQuestion]) -> torch.Tensor:
    """``<bos> prompt`` ids, ``[batch, 1 + prompt_length]`` (one spec's prompts share a length)."""
    rows = [tokenizer(q.prompt)["input_ids"] for q in questions]
    if len({len(row) for row in rows}) != 1:
        raise ValueError("hops prompts of one batch differ in length; draw them from one HopsSpec")
    return torch.tensor(rows, dtype=torch.long)


def answer_loss(model: HrmTextForCausalLM, input_ids: torch.Tensor, labels: torch.Tensor,
                with_accuracy: bool = False) -> torch.Tensor | tuple[torch.Tensor, float]:
    """Mean cross-entropy over the labelled columns, at the model's current depth; with ``with_accuracy`` also the
    fraction of rows whose first query's answer is the argmax."""
    logits = model(input_ids=input_ids, use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                             ignore_index=IGNORE_INDEX)
    if not with_accuracy:
        return loss
    first = int((labels[0] != IGNORE_INDEX).nonzero()[0])  # the recorded query's "=" column
    accuracy = (logits[:, first].argmax(-1) == labels[:, first]).float().mean().item()
    return loss, accuracy


@torch.no_grad()
def answer_predictions(model: HrmTextForCausalLM, tokenizer: PreTrainedTokenizerBase,
                       questions: Sequence[HopsQuestion], depth: int, batch_size: int = 256) -> list[str]:
    """The greedy first answer token of each question at ``depth`` (its string)."""
    set_depth(model, depth)
    out: list[str] = []
    for start in range(0, len(questions), batch_size):
        chunk = questions[start:start + batch_size]
        logits = model(input_ids=encode_prompts(tokenizer, chunk), use_cache=False, logits_to_keep=1).logits[:, -1]
        out.extend(tokenizer.convert_ids_to_tokens(logits.argmax(-1).tolist()))
    return out


def depth_by_hop(model: HrmTextForCausalLM, tokenizer: PreTrainedTokenizerBase,
                 questions: Sequence[HopsQuestion], depths: Sequence[int]) -> DepthByHop:
    """``table[depth][hops] = (correct, total)``: exact-match counts of the first answer token."""
    return {depth: tally_by_hop(questions, answer_predictions(model, tokenizer, questions, depth))
            for depth in depths}

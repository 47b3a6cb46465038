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

from sst_interp.organism.task import HopsQuestion
from sst_interp.organism.tokenizer import EOS_ID

IGNORE_INDEX = -100


def set_depth(model: HrmTextForCausalLM, depth: int) -> None:
    """Run ``depth`` H-cycles per token from now on (the KV-slot count follows, as the recorder sets it)."""
    config = model.config
    config.H_cycles = depth
    config.num_hidden_layers = config.num_layers_per_stack * depth * (config.L_cycles + 1)


def encode_batch(tokenizer: PreTrainedTokenizerBase, questions: Sequence[HopsQuestion]
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forcing ids and labels: ``<bos> prompt answer`` with labels on the answer and the ``<eos>`` after it.

    Every hops prompt of one spec has one length, so the batch needs no padding.

    Returns:
        input_ids ``[batch, 1 + prompt_length + 1]`` and labels of the same shape (IGNORE_INDEX except at the
        last two positions: the answer digit, then ``<eos>``).
    """
    rows = [tokenizer(q.prompt + q.answer)["input_ids"] for q in questions]
    if len({len(row) for row in rows}) != 1:
        raise ValueError("hops prompts of one batch differ in length; draw them from one HopsSpec")
    input_ids = torch.tensor(rows, dtype=torch.long)
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[:, -2] = input_ids[:, -1]  # the prompt's last column ("=") predicts the answer
    labels[:, -1] = EOS_ID
    return input_ids, labels


def answer_loss(model: HrmTextForCausalLM, input_ids: torch.Tensor, labels: torch.Tensor,
                with_accuracy: bool = False) -> torch.Tensor | tuple[torch.Tensor, float]:
    """Mean cross-entropy over the labelled positions (answer and <eos>), at the model's current depth; with
    ``with_accuracy`` also the fraction of rows whose answer token is the argmax."""
    logits = model(input_ids=input_ids, use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                             ignore_index=IGNORE_INDEX)
    if not with_accuracy:
        return loss
    accuracy = (logits[:, -2].argmax(-1) == labels[:, -2]).float().mean().item()
    return loss, accuracy


@torch.no_grad()
def answer_predictions(model: HrmTextForCausalLM, tokenizer: PreTrainedTokenizerBase,
                       questions: Sequence[HopsQuestion], depth: int, batch_size: int = 256) -> list[str]:
    """The greedy first answer token of each question at ``depth`` (its string)."""
    set_depth(model, depth)
    out: list[str] = []
    for start in range(0, len(questions), batch_size):
        chunk = questions[start:start + batch_size]
        input_ids, _ = encode_batch(tokenizer, chunk)
        logits = model(input_ids=input_ids[:, :-1], use_cache=False, logits_to_keep=1).logits[:, -1]
        out.extend(tokenizer.convert_ids_to_tokens(logits.argmax(-1).tolist()))
    return out


def depth_by_hop(model: HrmTextForCausalLM, tokenizer: PreTrainedTokenizerBase,
                 questions: Sequence[HopsQuestion], depths: Sequence[int]) -> dict[int, dict[int, tuple[int, int]]]:
    """``table[depth][hops] = (correct, total)``: exact-match counts of the first answer token."""
    table: dict[int, dict[int, tuple[int, int]]] = {}
    for depth in depths:
        predicted = answer_predictions(model, tokenizer, questions, depth)
        counts: dict[int, list[int]] = {}
        for question, token in zip(questions, predicted):
            cell = counts.setdefault(question.hops, [0, 0])
            cell[0] += int(token == question.answer)
            cell[1] += 1
        table[depth] = {h: (c, n) for h, (c, n) in sorted(counts.items())}
    return table

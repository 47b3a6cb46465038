"""Which binding each attention head reads at the hops organism's answer column, per iteration (``record
--attention``; ``docs/organism.md``).

In the hops task a hop is one attention read: the answer column holding the pointer ``b`` finds the binding token
``b=a`` and takes ``a``. So the key a head attends to most at the answer column names the hop it takes: the binding
of ``chain[j-1]`` is hop ``j``'s. :func:`attention_by_hop` labels every (question, iteration, layer, head) with the
hop whose binding is its heaviest key; :func:`hop_reads` tabulates, per (iteration, layer), the head that reads a
given hop most often.
"""

from __future__ import annotations

import pandas as pd

from sst_interp.analyses.hops import question_truth
from sst_interp.kernels.errors import UsageError
from sst_interp.organism.task import BIND
from sst_interp.organism.tokenizer import hops_tokenizer
from sst_interp.store import Run

ATTENTION_BY_HOP_COLUMNS = ("question_id", "hops", "iteration", "layer", "head", "key_position", "key_token",
                            "weight", "hop_read")
#: ``hop_read`` of a heaviest key that is a binding off the question's chain (a distractor chain's).
OFF_CHAIN = 0
#: ``hop_read`` of a heaviest key that is no binding at all (the BOS, ``?``, the queried variable).
NOT_A_BINDING = -1


def key_hops(prompt_tokens: list[str], chain: list[str]) -> list[int]:
    """For each prompt token (the attention's key index), the hop whose binding it is: ``j`` for the binding
    ``chain[j-1]=chain[j]`` (1 .. hops), :data:`OFF_CHAIN` for another binding, :data:`NOT_A_BINDING` otherwise."""
    hop_of = {chain[j - 1]: j for j in range(1, len(chain))}
    out = []
    for token in prompt_tokens:
        if BIND not in token:
            out.append(NOT_A_BINDING)
        else:
            out.append(hop_of.get(token.split(BIND)[0], OFF_CHAIN))
    return out


def attention_by_hop(run: Run, depth: int) -> pd.DataFrame:
    """One row per (question, iteration, layer, head) at the answer column (generated position 0, first turn): its
    heaviest key, the key's token and weight, and ``hop_read`` (:func:`key_hops`). Columns
    :data:`ATTENTION_BY_HOP_COLUMNS`.

    Raises:
        UsageError: the run holds no attention at ``depth`` (record with ``--attention``).
    """
    attention = run.attention(depth)
    attention = attention[(attention["turn"] == 0) & (attention["position"] == 0)]
    if attention.empty:
        raise UsageError(f"{run.path} holds no attention at the answer position at depth {depth}; record with "
                         "--attention all")
    truth = question_truth(run)
    prompts = run.questions().set_index("question_id")["prompt"]
    tokenizer = hops_tokenizer()
    heaviest = attention.loc[attention.groupby(["question_id", "iteration", "layer", "head"])["weight"].idxmax()]
    rows = []
    for question_id, group in heaviest.groupby("question_id"):
        tokens = tokenizer.convert_ids_to_tokens(tokenizer(prompts[question_id])["input_ids"])
        hops = key_hops(tokens, list(truth.at[question_id, "chain"]))
        for row in group.itertuples(index=False):
            key = int(row.key_position)
            rows.append((question_id, int(truth.at[question_id, "hops"]), int(row.iteration), int(row.layer),
                         int(row.head), key, tokens[key], float(row.weight), hops[key]))
    return pd.DataFrame(rows, columns=list(ATTENTION_BY_HOP_COLUMNS))


def hop_reads(frame: pd.DataFrame, predicted: dict[tuple[int, int], int]) -> pd.DataFrame:
    """Per (iteration, layer) with a predicted hop ``p = predicted[(iteration, layer)]``, over the questions with at
    least ``p`` hops: the head whose heaviest key is hop ``p``'s binding most often and that fraction
    (``reads_predicted``); and what the block does read: the head whose heaviest key is on the question's chain most
    often (``chain_head``), the hop it reads most often (``chain_head_reads``) and that hop's share of its reads.

    Args:
        frame: :func:`attention_by_hop`.
        predicted: ``(iteration, layer) -> hop`` the hypothesis says that block reads.
    """
    rows = []
    for (iteration, layer), cells in frame.groupby(["iteration", "layer"]):
        hop = predicted.get((int(iteration), int(layer)))
        if hop is None:
            continue
        cells = cells[cells["hops"] >= hop]
        if cells.empty:
            continue
        reads = cells.groupby("head")["hop_read"]
        share = reads.apply(lambda values: float((values == hop).mean()))
        on_chain = reads.apply(lambda values: float((values >= 1).mean()))
        chain_head = int(on_chain.idxmax())
        chain_reads = cells[cells["head"] == chain_head]["hop_read"]
        modal = int(chain_reads.mode().iloc[0])
        rows.append((int(iteration), int(layer), hop, int(cells["question_id"].nunique()), int(share.idxmax()),
                     float(share.max()), chain_head, modal, float((chain_reads == modal).mean())))
    return pd.DataFrame(rows, columns=["iteration", "layer", "predicted_hop", "questions", "best_head",
                                       "reads_predicted", "chain_head", "chain_head_reads", "chain_head_share"])

"""The organisms' own tokenizer: one token per binding, variable, digit and ``?`` of the hops task, saved as a
Hugging Face tokenizer.

Ids 0-2 are ``<pad>``, ``<bos>``, ``<eos>``; then the task's tokens (:func:`sst_interp.organism.task.vocabulary`).
Text splits at spaces, then into bindings (``c=7``) and single characters.
Encoding puts ``<bos>`` in front, as the recorder expects of a causal LM's tokenizer. A character outside the
vocabulary is an error at encoding time (there is no ``<unk>``): a prompt the organism could not have seen must
not be silently mapped to something it has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sst_interp.kernels.errors import UsageError
from sst_interp.organism.task import vocabulary

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


def hops_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer of the hops task (``len(SPECIAL_TOKENS) + len(vocabulary())`` ids)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *vocabulary()))}
    # WordLevel needs an unknown token; <pad> stands in and encode_prompt refuses anything outside the vocabulary
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    binding = Regex("[a-z]=[a-z0-9]|.")
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                     pre_tokenizers.Split(binding, behavior="isolated")])
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", BOS_ID)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", padding_side="left")


def check_covers_task(tokenizer: PreTrainedTokenizerBase) -> None:
    """UsageError unless ``tokenizer`` maps every task symbol to one token of its own and has pad, bos and eos.

    Args:
        tokenizer: any Hugging Face tokenizer (a checkpoint's, before training or recording on the task).
    """
    vocab = tokenizer.get_vocab()
    missing = [symbol for symbol in vocabulary() if symbol not in vocab]
    if missing:
        shown = " ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise UsageError(f"the tokenizer has no token for the hops symbols {shown} ({len(missing)} missing); use the "
                         "organism tokenizer (sst_interp.organism.tokenizer.hops_tokenizer)")
    specials = {"pad": tokenizer.pad_token_id, "bos": tokenizer.bos_token_id, "eos": tokenizer.eos_token_id}
    absent = [name for name, token_id in specials.items() if token_id is None]
    if absent:
        raise UsageError(f"the tokenizer has no {', '.join(absent)} token; the hops task needs pad, bos and eos")


def is_hops_tokenizer(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether ``tokenizer`` is the organism tokenizer: exactly its vocabulary, id for id."""
    expected = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *vocabulary()))}
    return dict(tokenizer.get_vocab()) == expected

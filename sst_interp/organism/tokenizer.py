"""The organisms' own tokenizer: one token per binding, variable, digit and ``?`` of the hops task, saved as a
Hugging Face tokenizer.

Ids 0-2 are ``<pad>``, ``<bos>``, ``<eos>``; then the task's tokens (:func:`sst_interp.organism.task.vocabulary`).
Text splits at spaces, then into bindings (``c=7``) and single characters.
Encoding puts ``<bos>`` in front, as the recorder expects of a causal LM's tokenizer.

The saved tokenizer has no ``<unk>``: Hugging Face's WordLevel model needs one, and ``<pad>`` stands in, so on its
own it would map a character it lacks (a capital letter, a space inside a binding) to ``<pad>`` without a word.
The suite's entry points (``generate``, ``record``) therefore check every text an organism is given with
:func:`check_organism_text` first: text outside the vocabulary, or a counted query (``?3c``) longer than its
variable's chain, is one ``error:`` line, so a prompt the organism could not have seen is never silently turned
into one it could.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import re

from sst_interp.kernels.errors import UsageError
from sst_interp.organism.task import BIND, QUERY, VARIABLES, vocabulary

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
#: How a word (text between spaces) splits into tokens: bindings, else single characters.
TOKEN_PATTERN = "[a-z]=[a-z0-9]|."
# a counted query: ?, the hop count, the variable (the plain query ?c has no count)
_COUNTED_QUERY = re.compile(rf"\{QUERY}([1-9])([{VARIABLES}])")


def hops_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer of the hops task (``len(SPECIAL_TOKENS) + len(vocabulary())`` ids)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *vocabulary()))}
    # WordLevel needs an unknown token; <pad> stands in, and check_organism_text refuses text outside the vocabulary
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    binding = Regex(TOKEN_PATTERN)
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


def unknown_pieces(text: str) -> list[tuple[str, str]]:
    """``(word, piece)`` for every piece of ``text`` the organism tokenizer has no token for, in order (none: it
    encodes); a word is text between whitespace, split into pieces as the tokenizer splits it."""
    known = set(vocabulary())
    pattern = re.compile(TOKEN_PATTERN, re.DOTALL)
    return [(word, piece) for word in text.split() for piece in pattern.findall(word) if piece not in known]


def counted_query_excess(text: str) -> tuple[str, int, int] | None:
    """``(query, count, chain)`` when ``text`` ends in a counted query (``?3c``) that follows more bindings than its
    variable's chain in ``text`` holds (the chain stops at a digit or at a variable bound nowhere; a chain that
    loops back never ends); else None."""
    words = text.split()
    match = _COUNTED_QUERY.fullmatch(words[-1]) if words else None
    if match is None:
        return None
    bound = {word[0]: word[2] for word in words[:-1] if len(word) == 3 and word[1] == BIND}
    count, variable, length, seen = int(match.group(1)), match.group(2), 0, set()
    while variable in bound:
        if variable in seen:
            return None
        seen.add(variable)
        variable, length = bound[variable], length + 1
    return (words[-1], count, length) if count > length else None


def check_organism_text(tokenizer: PreTrainedTokenizerBase, text: str, where: str = "the prompt") -> None:
    """UsageError when ``tokenizer`` is the organism's and ``text`` holds what it cannot encode (a capital letter, a
    space inside a binding, any character outside a-z, 0-9, ``?`` and bindings), or ends in a counted query longer
    than its chain; nothing for any other tokenizer.

    Args:
        tokenizer: the model's tokenizer.
        text: what will be encoded.
        where: how the message names ``text`` (``the prompt``, ``question hops-test-0003's prompt``).
    """
    if not is_hops_tokenizer(tokenizer):
        return
    unknown = unknown_pieces(text)
    if unknown:
        word, piece = unknown[0]
        raise UsageError(f"{where} has {piece!r} (in {word!r}), which the hops organism's tokenizer cannot encode: "
                         "it knows lowercase variables a-z, digits, '?' and bindings written without spaces (c=b); "
                         "write the prompt in those")
    excess = counted_query_excess(text)
    if excess is not None:
        query, count, length = excess
        raise UsageError(f"{where} asks {query}, {count} hops, but the chain of {query[-1]!r} in it has {length} "
                         f"binding{'s' if length != 1 else ''}; give a count of at most {length} or bind more")

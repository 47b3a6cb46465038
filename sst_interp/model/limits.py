"""The sizes of a loaded model that bound what a command may ask of it (vocabulary, hidden size, context), and the
check that the model's weights are somewhere they can run.

Flags such as ``--top-k``, ``--sketch-k``, ``--action-tokens`` and ``--max-new-tokens`` can only be checked once the
model is known; ``record`` and ``generate`` check them right after the load, before anything is written or
generated, so a value beyond the model is one ``error:`` line instead of an IndexError or a run without end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sst_interp.kernels.errors import UsageError


@dataclass(frozen=True)
class ModelLimits:
    """What a loaded model can do.

    Args:
        vocab_size: rows of the output head (the width of a logits row; token ids are below it).
        hidden_size: d, the width of a hidden state.
        context: the most positions the model was built for (``max_position_embeddings``); None when the config
            does not say.
    """

    vocab_size: int
    hidden_size: int
    context: int | None

    @classmethod
    def of(cls, sst: Any) -> ModelLimits:
        """The limits of an :class:`~sst_interp.model.sst.SSTModel` (read from its backbone's config and head)."""
        backbone = sst.backbone
        config = backbone.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        head = backbone.get_output_embeddings()
        vocab = int(head.weight.shape[0]) if head is not None else int(text.vocab_size)
        context = getattr(text, "max_position_embeddings", None)
        return cls(vocab_size=vocab, hidden_size=int(sst.hidden_size), context=int(context) if context else None)

    def check_top_k(self, top_k: int, flag: str = "--top-k") -> None:
        """``top_k`` logits per position must exist: at most the vocabulary."""
        if top_k > self.vocab_size:
            raise UsageError(f"{flag} {top_k} is wider than the model's vocabulary of {self.vocab_size} tokens; "
                             f"give at most {self.vocab_size}")

    def check_sketch_k(self, sketch_k: int | None) -> None:
        """A sketch keeps ``sketch_k`` of the d values of a hidden state: at most d."""
        if sketch_k is not None and sketch_k > self.hidden_size:
            raise UsageError(f"--sketch-k {sketch_k} is more than the model's hidden size {self.hidden_size} (a "
                             f"sketch keeps the top-k of d values); give at most {self.hidden_size}")

    def check_token_ids(self, ids: dict[str, int], flag: str) -> None:
        """Every id of ``ids`` ({text: id}) must be a token of the vocabulary."""
        bad = {text: i for text, i in ids.items() if not 0 <= i < self.vocab_size}
        if bad:
            shown = ", ".join(f"{text}={i}" for text, i in bad.items())
            raise UsageError(f"{flag}: {shown} is outside the model's vocabulary of {self.vocab_size} tokens; "
                             f"give reserved ids below {self.vocab_size}")

    def check_new_tokens(self, max_new_tokens: int, prompt_tokens: int = 1, flag: str = "--max-new-tokens") -> None:
        """``prompt_tokens`` + ``max_new_tokens`` positions must fit in the model's context."""
        if self.context is None:
            return
        most = self.context - prompt_tokens
        if max_new_tokens > most:
            prompt = f" after a prompt of {prompt_tokens} tokens" if prompt_tokens > 1 else ""
            raise UsageError(f"{flag} {max_new_tokens} is beyond the model's context of {self.context} "
                             f"positions; the maximum{prompt} is {max(most, 0)}")


def check_weights_placed(model: Any) -> None:
    """Refuse a model whose device map left every module on the disk (``--max-memory`` too small for any weight):
    it would run, one module at a time from the disk, at no useful speed. Transformers only warns about it."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return
    if all(str(device) == "disk" for device in device_map.values()):
        raise UsageError("--max-memory leaves no room for any weight: the device map offloads the whole model to "
                         "the disk; give budgets that hold the model's layers (e.g. cpu=8GiB), or drop --max-memory")

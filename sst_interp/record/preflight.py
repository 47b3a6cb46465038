"""The checks of a recording that need the loaded model and tokenizer: flags against the vocabulary, hidden size and
context, and the prompts against the context budget.

They run in :func:`sst_interp.record.runner.record_questions` right after the model is known and before the run
directory is created or resumed, so a value beyond the model is one ``error:`` line and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sst_interp.codeact.format import encode_with_actions
from sst_interp.hooks import attention_heads, attention_module
from sst_interp.hooks.attention_weights import READABLE, implementation
from sst_interp.interventions.attention import check_attention_rules
from sst_interp.kernels.errors import UsageError
from sst_interp.model.limits import ModelLimits, check_weights_placed
from sst_interp.organism.tokenizer import check_organism_text, is_hops_tokenizer
from sst_interp.record.attention import parse_attention
from sst_interp.record.identity import action_tokens
from sst_interp.record.options import RecordOptions


def check_against_model(options: RecordOptions, sst: Any, tokenizer: Any, questions: Sequence[Any]) -> None:
    """Refuse flags the model cannot honour (UsageError): ``--top-k`` wider than the vocabulary, ``--sketch-k``
    above the hidden size, action token ids outside the vocabulary, a prompt plus ``--max-new-tokens`` beyond the
    model's context, a CodeACT first turn longer than ``--max-context-tokens``, a device map that put every
    weight on the disk, ``--attention`` asking for a layer or head the model lacks, or an ``--intervention``
    attention rule naming a head the model lacks or a key outside the shortest prompt's context."""
    check_weights_placed(sst.backbone)
    check_attention(options, sst)
    check_task_tokenizer(tokenizer, questions)
    limits = ModelLimits.of(sst)
    limits.check_top_k(options.top_k)
    limits.check_sketch_k(options.sketch_k)
    longest, question_id = _longest_prompt(options, tokenizer, questions, limits)
    limits.check_new_tokens(options.max_new_tokens, max(longest, 1))
    spec = options.intervention_spec()
    if spec is not None and questions:  # attention rules: heads the model has, keys inside every prompt's context
        check_attention_rules(spec, sst, min(map(_prompt_length(options, tokenizer), (q.prompt for q in questions))))
    if options.codeact and longest + options.max_new_tokens > options.max_context_tokens:
        raise UsageError(f"--max-context-tokens {options.max_context_tokens} cannot hold the first turn of "
                         f"{question_id} ({longest} prompt tokens) plus --max-new-tokens "
                         f"{options.max_new_tokens}; give "
                         f"at least {longest + options.max_new_tokens}")


def check_attention(options: RecordOptions, model: Any) -> None:
    """Refuse (UsageError) an ``--attention`` the loaded model cannot give: a layer outside its recorded layer axis, a
    head its attention modules lack, a layer without a ``self_attn`` module, or an attention implementation whose
    weights cannot be read. ``model``: an SST or a :class:`~sst_interp.model.loop_model.LoopModel`."""
    if options.attention is None:
        return
    layers, heads = parse_attention(options.attention)
    count = int(model.num_layers)
    if layers is not None and max(layers) >= count:
        raise UsageError(f"--attention asks for layer {max(layers)}, but the {model.loop.family} model's recorded "
                         f"layers are 0..{count - 1}; pick layers below {count}")
    name = implementation(model.backbone.config)
    if name not in READABLE:
        raise UsageError(f"--attention reads weights from eager or sdpa attention; this model runs {name!r} (load it "
                         "with attn_implementation='eager')")
    modules = _attention_modules(model, layers)  # a layer without self_attn is refused here
    for where, module in modules if heads is not None else []:
        have = attention_heads(module)
        if max(heads) >= have:
            raise UsageError(f"--attention asks for head {max(heads)}, but {where}'s attention has {have} heads "
                             f"(0..{have - 1}); pick heads below {have}")


def _attention_modules(model: Any, layers: Sequence[int] | None) -> list[tuple[str, Any]]:
    """(where, attention module) of the recorded ``layers`` (None: all) of an SST; of every visited layer module of a
    looped family, where a module may serve several recorded layers."""
    if model.loop.visit_sites is None:  # SST: one decoder layer per recorded layer
        chosen = range(int(model.num_layers)) if layers is None else layers
        return [(f"layer {i}", attention_module(model.layers[i], f"layer {i}")) for i in chosen]
    sites = {id(module): module for module, _ in model.loop.visit_sites(model.backbone)}.values()
    return [(type(site).__name__, attention_module(site, type(site).__name__)) for site in sites]


def attention_sizes(options: RecordOptions, model: Any, tokenizer: Any, questions: Sequence[Any]) -> dict[str, int]:
    """The disk estimate's attention keywords (:func:`sst_interp.store.space.bytes_per_question`): rows per recorded
    (position, iteration), the recorded layers times their heads, and an upper bound of the keys of a row (K under
    ``--attention-top-k``, else the longest prompt plus ``--max-new-tokens``, or CodeACT's context limit); nothing
    without ``--attention``. Run after :func:`check_attention`."""
    if options.attention is None:
        return {}
    layers, heads = parse_attention(options.attention)
    count = int(model.num_layers) if layers is None else len(layers)
    per_layer = len(heads) if heads is not None else max(attention_heads(m) for _, m in _attention_modules(model, layers))
    if options.attention_top_k is not None:
        keys = options.attention_top_k
    elif options.codeact:
        keys = options.max_context_tokens
    else:
        keys = _longest_prompt(options, tokenizer, questions, ModelLimits.of(model))[0] + options.max_new_tokens
    return {"attention_rows": count * per_layer, "attention_keys": keys}


def check_task_tokenizer(tokenizer: Any, questions: Sequence[Any]) -> None:
    """Refuse ``hops`` questions for a model whose tokenizer is not the organism's: the task's characters would be
    split, merged or mapped to other ids, and the model could not have been trained on them (UsageError); and
    refuse, for the organism's tokenizer, any prompt it cannot encode (it would map the characters it lacks to
    ``<pad>``: :func:`~sst_interp.organism.tokenizer.check_organism_text`)."""
    for question in questions:
        check_organism_text(tokenizer, question.prompt, f"question {question.question_id}'s prompt")
    if not any(question.source == "hops" for question in questions):
        return

    if not is_hops_tokenizer(tokenizer):
        raise UsageError("--questions hops needs a model trained on the hops task, with its tokenizer: give --model "
                         "a folder written by python -m sst_interp.organism train (or train-sst's backbone/)")


def _prompt_length(options: RecordOptions, tokenizer: Any) -> Callable[[str], int]:
    """The tokens of a prompt as the recording will encode it (CodeACT: with its action tokens)."""
    if options.codeact:
        actions = action_tokens(options)
        return lambda text: len(encode_with_actions(text, tokenizer, actions)[0])
    return lambda text: len(tokenizer(text).input_ids)


def _longest_prompt(options: RecordOptions, tokenizer: Any, questions: Sequence[Any],
                    limits: ModelLimits) -> tuple[int, str | None]:
    """(tokens, question id) of the longest prompt as the recording will encode it (0, None without questions)."""
    if options.codeact:
        limits.check_token_ids(dict(action_tokens(options)), "--action-tokens")
    length = _prompt_length(options, tokenizer)
    longest, which = 0, None
    for question in questions:
        n = length(question.prompt)
        if n > longest:
            longest, which = n, question.question_id
    return longest, which

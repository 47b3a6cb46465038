"""The completion protocol: one generation per question, recorded inline and graded."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from sst_interp.data import grade, stop_strings
from sst_interp.hooks import Recorder
from sst_interp.interventions import intervene
from sst_interp.interventions.compiled import spec_refusal
from sst_interp.model.compiled import compiler_for, generate_compiled
from sst_interp.model.generation import GenerationConfig, generate
from sst_interp.model.loading import eos_token_ids
from sst_interp.model.observers import ObserverGroup
from sst_interp.record.options import RecordOptions


def batch_generation_config(sst: Any, tokenizer: Any, options: RecordOptions, stops: tuple[str, ...] = ()) -> Any:
    """The :class:`~sst_interp.model.generation.GenerationConfig` ``record`` generates with (both protocols):
    greedy, the LM head after every iteration, the tokenizer's and the model's EOS ids."""

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return GenerationConfig(max_new_tokens=options.max_new_tokens, prompt_mode=options.prompt_mode,
                            eos_token_ids=eos_token_ids(tokenizer, sst), stop_strings=tuple(stops),
                            pad_token_id=pad, logits_every_iteration=True)


def run_compiler(sst: Any, options: RecordOptions) -> Any:
    """The run's :class:`~sst_interp.model.compiled.StepCompiler` (None: decode eager), from ``--compile`` and what
    the run needs: CodeACT episodes, a device map, an intervention the step cannot carry
    (:func:`~sst_interp.interventions.compiled.spec_refusal`) or a hook-reading probe policy decode eager
    (``--compile on`` there was refused by :meth:`RecordOptions.validate`), and so does a run that records attention
    (the step runs no hooks)."""

    if options.codeact or options.placement()[0] is not None or options.depth_policy.startswith("probe:") or \
            options.attention is not None:
        return None
    spec = options.intervention_spec()
    if spec is not None and spec_refusal(spec) is not None:
        return None
    return compiler_for(sst, options.compile_options(), capture_outputs=True)


def decode_kind(compiler: Any) -> str:
    """How a run's decode passes execute, for its numerics fingerprint: ``eager`` or ``compiled:<recipe>``
    (:attr:`~sst_interp.model.compiled.StepCompiler.recipe`)."""
    return "eager" if compiler is None else f"compiled:{compiler.recipe}"


@contextmanager
def intervened(sst: Any, options: RecordOptions, question_ids: list[str], recorder: Any,
               tally: Any = None) -> Iterator[Any]:
    """The observer a batch generates with: the recorder alone, or with ``--intervention`` an Intervener that
    changes the streams first and the recorder that records what the intervened model computed. ``tally`` (a
    :class:`~sst_interp.interventions.SiteTally`) receives the batch's site counts per rule."""
    spec = options.intervention_spec()
    if spec is None:
        yield recorder
        return

    with intervene(sst, spec, question_ids) as intervener:
        yield ObserverGroup(intervener, recorder)
    if tally is not None:
        tally.add(intervener.site_report())


def record_batch(sst: Any, tokenizer: Any, batch: list[Any], depth: Any, options: RecordOptions,
                 config: Any, tally: Any = None, compiler: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Generate one batch under a depth policy (``FixedDepth(k)`` or a probe policy) with the recorder attached;
    returns (generation rows, writer columns). ``tally``: see :func:`intervened`. ``compiler``: the run's
    :class:`~sst_interp.model.compiled.StepCompiler` (decode passes run compiled, the recorder takes the step's
    outputs), or None for eager generation."""

    prompts = [list(tokenizer(q.prompt).input_ids) for q in batch]
    gen_config = batch_generation_config(sst, tokenizer, options, stop_strings(batch[0].source))
    ids = [q.question_id for q in batch]
    decode = lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True)  # noqa: E731
    if compiler is not None:
        with Recorder.for_model(sst, ids, config, layer_hooks=False) as recorder, \
                intervened(sst, options, ids, recorder, tally) as observer:
            result = generate_compiled(sst, prompts, depth, gen_config, observer=observer, decode_fn=decode,
                                       compiler=compiler)
    else:
        with Recorder.for_model(sst, ids, config) as recorder, \
                intervened(sst, options, ids, recorder, tally) as observer:
            result = generate(sst, prompts, depth, gen_config, observer=observer, decode_fn=decode)
    # A per-position policy files every question under its maximum depth (the shards' partition); the depth a
    # position ran is in ``iterations``.
    per_position = getattr(depth, "per_position", False)
    rows = []
    for row, question in enumerate(batch):
        tokens = result.token_ids[row]
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        verdict = grade(question, text)
        rows.append({
            "question_id": question.question_id, "turn": 0,
            "depth": int(depth.max_depth) if per_position else int(result.chosen_depth[row]),
            "token_ids": tokens, "text": text, "n_tokens": len(tokens), "stop_reason": result.stop_reasons[row],
            "extracted_answer": verdict.extracted_answer, "correct": bool(verdict.correct),
            "grader": verdict.grader, "depth_policy": result.depth_policy,
            "chosen_depth": int(result.chosen_depth[row]), "prompt_tokens": len(prompts[row]),
            "iterations": np.asarray(result.iterations[row], dtype=np.int32),
        })
    return rows, recorder.columns()

"""A recording's inputs resolved once (:class:`RecordPlan`): every later step of :mod:`sst_interp.record.runner` and
:mod:`sst_interp.record.families` reads the plan, so no option is checked, defaulted or hashed twice and none is
changed after it is resolved. This module holds the SST half; a looping family's plan is
:func:`sst_interp.record.families.plan_family`, built from the same pieces (:func:`resolve_options`,
:func:`capture_config`, :func:`frozen`).

Two ways in: :func:`plan_record` for ``record`` (nothing loaded yet: it checks the options, the sandbox and the
questions before the model loads) and :func:`plan_loaded` for :func:`~sst_interp.record.runner.record_questions`
(a model and questions the caller loaded). The checks that need the loaded model (the vocabulary, the context, the
intervention's sites, the numerics fingerprint) are not in the plan: the runner makes them once the model is there.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sst_interp.codeact.prompts import codeact_question
from sst_interp.data import load_questions, questions_to_frame
from sst_interp.data.question import select_questions
from sst_interp.hooks import AttentionConfig, RecordConfig
from sst_interp.interventions import patch_runs
from sst_interp.kernels.errors import UsageError
from sst_interp.model.devices import rank_device
from sst_interp.model.loading import DEFAULT_PROMPT_MODE, demo_preset_note, resolve_prompt_mode
from sst_interp.organism.carried import task_source_options
from sst_interp.record.attention import attention_identity, parse_attention
from sst_interp.record.identity import make_depth_policy, model_spec, questions_sha256, run_identity, sandbox_config
from sst_interp.record.options import RecordOptions
from sst_interp.record.ranks import Ranks
from sst_interp.sandbox import check_backend


@dataclass(frozen=True)
class RecordPlan:
    """One recording, resolved.

    Args:
        options: the options with what they left open filled in (:meth:`RecordOptions.resolved`, the default
            CodeACT checkpoint, the prompt mode); never changed afterwards.
        depths: the depths to record: the flat ones checked, or under a per-position policy its maximum depth
            alone (the run is filed under it).
        out: the run directory.
        frozen_identity: what must match to resume, without the numerics fingerprint (that needs the loaded model),
            as canonical JSON; read it as :attr:`identity`.
        demo: whether the untrained demo preset is on (recorded in the manifest).
        intervention: the parsed ``--intervention`` spec (an InterventionSpec), or None.
        sandbox: where CodeACT code runs (the run directory hidden), checked to work here; None for completions.
        capture: what the hooks record (:class:`~sst_interp.hooks.RecordConfig`).
        model: the :class:`~sst_interp.model.loading.ModelSpec` to build; None when the caller loaded the model.
        questions: the selected questions to record (CodeACT first turns under codeact).
        notes: lines printed once the model is loaded and checked (a refused command prints its error only).
        policy: the depth policy (:func:`~sst_interp.record.identity.make_depth_policy`: a probe's, or a
            per-position one), or None for fixed depths.
    """

    options: RecordOptions
    depths: tuple[int, ...]
    out: Path
    frozen_identity: str
    demo: bool
    intervention: Any
    sandbox: Any
    capture: Any
    model: Any = None
    questions: tuple[Any, ...] = ()
    notes: tuple[str, ...] = ()
    policy: Any = None

    @property
    def identity(self) -> dict[str, Any]:
        """The run identity, a new dict on every read: what a step adds to its copy (the numerics fingerprint)
        never reaches the plan."""
        return json.loads(self.frozen_identity)


def frozen(identity: dict[str, Any]) -> str:
    """``identity`` as :attr:`RecordPlan.frozen_identity` holds it: canonical JSON, as the manifest will hold it
    (tuples become lists), so the plan's identity cannot change."""
    return json.dumps(identity, sort_keys=True)


def _planned_depths(options: RecordOptions, depths: tuple[int, ...]) -> tuple[Any, tuple[int, ...]]:
    """(the depth policy, the depths the run is filed under): a per-position policy files one run under its
    maximum depth; a probe policy and fixed depths keep ``depths``. Loading a probe file is a UsageError when it
    is bad, before the model loads."""

    policy = make_depth_policy(options, list(depths))
    if policy is not None and getattr(policy, "per_position", False):
        return policy, (int(policy.max_depth),)
    return policy, depths


def resolve_options(options: RecordOptions, *, default_checkpoint: bool = True) -> tuple[RecordOptions,
                                                                                         tuple[int, ...], list[str]]:
    """(the checked options with their open values filled in, the depths, notes to print); ``options`` unchanged.

    ``default_checkpoint``: under codeact without --checkpoint or --model, load the shipped CodeACT demo SST
    (:meth:`RecordOptions.default_codeact_checkpoint`), with a note saying so."""
    resolved, depths = options.resolved()
    notes = []
    checkpoint = resolved.default_codeact_checkpoint() if default_checkpoint else None
    if checkpoint is not None:
        resolved = dataclasses.replace(resolved, checkpoint=checkpoint)
        notes.append(f"[--protocol codeact without --checkpoint or --model: the shipped CodeACT demo SST "
                     f"({checkpoint}); pass --checkpoint to use another]")
    return resolved, depths, notes


def load_every(options: RecordOptions) -> list[Any]:
    """Every question of ``options``' set, before ``--limit`` and ``--ids``.

    ``--questions hops`` asked of an organism folder (``--model``) asks the spec it was trained on
    (:func:`~sst_interp.organism.carried.task_source_options`); a ``--source-option`` that differs from it is used,
    with one line on stderr saying so (after the questions load, so a refused spec prints its error line only).
    """
    source, note = task_source_options(options.questions, options.model, options.source_options)
    every = load_questions(options.questions, options.data, **source)
    if note is not None:
        print(note, file=sys.stderr)
    return every


def capture_config(options: RecordOptions, gates: bool | None = None) -> Any:
    """The hooks' :class:`~sst_interp.hooks.RecordConfig` of ``options`` (``gates`` overrides ``--gates``)."""

    attention = None
    if options.attention is not None:
        layers, heads = parse_attention(options.attention)
        attention = AttentionConfig(layers=layers, heads=heads, top_k=options.attention_top_k)
    return RecordConfig(full_positions=options.full_positions, sketch_positions=options.sketch_positions,
                        sketch_k=options.sketch_k, top_k=options.top_k, dtype=options.dtype,
                        gates=options.gates if gates is None else gates, attention=attention)


def checked_sandbox(options: RecordOptions, out: Path) -> Any:
    """The run's :class:`~sst_interp.sandbox.SandboxConfig` (the run directory hidden inside it), checked to work
    here (a missing bwrap is one ``error:`` line before the model loads); None outside codeact."""
    if not options.codeact:
        return None
    sandbox = sandbox_config(options, hidden_paths=(str(Path(out).resolve()),))
    check_backend(sandbox)
    return sandbox


def plan_record(options: RecordOptions, ranks: Ranks) -> RecordPlan:
    """The plan of ``record``: options checked, the sandbox checked, the questions loaded and selected, the model
    spec (on this rank's device under torchrun) and the run identity, in that order; nothing is loaded but the
    questions. Bad input is a UsageError."""

    resolved, depths, notes = resolve_options(options)
    if ranks.distributed and resolved.device_map != "none":
        raise UsageError("--device-map spreads one model over several devices, torchrun runs one model per "
                         "process: use one or the other")
    out = resolved.out_path()
    sandbox = checked_sandbox(resolved, out)
    every = load_every(resolved)
    if resolved.codeact:
        every = [codeact_question(q) for q in every]
    selected = select_questions(every, limit=resolved.limit, ids=resolved.ids)
    data_sha = questions_sha256(questions_to_frame(every))
    spec, demo = model_spec(resolved)
    spec = dataclasses.replace(spec, device=rank_device(spec.device, ranks.local_rank if ranks.distributed else None))
    resolved = dataclasses.replace(resolved, prompt_mode=resolve_prompt_mode(resolved.prompt_mode, demo))
    if demo:
        notes.append(f"[{demo_preset_note(resolved.model)}]")
    policy, depths = _planned_depths(resolved, depths)
    return RecordPlan(options=resolved, depths=depths, out=out,
                      frozen_identity=frozen(run_identity(resolved, spec.identity(), data_sha)), demo=demo,
                      intervention=resolved.intervention_spec(), sandbox=sandbox, capture=capture_config(resolved),
                      model=spec, questions=tuple(selected), notes=tuple(notes), policy=policy)


def plan_loaded(sst: Any, questions: list[Any], options: RecordOptions, out: str | Path,
                identity: dict[str, Any] | None = None, demo: bool = False) -> RecordPlan:
    """The plan of :func:`~sst_interp.record.runner.record_questions`: a model and questions the caller loaded.

    ``identity`` None derives one from the model's SST config and the questions (:func:`loaded_identity`); the prompt
    mode left open is ``two_pass``."""

    resolved, depths, _ = resolve_options(options, default_checkpoint=False)
    if resolved.prompt_mode is None:
        resolved = dataclasses.replace(resolved, prompt_mode=DEFAULT_PROMPT_MODE)
    out = Path(out)
    spec = resolved.intervention_spec()
    policy, depths = _planned_depths(resolved, depths)
    identity = identity if identity is not None else loaded_identity(sst, questions, resolved, spec)
    return RecordPlan(options=resolved, depths=depths, out=out, frozen_identity=frozen(identity),
                      demo=demo, intervention=spec, sandbox=checked_sandbox(resolved, out),
                      capture=capture_config(resolved), questions=tuple(questions), policy=policy)


def loaded_identity(sst: Any, questions: list[Any], options: RecordOptions, spec: Any) -> dict[str, Any]:
    """The identity of a recording whose caller gave none: the model's name and SST config, the questions' hash,
    the protocol, the answer budget, the prompt mode, the intervention and the attention recorded."""

    identity = {"model": getattr(sst.backbone.config, "_name_or_path", type(sst.backbone).__name__),
                "sst": sst.config.to_dict(), "questions": options.questions,
                "data_sha256": questions_sha256(questions_to_frame(questions)), "protocol": options.protocol,
                "max_new_tokens": options.max_new_tokens, "prompt_mode": options.prompt_mode}
    if spec is not None:
        identity.update(intervention=spec.to_dict(), intervention_runs=patch_runs(spec))
    identity.update(attention_identity(options.attention, options.attention_top_k))
    return identity

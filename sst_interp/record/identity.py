"""What a run is: its identity (what must match to resume), its manifest keys, and the model and policy it uses."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from sst_interp import __version__
from sst_interp.codeact.episode import EpisodeConfig
from sst_interp.codeact.format import GEMMA3_ACTION_IDS, ActionFormat
from sst_interp.data import stop_strings
from sst_interp.interventions import patch_runs
from sst_interp.model.backbone import DEFAULT_MODEL
from sst_interp.model.devices import check_device
from sst_interp.model.loading import ModelSpec, eos_token_ids
from sst_interp.model.placement import placement_summary
from sst_interp.probe.policy import ProbeDepth
from sst_interp.record.attention import attention_identity, attention_manifest
from sst_interp.record.options import RecordOptions
from sst_interp.sandbox.cgroup import memory_cap


def questions_sha256(frame: Any) -> str:
    """sha256 of a question table's content (ids, prompts, references, choices, metadata), as run identity."""
    digest = hashlib.sha256()
    for row in frame.itertuples(index=False):
        digest.update(json.dumps([row.question_id, row.source, row.prompt, row.reference, list(row.choices),
                                  row.metadata], ensure_ascii=False).encode())
    return digest.hexdigest()


def model_spec(options: RecordOptions) -> tuple[Any, bool]:
    """The :class:`~sst_interp.model.loading.ModelSpec` for ``options`` and whether the demo preset is on."""

    device_map, max_memory = options.placement()
    placement = dict(device=check_device(options.device), device_map=device_map, max_memory=max_memory)
    if options.checkpoint is not None:
        return ModelSpec(options.model or DEFAULT_MODEL, options.checkpoint, None, options.dtype, **placement), False
    demo = options.demo_preset if options.demo_preset is not None else options.model is None
    spec = ModelSpec(options.model or DEFAULT_MODEL, None, "hidden" if demo else "unit", options.dtype, **placement)
    return spec, bool(demo)


def folder_sha256(path: Path) -> str:
    """sha256 over a file, or over every file of a folder in name order."""
    digest = hashlib.sha256()
    for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if file.is_file():
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def run_identity(options: RecordOptions, model_identity: dict[str, Any], data_sha256: str) -> dict[str, Any]:
    """What must match to resume a run: model, checkpoint, SST variant, data, and what is recorded and how.

    The batch size is part of it: left padding (and, in episodes, padding inside the sliding window) makes the
    recorded values depend on it (tokens agree; hidden values differ by up to ~0.03 between batch sizes 1 and 2 on
    the default backbone), so a resume must not mix batch sizes. Under ``codeact`` the episode settings and the
    sandbox are part of it too.
    """
    identity = dict(model_identity)
    if options.checkpoint is not None:
        folder = Path(options.checkpoint)
        identity["checkpoint"] = str(folder.resolve())
        state = folder / "sst_state.safetensors"
        if state.is_file():
            identity["checkpoint_sha256"] = hashlib.sha256(state.read_bytes()).hexdigest()
    identity.update(
        questions=options.questions,
        data_sha256=data_sha256,
        max_new_tokens=options.max_new_tokens,
        prompt_mode=options.prompt_mode,
        decoding="greedy",
        full_positions=options.full_positions,
        sketch_positions=options.sketch_positions,
        sketch_k=options.sketch_k,
        top_k=options.top_k,
        gates=options.gates,
        batch_size=options.batch_size,
        **attention_identity(options.attention, options.attention_top_k),
    )
    if options.codeact:
        identity.update(protocol="codeact", episode=episode_config(options).to_dict(), sandbox=options.sandbox.backend,
                        sandbox_timeout=options.sandbox.timeout_s)
    position = options.position_policy(options.depths)
    if position is not None:  # the canonical string: the rules, thresholds and bounds
        identity["depth_policy"] = position.describe()
        if position.probe_path is not None:
            identity["probe_sha256"] = folder_sha256(Path(position.probe_path))
    spec = options.intervention_spec()
    if spec is not None:
        identity["intervention"] = spec.to_dict()
        identity["intervention_runs"] = patch_runs(spec)
    probe = options.probe_path()
    if probe is not None:
        identity["depth_policy"] = f"probe:{probe.resolve()}"
        identity["probe_sha256"] = folder_sha256(probe)
    return identity


def action_tokens(options: RecordOptions) -> tuple[tuple[str, int], ...]:
    """The action token ids: --action-tokens, else the checkpoint's training configuration, else Gemma 3's."""

    given = options.action_tokens
    if given is not None:
        return given
    if options.checkpoint is not None:
        file = Path(options.checkpoint) / "sst_config.json"
        if file.is_file():  # train writes its action tokens into the checkpoint's provenance
            saved = json.loads(file.read_text()).get("extra", {}).get("action_tokens")
            if isinstance(saved, dict) and set(saved) == {"<execute>", "</execute>"}:
                return (("<execute>", int(saved["<execute>"])), ("</execute>", int(saved["</execute>"])))
    return GEMMA3_ACTION_IDS


def episode_config(options: RecordOptions) -> Any:
    """The :class:`~sst_interp.codeact.episode.EpisodeConfig` of ``options``."""

    return EpisodeConfig(max_turns=options.max_turns, max_context_tokens=options.max_context_tokens,
                         carry_across_turns=options.carry_state_across_turns,
                         tool_output_chars=options.tool_output_chars,
                         fmt=ActionFormat(action_tokens=action_tokens(options)))


def sandbox_config(options: RecordOptions, hidden_paths: tuple[str, ...] = ()) -> Any:
    """The :class:`~sst_interp.sandbox.SandboxConfig` of ``options``; ``hidden_paths`` (e.g. the run directory) are
    invisible inside the sandbox."""
    # output_cap_chars: the sandbox must not cut what --tool-output-chars lets through (it used to cut at 2,000)
    return dataclasses.replace(options.sandbox, output_cap_chars=options.tool_output_chars,
                               hidden_paths=tuple(hidden_paths))


def make_depth_policy(options: RecordOptions, depths: list[int]) -> Any:
    """The :class:`ProbeDepth` of ``--depth-policy probe:PATH`` with i_max = max(depths), the
    :class:`~sst_interp.model.halting.PositionPolicy` of a per-position policy string, or None for fixed."""
    position = options.position_policy(depths)
    if position is not None and position.probe_path is not None:
        probe = ProbeDepth.from_path(position.probe_path)
        return position.with_probe(lambda hidden: probe.logits(hidden) > probe.threshold, probe.probe_layer)
    if position is not None:
        return position
    probe = options.probe_path()
    if probe is None:
        return None

    return ProbeDepth.from_path(probe, max_depth=max(depths))


def manifest_extra(options: RecordOptions, sst: Any, tokenizer: Any, config: Any, depths: list[int],
                   demo: bool) -> dict[str, Any]:
    """Manifest keys besides the identity: layout, SST config, decoding, protocol, settings."""

    mlp = getattr(sst.layers[0], "mlp", None)
    gate = getattr(mlp, "gate_proj", None)
    extra = {
        "hidden_size": sst.hidden_size,
        "num_layers": sst.num_layers,
        "dtype": options.dtype,
        "depths": depths,
        "full_positions": config.full_positions,
        "sketch_positions": config.sketch_positions,
        "sketch_k": config.resolved_sketch_k(sst.hidden_size),
        "top_k": config.top_k,
        "gates": config.gates,
        "ffn_size": getattr(gate, "out_features", None),
        "decoding": {"strategy": "greedy", "do_sample": False, "max_new_tokens": options.max_new_tokens,
                     "eos_token_ids": list(eos_token_ids(tokenizer, sst)),
                     "stop_strings": [] if options.codeact else list(stop_strings(options.questions))},
        "prompt_mode": options.prompt_mode,
        "protocol": options.protocol,
        "depth_policy": "fixed",
        "sst": sst.config.to_dict(),
        "demo_preset": demo,
        "questions": options.questions,
        "batch_size": options.batch_size,
        "device": str(sst.device),
        # Where accelerate put each module under --device-map (None: the whole model on "device"). Not part of the
        # identity: placement moves computations between devices of one kind, not their numerics.
        "device_map": placement_summary(sst.backbone),
        "package_version": __version__,
        "logits_every_iteration": True,
        # Whether top_k covers the whole distribution (an offline kl simulation needs it).
        "vocab_size": _vocab_size(sst),
    }
    if options.codeact:
        extra["episode"] = episode_config(options).to_dict()
        limits = ("backend", "timeout_s", "memory_mb", "cpu_seconds", "max_processes", "tmp_mb", "max_inodes",
                  "max_file_mb")
        extra["sandbox"] = {name: getattr(options.sandbox, name) for name in limits}
        extra["sandbox"]["memory_cap"] = memory_cap().describe(options.sandbox)  # the mechanism found here
    spec = options.intervention_spec()
    if spec is not None:
        extra["intervention"] = spec.to_dict()
    extra.update(attention_manifest(options.attention, options.attention_top_k, sst.num_layers))
    return extra


def _vocab_size(sst: Any) -> int | None:
    """The LM head's output width (the vocabulary the logits cover), or None when the backbone hides it."""
    config = sst.backbone.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "vocab_size", None)
    return int(size) if size is not None else None

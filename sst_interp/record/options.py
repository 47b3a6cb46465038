"""The options of one recording (:class:`RecordOptions`): the typed library config that :func:`record` and
:func:`record_questions` take, and the one declaration of the ``record`` command's flags (each field's default and
help text; :mod:`sst_interp.cli.record` builds the parser from it, :mod:`sst_interp.record.forms` says how the
three fields that are not typed as they are held are typed, :mod:`sst_interp.model.loop_options` the fourth,
``--loop-option``, which ``generate`` takes too)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sst_interp.checkpoints import DEFAULT_CODEACT_CHECKPOINT, resolve_checkpoint, resolve_model
from sst_interp.data import default_max_new_tokens
from sst_interp.interventions import InterventionSpec
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import arg
from sst_interp.model.config import PROMPT_MODES
from sst_interp.model.device_flags import (
    DTYPES,
    CompileChoice,
    DeviceMapChoice,
    Dtype,
    compile_arg,
    device_arg,
    device_map_arg,
    dtype_arg,
    max_memory_arg,
)
from sst_interp.model.loop_options import LOOP_OPTION_FLAGS
from sst_interp.record.attention import check_flags as check_attention_flags
from sst_interp.record.forms import ACTION_TOKEN_TEXTS, ACTION_TOKENS_FLAGS, SANDBOX_FLAGS, SOURCE_OPTION_FLAGS
from sst_interp.sandbox.config import SandboxConfig

DEFAULT_DEPTHS = (1, 2, 3, 4)
PROTOCOLS = ("completion", "codeact")
#: Fields that mean something only for CodeACT episodes (--sandbox also serves HumanEval grading, so it is not here).
CODEACT_ONLY = ("max_turns", "max_context_tokens", "carry_state_across_turns", "tool_output_chars", "action_tokens")


@dataclass
class RecordOptions:
    """Configuration of one recording, and the one declaration of the ``record`` command's flags.

    Each field is the flag of the same name (``_`` -> ``-``), declared with its default and help text; ``python -m
    sst_interp.record --help`` is built from these declarations. Four fields are typed as other flags
    (``source_options``, ``sandbox``, ``action_tokens``: :mod:`sst_interp.record.forms`; ``loop_options``:
    :mod:`sst_interp.model.loop_options`). ``max_new_tokens`` None
    is the question set's default and ``dtype`` ``auto`` is resolved for the device, both by :meth:`validate`;
    ``threads`` is recorded in the run's numerics fingerprint (:mod:`sst_interp.record.numerics`).
    """

    questions: str = arg("demo", help="question set: demo | gsm8k | gpqa | math500 | humaneval")
    data: str | None = arg(None, help="local data file or folder for the question set (default: "
                                      "$SST_INTERP_DATA_DIR or the hub)")
    depths: list[int] = arg(default_factory=lambda: list(DEFAULT_DEPTHS), help="comma-separated flat iteration depths")
    model: str | None = arg(None, help="backbone: default (the embedded Gemma 3 270M) | local HF folder | .gguf file "
                                       "| hub id | hops-organism (the shipped looped organism) | hops-overthink (the looped "
                                       "organism that overthinks) | hops-sst-backbone (the SST organism's "
                                       "backbone) (default: default)")
    loop: str | None = arg(None, metavar="FILE.py:NAME",
                           help="a looped model transformers does not ship: the loop declaration NAME in your Python "
                                "file FILE.py (a sst_interp.model.loops.looped_block or LoopDeclaration; "
                                "docs/bring-your-own.md), for the local --model folder")
    trust_remote_code: bool = arg(False, help="run the modelling code in the --model folder (its config.json "
                                              "auto_map); off by default: a folder with its own code is refused "
                                              "without it")
    loop_options: dict[str, str] = arg(default_factory=dict, flags=LOOP_OPTION_FLAGS,
                                       help="settings the looped family declares changeable at inference, by name "
                                            "(--loop-option KEY=VALUE; dory: recurrent_kv_cache_mode); part of the "
                                            "run identity")
    checkpoint: str | None = arg(None, help="SST checkpoint folder, or a named checkpoint: demo-codeact | "
                                            "demo-codeact-baseline (default: demo-codeact under --protocol codeact "
                                            "when no --model is given, else an untrained SST)")
    demo_preset: bool | None = arg(None, help="untrained SST with state_scale='hidden' (default: on exactly when "
                                              "neither --model nor --checkpoint is given)")
    max_new_tokens: int | None = arg(None, help="most tokens per answer, or per model turn under codeact (default per "
                                                "set: demo 16, gsm8k 256, gpqa 256, math500 512, humaneval 384)")
    batch_size: int = arg(8, help="questions (episodes) per generation batch and per written batch")
    dtype: Dtype = dtype_arg(stored=True)
    out: str | None = arg(None, help="run directory (default runs/<questions>, runs/<questions>-codeact under "
                                     "codeact)")
    full_positions: int = arg(10, help="generated positions recorded in full (position 0 always), per model turn")
    sketch_positions: int = arg(512, help="further positions recorded as top-k |value| sketches, per model turn")
    sketch_k: int | None = arg(None, help="sketch size (default round(d * 1024 / 5376))")
    top_k: int = arg(128, help="K of the per-iteration top-K logits")
    gates: bool = arg(False, help="also record FFN gate activity")
    attention: str | None = arg(None, metavar="LAYERS[:HEADS]",
                                help="also record attention weights: each full position's query over its keys, per "
                                     "(iteration, layer, head) of the layers and heads named (each 'all' or "
                                     "comma-separated indices and ranges of the run's layer axis, e.g. all, 0,2-3:1; "
                                     "HEADS defaults to all); the attention/ shards of docs/format.md")
    attention_top_k: int | None = arg(None, metavar="K",
                                      help="with --attention: keep each (query, head)'s K heaviest keys and the mass "
                                           "of the others, instead of every key (for long contexts)")
    limit: int | None = arg(None, help="record only the first N questions")
    ids: list[str] | None = arg(None, metavar="ID,...", help="comma-separated question ids to record")
    prompt_mode: str | None = arg(None, help="two_pass | sequential | none: how the prompt and appended tool turns "
                                             "are processed (default: none under the demo preset, else two_pass)")
    compile: CompileChoice = compile_arg()
    device: str = device_arg(mapped=True)
    device_map: DeviceMapChoice = device_map_arg()
    max_memory: str | None = max_memory_arg()
    source_options: dict[str, Any] = arg(default_factory=dict, flags=SOURCE_OPTION_FLAGS,
                                         help="keyword arguments of the question loader (--source-option)")
    depth_policy: str = arg("fixed", help="fixed (default: a flat run per depth of --depths) | probe:PATH (a saved "
                                          "halting probe picks the depth at position 0 of each model turn, up to "
                                          "max(--depths); the question is filed under the depth it chose first; "
                                          "Sec. 6, app:halting_eval) | per-position rules, e.g. kl:0.01,max=4 "
                                          "(kl:TAU, entropy:TAU, margin:TAU, state:TAU, probe-pos:PATH, min=, "
                                          "max=; max defaults "
                                          "to max(--depths); each position halts when a rule fires; filed under "
                                          "max)")
    protocol: str = arg("completion", choices=PROTOCOLS,
                        help="completion (default: one generation per question) | codeact (multi-turn episodes whose "
                             "code runs in a sandbox, as the paper evaluates; app:dataset_format)")
    max_turns: int = arg(5, help="codeact: most model turns per episode")
    max_context_tokens: int = arg(4096, help="codeact: most tokens in an episode's context")
    carry_state_across_turns: bool = arg(False, help="codeact: a tool-response turn starts from the state the model "
                                                     "turn before it ended with (default: from a zero state)")
    tool_output_chars: int = arg(2000, help="codeact: most characters of tool output returned to the model")
    sandbox: SandboxConfig = arg(default_factory=SandboxConfig, flags=SANDBOX_FLAGS,
                                 help="where model code runs (codeact, humaneval): its output_cap_chars and "
                                      "hidden_paths are set per run from tool_output_chars and the run directory "
                                      "(--sandbox, --sandbox-*)")
    allow_low_disk: bool = arg(False, help="record even when the disk estimate exceeds the free space (by default "
                                           "such a run is refused before anything is written)")
    intervention: str | None = arg(None, metavar="SPEC.yaml",
                                   help="record with an intervention applied (a JSON or YAML spec of "
                                        "sst_interp.interventions: sites and operations); the spec and the runs it "
                                        "patches from are part of the run identity")
    threads: int | None = arg(None, help="CPU threads torch computes with while recording (intra-op, and inter-op "
                                         "where torch still allows it); recorded numbers can depend on it, so a resume "
                                         "must use the run's count (default: torch's own count, OMP_NUM_THREADS when "
                                         "set, else the cores it finds; the count used is recorded in the run's "
                                         "identity)")
    allow_empty_sites: bool = arg(False, help="with --intervention: record even when a rule of the spec changed no "
                                              "site in the first batch (by default such a run is refused before "
                                              "anything is written)")
    action_tokens: tuple[tuple[str, int], ...] | None = arg(None, flags=ACTION_TOKENS_FLAGS,
                                                            help="((\"<execute>\", id), (\"</execute>\", id)), or "
                                                                 "None for the checkpoint's, else Gemma 3's "
                                                                 "(--action-tokens)")

    def __post_init__(self) -> None:
        # a named model (hops-organism) is its installed folder from here on, for every check and the identity
        self.model = resolve_model(self.model)

    @property
    def codeact(self) -> bool:
        return self.protocol == "codeact"

    def compile_options(self) -> Any:
        """``--compile`` as a :class:`~sst_interp.model.compile_options.CompileOptions` (a bad value is a
        UsageError)."""
        from sst_interp.model.compile_options import CompileOptions

        return CompileOptions(self.compile)

    def _check_compile(self) -> None:
        """``--compile on`` where the compiled step cannot serve the run is refused here, before anything loads
        (``auto`` decodes eager there instead)."""
        from sst_interp.model.compile_options import setup_refusal

        options = self.compile_options()
        if options.enabled != "on":
            return
        if self.codeact or self.placement()[0] is not None:
            raise UsageError("the compiled decode step serves single-turn completions on one device; "
                             "use --compile off")
        if self.attention is not None:
            raise UsageError("the compiled decode step runs no hooks, so it cannot record --attention; use --compile "
                             "off (or auto)")
        refusal = setup_refusal(probe_policy=self.depth_policy.startswith("probe:"), device=self.device)
        if refusal is None and self.intervention is not None:
            from sst_interp.interventions.compiled import spec_refusal

            refusal = spec_refusal(self.intervention_spec())
        if refusal is not None:
            raise UsageError(refusal)

    def intervention_spec(self) -> Any:
        """The parsed ``--intervention`` spec (an InterventionSpec), or None; a bad file is a UsageError.

        Read once per file content: the runner asks for it per batch."""
        if self.intervention is None:
            return None
        path = Path(self.intervention)
        if not path.is_file():
            return InterventionSpec.from_file(path)  # its one-line error for a missing file
        stat = path.stat()
        return _read_spec(str(path.resolve()), stat.st_mtime_ns, stat.st_size)

    def probe_path(self) -> Path | None:
        """The probe folder of ``--depth-policy probe:PATH`` (None for ``fixed``)."""
        from sst_interp.model.halting import is_position_policy

        if self.depth_policy == "fixed" or is_position_policy(self.depth_policy):
            return None
        kind, sep, path = self.depth_policy.partition(":")
        if kind != "probe" or not sep or not path:
            raise UsageError(f"--depth-policy must be 'fixed' or 'probe:PATH', got {self.depth_policy!r}")
        if not Path(path).exists():
            raise UsageError(f"--depth-policy probe:{path}: no such probe; train one with "
                             f"python -m sst_interp.probe train --run RUN")
        return Path(path)

    def position_policy(self, depths: list[int]) -> Any:
        """The :class:`~sst_interp.model.halting.PositionPolicy` of a per-position ``--depth-policy`` (max
        defaults to max(--depths)), or None for ``fixed`` and ``probe:PATH``. Bad strings are a UsageError."""
        from sst_interp.model.halting import is_position_policy, parse_position_policy

        if not is_position_policy(self.depth_policy):
            return None
        return parse_position_policy(self.depth_policy, default_max=max(depths))

    def out_path(self) -> Path:
        """The run directory: --out, or runs/<questions> (runs/<questions>-codeact for episodes)."""
        if self.out:
            return Path(self.out)
        return Path("runs") / (f"{self.questions}-codeact" if self.codeact else self.questions)

    def default_codeact_checkpoint(self) -> str | None:
        """The shipped demo SST's folder when it is the checkpoint to load: under codeact with neither --checkpoint
        nor --model (nor --demo-preset). None otherwise.

        The untrained backbone cannot act in CodeACT (it never opens an ``<execute>`` block); ``demo-codeact`` was
        trained on CodeACT traces for this."""
        if self.codeact and self.checkpoint is None and self.model is None and not self.demo_preset:
            return resolve_checkpoint(DEFAULT_CODEACT_CHECKPOINT)
        return None

    def use_default_codeact_checkpoint(self) -> bool:
        """Set ``checkpoint`` to :meth:`default_codeact_checkpoint` when there is one; returns whether it was set.
        (The record plan takes a resolved copy instead: :func:`sst_interp.record.plan.resolve_options`.)"""
        default = self.default_codeact_checkpoint()
        if default is not None:
            self.checkpoint = default
        return default is not None

    def validate(self) -> list[int]:
        """Check the options and fill in what they leave open, in place (``max_new_tokens``, ``checkpoint``,
        ``dtype``: see :meth:`resolved`); returns the parsed depth list. Bad values are a UsageError."""
        resolved, depths = self.resolved()
        self.max_new_tokens, self.checkpoint, self.dtype = resolved.max_new_tokens, resolved.checkpoint, resolved.dtype
        return list(depths)

    def resolved(self) -> tuple[RecordOptions, tuple[int, ...]]:
        """Check the options; returns (a copy with what they leave open filled in, the parsed depths), leaving these
        options as they are. Filled in: ``max_new_tokens`` (the question set's default), ``checkpoint`` (a named
        checkpoint as its folder), ``dtype`` (``auto`` resolved for the device). Bad values are a UsageError."""
        from sst_interp.model.loading import check_depths

        depths = check_depths(self.depths)
        self.intervention_spec()  # a bad spec is refused before anything loads
        max_new_tokens = self.max_new_tokens if self.max_new_tokens is not None else \
            default_max_new_tokens(self.questions)
        for name in ("max_new_tokens", "batch_size", "top_k", "max_turns", "tool_output_chars"):
            value = max_new_tokens if name == "max_new_tokens" else getattr(self, name)
            if value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        for name in ("full_positions", "sketch_positions"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.sketch_k is not None and self.sketch_k < 1:
            raise UsageError(f"--sketch-k must be at least 1, got {self.sketch_k}")
        check_attention_flags(self.attention, self.attention_top_k)
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads must be at least 1, got {self.threads}")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {self.limit}")
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        self._check_compile()
        if self.prompt_mode is not None and self.prompt_mode not in PROMPT_MODES:
            raise UsageError(f"--prompt-mode must be one of {', '.join(PROMPT_MODES)}, got {self.prompt_mode!r}")
        checkpoint = resolve_checkpoint(self.checkpoint)
        if self.demo_preset and checkpoint is not None:
            raise UsageError("--demo-preset is for an untrained SST; drop it when passing --checkpoint")
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        self.sandbox.validate()
        if self.codeact and self.max_context_tokens <= max_new_tokens:
            raise UsageError(f"--max-context-tokens ({self.max_context_tokens}) must exceed --max-new-tokens "
                             f"({max_new_tokens}) so that a first turn fits")
        if self.ids is not None and not self.ids:
            raise UsageError("--ids is empty; give comma-separated question ids")
        self._check_protocol_flags()
        self._check_action_tokens()
        self.probe_path()
        self.position_policy(list(depths))
        from sst_interp.model.devices import resolve_placement

        _, dtype = resolve_placement(self.device, self.dtype, mapped=self.placement()[0] is not None)
        resolved = dataclasses.replace(self, max_new_tokens=max_new_tokens, checkpoint=checkpoint, dtype=dtype)
        return resolved, tuple(depths)

    def _check_protocol_flags(self) -> None:
        """Refuse CodeACT-only flags given a value under the completion protocol, where they would do nothing."""
        if self.codeact:
            return
        given = [f"--{name.replace('_', '-')}" for name in CODEACT_ONLY
                 if getattr(self, name) != RecordOptions.__dataclass_fields__[name].default]
        if given:
            raise UsageError(f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} only to --protocol "
                             f"codeact (multi-turn episodes); drop "
                             f"{'them' if len(given) > 1 else 'it'} or add --protocol codeact")

    def _check_action_tokens(self) -> None:
        """``action_tokens`` names exactly ``<execute>`` and ``</execute>``, in that order, with two ids."""
        if self.action_tokens is None:
            return
        texts = tuple(text for text, _ in self.action_tokens)
        if texts != ACTION_TOKEN_TEXTS:
            raise UsageError("--action-tokens must give ids for exactly <execute> and </execute>")
        if self.action_tokens[0][1] == self.action_tokens[1][1]:
            shown = ",".join(f"{text}={token}" for text, token in self.action_tokens)
            raise UsageError(f"--action-tokens {shown!r}: <execute> and </execute> need two different ids (the close "
                             "token ends a code block)")

    def placement(self) -> tuple[str | None, dict[int | str, str] | None]:
        """(device map, max memory) of --device-map / --max-memory; bad values are a UsageError."""
        from sst_interp.model.placement import check_placement, parse_device_map, parse_max_memory

        device_map, max_memory = parse_device_map(self.device_map), parse_max_memory(self.max_memory)
        check_placement(device_map, max_memory)
        return device_map, max_memory


@functools.lru_cache(maxsize=8)
def _read_spec(path: str, mtime_ns: int, size: int) -> Any:
    """An intervention spec file, parsed; keyed by its modification time and size so an edited file is read again."""

    return InterventionSpec.from_file(path)

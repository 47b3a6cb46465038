"""The options of one recording (:class:`RecordOptions`): the typed library config that :func:`record` and
:func:`record_questions` take. The ``record`` command builds it from its flags (:mod:`sst_interp.cli.record`,
where each field's flag and help text live)."""

from __future__ import annotations

import functools

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sst_interp.checkpoints import DEFAULT_CODEACT_CHECKPOINT, resolve_checkpoint
from sst_interp.kernels.errors import UsageError
from sst_interp.model.config import PROMPT_MODES
from sst_interp.sandbox.config import SandboxConfig

DEFAULT_DEPTHS = (1, 2, 3, 4)
PROTOCOLS = ("completion", "codeact")
#: Fields that mean something only for CodeACT episodes (--sandbox also serves HumanEval grading, so it is not here).
CODEACT_ONLY = ("max_turns", "max_context_tokens", "carry_state_across_turns", "tool_output_chars", "action_tokens")
#: The two action tokens a CodeACT episode needs ids for, in their order.
ACTION_TOKEN_TEXTS = ("<execute>", "</execute>")


@dataclass
class RecordOptions:
    """Configuration of one recording. Each field is the ``record`` flag of the same name (``_`` -> ``-``), already
    parsed: ``python -m sst_interp.record --help`` documents them all.

    Typed fields: ``depths`` the flat iteration depths (each >= 1, no repeats); ``ids`` question ids to record
    (None: all); ``source_options`` keyword arguments of the question loader; ``action_tokens``
    ``(("<execute>", id), ("</execute>", id))`` or None (the checkpoint's, else Gemma 3's); ``max_new_tokens``
    None is the question set's default; ``dtype`` ``auto`` is resolved by :meth:`validate` for the device;
    ``sandbox`` where model code runs (codeact, humaneval): its ``output_cap_chars`` and ``hidden_paths`` are set
    per run from ``tool_output_chars`` and the run directory; ``threads`` the CPU thread count while recording
    (None: torch's own count), recorded in the run's numerics fingerprint (:mod:`sst_interp.record.numerics`).
    """

    questions: str = "demo"
    data: str | None = None
    depths: list[int] = field(default_factory=lambda: list(DEFAULT_DEPTHS))
    model: str | None = None
    checkpoint: str | None = None
    demo_preset: bool | None = None
    max_new_tokens: int | None = None
    batch_size: int = 8
    dtype: str = "auto"
    out: str | None = None
    full_positions: int = 10
    sketch_positions: int = 512
    sketch_k: int | None = None
    top_k: int = 128
    gates: bool = False
    limit: int | None = None
    ids: list[str] | None = None
    prompt_mode: str | None = None
    device: str = "auto"
    device_map: str = "none"
    max_memory: str | None = None
    source_options: dict[str, Any] = field(default_factory=dict)
    depth_policy: str = "fixed"
    protocol: str = "completion"
    max_turns: int = 5
    max_context_tokens: int = 4096
    carry_state_across_turns: bool = False
    tool_output_chars: int = 2000
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    allow_low_disk: bool = False
    intervention: str | None = None
    allow_empty_sites: bool = False
    action_tokens: tuple[tuple[str, int], ...] | None = None
    threads: int | None = None
    compile: str = "auto"

    @property
    def codeact(self) -> bool:
        return self.protocol == "codeact"

    def compile_options(self) -> Any:
        """``--compile`` as a :class:`~sst_interp.model.compiled.CompileOptions` (a bad value is a UsageError)."""
        from sst_interp.model.compiled import CompileOptions

        return CompileOptions(self.compile)

    def _check_compile(self) -> None:
        """``--compile on`` where the compiled step cannot serve the run is refused here, before anything loads
        (``auto`` decodes eager there instead)."""
        from sst_interp.model.compiled import setup_refusal

        options = self.compile_options()
        if options.enabled != "on":
            return
        if self.codeact or self.placement()[0] is not None:
            raise UsageError("the compiled decode step serves single-turn completions on one device; "
                             "use --compile off")
        refusal = setup_refusal(intervening=self.intervention is not None,
                                probe_policy=self.depth_policy.startswith("probe:"), device=self.device)
        if refusal is not None:
            raise UsageError(refusal)

    def intervention_spec(self) -> Any:
        """The parsed ``--intervention`` spec (an InterventionSpec), or None; a bad file is a UsageError.

        Read once per file content: the runner asks for it per batch."""
        if self.intervention is None:
            return None
        path = Path(self.intervention)
        if not path.is_file():
            from sst_interp.interventions import InterventionSpec

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

    def use_default_codeact_checkpoint(self) -> bool:
        """Under codeact with neither --checkpoint nor --model (nor --demo-preset), load the shipped demo SST.

        The untrained backbone cannot act in CodeACT (it never opens an ``<execute>`` block); ``demo-codeact`` was
        trained on CodeACT traces for this. Returns whether the default was applied."""
        if self.codeact and self.checkpoint is None and self.model is None and not self.demo_preset:
            self.checkpoint = resolve_checkpoint(DEFAULT_CODEACT_CHECKPOINT)
            return True
        return False

    def validate(self) -> list[int]:
        """Check the options; returns the parsed depth list. Bad values are a UsageError."""
        from sst_interp.data import default_max_new_tokens
        from sst_interp.model.loading import check_depths

        depths = check_depths(self.depths)
        self.intervention_spec()  # a bad spec is refused before anything loads
        if self.max_new_tokens is None:
            self.max_new_tokens = default_max_new_tokens(self.questions)
        for name in ("max_new_tokens", "batch_size", "top_k", "max_turns", "tool_output_chars"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("full_positions", "sketch_positions"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.sketch_k is not None and self.sketch_k < 1:
            raise UsageError(f"--sketch-k must be at least 1, got {self.sketch_k}")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads must be at least 1, got {self.threads}")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {self.limit}")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise UsageError(f"--dtype must be auto, float32 or bfloat16, got {self.dtype!r}")
        self._check_compile()
        if self.prompt_mode is not None and self.prompt_mode not in PROMPT_MODES:
            raise UsageError(f"--prompt-mode must be one of {', '.join(PROMPT_MODES)}, got {self.prompt_mode!r}")
        self.checkpoint = resolve_checkpoint(self.checkpoint)
        if self.demo_preset and self.checkpoint is not None:
            raise UsageError("--demo-preset is for an untrained SST; drop it when passing --checkpoint")
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        self.sandbox.validate()
        if self.codeact and self.max_context_tokens <= self.max_new_tokens:
            raise UsageError(f"--max-context-tokens ({self.max_context_tokens}) must exceed --max-new-tokens "
                             f"({self.max_new_tokens}) so that a first turn fits")
        if self.ids is not None and not self.ids:
            raise UsageError("--ids is empty; give comma-separated question ids")
        self._check_protocol_flags()
        self._check_action_tokens()
        self.probe_path()
        self.position_policy(depths)
        from sst_interp.model.devices import resolve_placement

        _, self.dtype = resolve_placement(self.device, self.dtype, mapped=self.placement()[0] is not None)
        return depths

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
    from sst_interp.interventions import InterventionSpec

    return InterventionSpec.from_file(path)

"""The options of one recording (:class:`RecordArgs`): every field is a ``record`` flag of the same name."""

from __future__ import annotations

import functools

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sst_interp.checkpoints import DEFAULT_CODEACT_CHECKPOINT, resolve_checkpoint
from sst_interp.cli.args import arg
from sst_interp.errors import UsageError
from sst_interp.model.config import PROMPT_MODES

DEFAULT_DEPTHS = "1,2,3,4"
PROTOCOLS = ("completion", "codeact")
SANDBOXES = ("bwrap", "subprocess")
#: Fields that mean something only for CodeACT episodes (--sandbox also serves HumanEval grading, so it is not here).
CODEACT_ONLY = ("max_turns", "max_context_tokens", "carry_state_across_turns", "tool_output_chars", "action_tokens")


@dataclass
class RecordArgs:
    """Configuration of one recording: each field is a ``record`` flag of the same name (``_`` -> ``-``).

    Each field's documentation is its ``help`` (``python -m sst_interp.record --help`` lists them all).
    """

    questions: str = arg("demo", help="question set: demo | gsm8k | gpqa | math500 | humaneval")
    data: str | None = arg(None, help="local data file or folder for the question set (default: "
                                      "$SST_INTERP_DATA_DIR or the hub)")
    depths: str = arg(DEFAULT_DEPTHS, help="comma-separated flat iteration depths")
    model: str | None = arg(None, help="backbone: default (the embedded Gemma 3 270M) | local HF folder | .gguf file "
                                       "| hub id (default: default)")
    checkpoint: str | None = arg(None, help="SST checkpoint folder, or a named checkpoint: demo-codeact | "
                                            "demo-codeact-baseline (default: demo-codeact under --protocol codeact "
                                            "when no --model is given, else an untrained SST)")
    demo_preset: bool | None = arg(None, help="untrained SST with state_scale='hidden' (default: on exactly when "
                                              "neither --model nor --checkpoint is given)")
    max_new_tokens: int | None = arg(None, help="most tokens per answer, or per model turn under codeact (default per "
                                                "set: demo 16, gsm8k 256, gpqa 256, math500 512, humaneval 384)")
    batch_size: int = arg(8, help="questions (episodes) per generation batch and per written batch")
    dtype: str = arg("auto", help="auto | float32 | bfloat16: the model's compute dtype and the stored dtype of "
                                  "hidden states (auto: bfloat16 on CUDA, float32 on the CPU; the resolved one is "
                                  "recorded)")
    out: str | None = arg(None, help="run directory (default runs/<questions>, runs/<questions>-codeact under "
                                     "codeact)")
    full_positions: int = arg(10, help="generated positions recorded in full (position 0 always), per model turn")
    sketch_positions: int = arg(512, help="further positions recorded as top-k |value| sketches, per model turn")
    sketch_k: int | None = arg(None, help="sketch size (default round(d * 1024 / 5376))")
    top_k: int = arg(128, help="K of the per-iteration top-K logits")
    gates: bool = arg(False, help="also record FFN gate activity")
    limit: int | None = arg(None, help="record only the first N questions")
    ids: str | None = arg(None, help="comma-separated question ids to record")
    prompt_mode: str | None = arg(None, help="two_pass | sequential | none: how the prompt and appended tool turns "
                                             "are processed (default: none under the demo preset, else two_pass)")
    device: str = arg("auto", help="torch device: cpu | cuda | auto (cuda when available); not used with "
                                   "--device-map auto")
    device_map: str = arg("none", help="none (default: the whole model on --device) | auto (a model bigger than one "
                                       "device: accelerate spreads the layers over the GPUs, then the CPU; each "
                                       "layer's state stream stays with its layer)")
    max_memory: str | None = arg(None, metavar="DEVICE=SIZE,...",
                                 help="with --device-map auto: memory budget per device, e.g. 0=20GiB,cpu=60GiB "
                                      "(default: what accelerate finds free)")
    source_option: list[str] | None = arg(None, repeat=True, metavar="KEY=VALUE",
                                          help="question-set option, repeatable; integers are passed as integers "
                                               "(gpqa: subset=, password=; demo: n=, seed=, level=)")
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
    sandbox: str = arg("bwrap", choices=SANDBOXES,
                       help="how model code runs (codeact, humaneval): bwrap (bubblewrap isolation, default) | "
                            "subprocess (a plain child process with rlimits: NOT isolated, trusted models only)")
    sandbox_timeout: float = arg(10.0, help="wall-clock seconds one code block may run")
    sandbox_memory_mb: int = arg(1024, help="address space per sandboxed process, MiB (RLIMIT_AS)")
    sandbox_cpu_seconds: int = arg(60, help="CPU seconds per sandboxed process (RLIMIT_CPU)")
    sandbox_max_processes: int = arg(16, help="processes and threads one sandbox may hold at once, its supervisor "
                                              "and interpreter included (RLIMIT_NPROC in its own user namespace)")
    sandbox_tmp_mb: int = arg(64, help="size of the sandbox's one writable place, a memory-backed tmpfs that is its "
                                       "working directory and /tmp, MiB")
    sandbox_max_inodes: int = arg(16384, help="files and directories that tmpfs may hold")
    sandbox_max_file_mb: int = arg(16, help="largest file a sandboxed process may write, MiB (RLIMIT_FSIZE)")
    allow_low_disk: bool = arg(False, help="record even when the disk estimate exceeds the free space (by default "
                                           "such a run is refused before anything is written)")
    intervention: str | None = arg(None, metavar="SPEC.yaml",
                                   help="record with an intervention applied (a JSON or YAML spec of "
                                        "sst_interp.interventions: sites and operations); the spec and the runs it "
                                        "patches from are part of the run identity")
    action_tokens: str | None = arg(None, metavar="<execute>=ID,</execute>=ID",
                                    help="codeact: reserved token ids of the action tokens (default: the "
                                         "checkpoint's training configuration, else Gemma 3's 262140/262141)")

    @property
    def codeact(self) -> bool:
        return self.protocol == "codeact"

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

    def action_token_ids(self) -> tuple[tuple[str, int], ...] | None:
        """--action-tokens parsed to ((text, id), ...); None when not given."""
        if self.action_tokens is None:
            return None
        pairs = {}
        for item in self.action_tokens.split(","):
            text, sep, value = item.strip().rpartition("=")
            if not sep or not value.strip().isdigit():
                raise UsageError(f"--action-tokens {self.action_tokens!r}: write '<execute>=262140,</execute>=262141'")
            pairs[text] = int(value)
        if set(pairs) != {"<execute>", "</execute>"}:
            raise UsageError("--action-tokens must give ids for exactly <execute> and </execute>")
        if pairs["<execute>"] == pairs["</execute>"]:
            raise UsageError(f"--action-tokens {self.action_tokens!r}: <execute> and </execute> need two different "
                             "ids (the close token ends a code block)")
        return tuple(sorted(pairs.items(), key=lambda kv: kv[0] != "<execute>"))

    def id_list(self) -> list[str] | None:
        """--ids as a list (None when not given)."""
        if self.ids is None:
            return None
        ids = [part.strip() for part in self.ids.split(",") if part.strip()]
        if not ids:
            raise UsageError("--ids is empty; give comma-separated question ids")
        return ids

    def source_options(self) -> dict[str, Any]:
        """--source-option KEY=VALUE pairs as a dict (digit strings become ints)."""
        options: dict[str, Any] = {}
        for item in self.source_option or []:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"--source-option {item!r} is not KEY=VALUE, e.g. --source-option subset=main")
            options[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value
        return options

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
        from sst_interp.model.loading import parse_depths

        depths = parse_depths(self.depths)
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
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {self.limit}")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise UsageError(f"--dtype must be auto, float32 or bfloat16, got {self.dtype!r}")
        if self.prompt_mode is not None and self.prompt_mode not in PROMPT_MODES:
            raise UsageError(f"--prompt-mode must be one of {', '.join(PROMPT_MODES)}, got {self.prompt_mode!r}")
        self.checkpoint = resolve_checkpoint(self.checkpoint)
        if self.demo_preset and self.checkpoint is not None:
            raise UsageError("--demo-preset is for an untrained SST; drop it when passing --checkpoint")
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.sandbox not in SANDBOXES:
            raise UsageError(f"--sandbox must be one of {', '.join(SANDBOXES)}, got {self.sandbox!r}")
        if not self.sandbox_timeout > 0:
            raise UsageError(f"--sandbox-timeout must be a positive number of seconds, got {self.sandbox_timeout}")
        for name, least in (("sandbox_memory_mb", 1), ("sandbox_cpu_seconds", 1), ("sandbox_max_processes", 3),
                            ("sandbox_tmp_mb", 1), ("sandbox_max_inodes", 1),
                            ("sandbox_max_file_mb", 1)):
            if getattr(self, name) < least:
                raise UsageError(f"--{name.replace('_', '-')} must be at least {least}, got {getattr(self, name)}")
        if self.codeact and self.max_context_tokens <= self.max_new_tokens:
            raise UsageError(f"--max-context-tokens ({self.max_context_tokens}) must exceed --max-new-tokens "
                             f"({self.max_new_tokens}) so that a first turn fits")
        self._check_protocol_flags()
        self.action_token_ids()
        self.probe_path()
        self.position_policy(depths)
        from sst_interp.model.devices import check_device, resolve_dtype

        if self.placement()[0] is None:  # --device is not used under --device-map auto
            self.dtype = resolve_dtype(self.dtype, check_device(self.device))
        else:  # a device map puts the layers on the GPUs when there are any
            import torch

            self.dtype = resolve_dtype(self.dtype, "cuda" if torch.cuda.is_available() else "cpu")
        return depths

    def _check_protocol_flags(self) -> None:
        """Refuse CodeACT-only flags given a value under the completion protocol, where they would do nothing."""
        if self.codeact:
            return
        given = [f"--{name.replace('_', '-')}" for name in CODEACT_ONLY
                 if getattr(self, name) != RecordArgs.__dataclass_fields__[name].default]
        if given:
            raise UsageError(f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} only to --protocol "
                             f"codeact (multi-turn episodes); drop "
                             f"{'them' if len(given) > 1 else 'it'} or add --protocol codeact")

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

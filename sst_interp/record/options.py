"""The options of one recording (:class:`RecordArgs`): every field is a ``record`` flag of the same name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sst_interp.errors import UsageError
from sst_interp.model.generation import PROMPT_MODES

DEFAULT_DEPTHS = "1,2,3,4"
PROTOCOLS = ("completion", "codeact")
SANDBOXES = ("bwrap", "subprocess")


@dataclass
class RecordArgs:
    """Configuration of one recording (each field is a CLI flag of the same name, ``_`` -> ``-``).

    Args:
        questions: question set: demo | gsm8k | gpqa | math500 | humaneval.
        data: local data file or folder for the set (``--data``); None uses $SST_INTERP_DATA_DIR or the hub.
        depths: comma-separated flat iteration depths, e.g. ``1,2,3,4``.
        model: backbone: ``default`` (embedded Gemma 3 270M), a local HF folder, a .gguf file or a hub id.
        checkpoint: SST checkpoint folder, or None for an untrained SST.
        demo_preset: untrained SST reads the state at hidden scale (state_scale="hidden"); None = on exactly
            when neither --model nor --checkpoint is given.
        max_new_tokens: most tokens generated per question (per model turn under ``codeact``); None uses the
            source's default (sst_interp.data.MAX_NEW_TOKENS: demo 16, gsm8k 256, gpqa 256, math500 512,
            humaneval 384).
        batch_size: questions (episodes) per generation batch (and per written batch).
        dtype: float32 | bfloat16: the model's compute dtype and the stored dtype of hidden states.
        out: run directory; None means runs/<questions> (runs/<questions>-codeact under ``codeact``).
        full_positions: generated positions recorded in full (position 0 always), per model turn.
        sketch_positions: further positions recorded as top-k |value| sketches, per model turn.
        sketch_k: sketch size; None means round(d * 1024 / 5376).
        top_k: K of the per-iteration top-K logits.
        gates: also record FFN gate activity.
        limit: record only the first N questions.
        ids: comma-separated question ids to record.
        prompt_mode: two_pass | sequential | none (how the prompt and appended tool turns are processed); None
            means ``none`` under the demo preset and ``two_pass`` otherwise.
        device: torch device; ``auto`` picks cuda when available.
        source_option: ``KEY=VALUE`` options of the question set (repeatable), e.g. ``subset=main`` or
            ``password=...`` for gpqa, ``n=48`` for demo; integers are passed as integers.
        depth_policy: ``fixed`` (a flat run at every depth of ``depths``) or ``probe:PATH``: a saved halting
            probe chooses the depth at position 0 (of every model turn under ``codeact``), up to max(depths); the
            question is filed under the depth it chose (its first turn's) (Sec. 6, app:halting_eval).
        protocol: ``completion`` (one generation per question) or ``codeact`` (multi-turn episodes whose code
            runs in a sandbox, as the paper evaluates; app:dataset_format).
        max_turns: codeact: most model turns per episode.
        max_context_tokens: codeact: most tokens in an episode's context.
        carry_state_across_turns: codeact: a tool-response turn starts from the state the model turn before it
            ended with, instead of a zero state (DESIGN section 3's default: it does not).
        tool_output_chars: codeact: most characters of tool output returned to the model.
        sandbox: how model code runs: ``bwrap`` (bubblewrap isolation; the default) or ``subprocess`` (a plain
            child process with rlimits: NOT isolated, use only for trusted models).
        sandbox_timeout: wall-clock seconds one code block may run.
        action_tokens: codeact: ``<execute>=ID,</execute>=ID``, the reserved token ids of the action tokens; None
            uses the checkpoint's training configuration when it has one, else Gemma 3's 262140/262141.
    """

    questions: str = "demo"
    data: str | None = None
    depths: str = DEFAULT_DEPTHS
    model: str | None = None
    checkpoint: str | None = None
    demo_preset: bool | None = None
    max_new_tokens: int | None = None
    batch_size: int = 8
    dtype: str = "float32"
    out: str | None = None
    full_positions: int = 10
    sketch_positions: int = 512
    sketch_k: int | None = None
    top_k: int = 128
    gates: bool = False
    limit: int | None = None
    ids: str | None = None
    prompt_mode: str | None = None
    device: str = "auto"
    source_option: list[str] | None = None
    depth_policy: str = "fixed"
    protocol: str = "completion"
    max_turns: int = 5
    max_context_tokens: int = 4096
    carry_state_across_turns: bool = False
    tool_output_chars: int = 2000
    sandbox: str = "bwrap"
    sandbox_timeout: float = 10.0
    action_tokens: str | None = None

    @property
    def codeact(self) -> bool:
        return self.protocol == "codeact"

    def probe_path(self) -> Path | None:
        """The probe folder of ``--depth-policy probe:PATH`` (None for ``fixed``)."""
        if self.depth_policy == "fixed":
            return None
        kind, sep, path = self.depth_policy.partition(":")
        if kind != "probe" or not sep or not path:
            raise UsageError(f"--depth-policy must be 'fixed' or 'probe:PATH', got {self.depth_policy!r}")
        if not Path(path).exists():
            raise UsageError(f"--depth-policy probe:{path}: no such probe; train one with "
                             f"python -m sst_interp.probe train --run RUN")
        return Path(path)

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

    def validate(self) -> list[int]:
        """Check the options; returns the parsed depth list. Bad values are a UsageError."""
        from sst_interp.data import default_max_new_tokens
        from sst_interp.model.loading import parse_depths

        depths = parse_depths(self.depths)
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
        if self.dtype not in ("float32", "bfloat16"):
            raise UsageError(f"--dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.prompt_mode is not None and self.prompt_mode not in PROMPT_MODES:
            raise UsageError(f"--prompt-mode must be one of {', '.join(PROMPT_MODES)}, got {self.prompt_mode!r}")
        if self.demo_preset and self.checkpoint is not None:
            raise UsageError("--demo-preset is for an untrained SST; drop it when passing --checkpoint")
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.sandbox not in SANDBOXES:
            raise UsageError(f"--sandbox must be one of {', '.join(SANDBOXES)}, got {self.sandbox!r}")
        if not self.sandbox_timeout > 0:
            raise UsageError(f"--sandbox-timeout must be a positive number of seconds, got {self.sandbox_timeout}")
        if self.codeact and self.max_context_tokens <= self.max_new_tokens:
            raise UsageError(f"--max-context-tokens ({self.max_context_tokens}) must exceed --max-new-tokens "
                             f"({self.max_new_tokens}) so that a first turn fits")
        self.action_token_ids()
        self.probe_path()
        return depths

"""``python -m sst_interp.record`` (also ``sst-record``): the command line over :func:`sst_interp.record.record`.

One flag per :class:`RecordFlags` field (built by :mod:`sst_interp.cli.args`); :meth:`RecordFlags.options` turns the
parsed flags once into the library's :class:`~sst_interp.record.options.RecordOptions`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sst_interp.cli.args import add_config_flags, arg, config_from_namespace, config_parser
from sst_interp.kernels.errors import UsageError, cli_entry
from sst_interp.record.options import ACTION_TOKEN_TEXTS, DEFAULT_DEPTHS, PROTOCOLS, RecordOptions
from sst_interp.sandbox.config import BACKENDS, SandboxConfig

DESCRIPTION = ("Generate answers (or CodeACT episodes) at every iteration depth, record the state stream inline, "
               "grade. Rerunning the same command resumes an interrupted run.")


@dataclass
class RecordFlags:
    """The flags of ``record``: each field is a flag of the same name (``_`` -> ``-``), documented by its help."""

    questions: str = arg("demo", help="question set: demo | gsm8k | gpqa | math500 | humaneval")
    data: str | None = arg(None, help="local data file or folder for the question set (default: "
                                      "$SST_INTERP_DATA_DIR or the hub)")
    depths: list[int] = arg(default_factory=lambda: list(DEFAULT_DEPTHS), help="comma-separated flat iteration depths")
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
    ids: list[str] | None = arg(None, metavar="ID,...", help="comma-separated question ids to record")
    prompt_mode: str | None = arg(None, help="two_pass | sequential | none: how the prompt and appended tool turns "
                                             "are processed (default: none under the demo preset, else two_pass)")
    compile: str = arg("auto", help="on | off | auto: decode through the compiled step (CUDA graphs on CUDA, "
                                    "torch.compile on the CPU; compiled once per batch size) or eager; auto is on "
                                    "on CUDA for single-turn completions without interventions, off elsewhere")
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
    sandbox: str = arg("bwrap", choices=BACKENDS,
                       help="how model code runs (codeact, humaneval): bwrap (bubblewrap isolation, default) | "
                            "subprocess (a plain child process with rlimits: NOT isolated, trusted models only)")
    sandbox_timeout: float = arg(10.0, help="wall-clock seconds one code block may run")
    sandbox_memory_mb: int = arg(1024, help="address space per sandboxed process, MiB (RLIMIT_AS), and where the host "
                                            "delegates a cgroup v2 memory controller also the memory of the whole "
                                            "sandbox (memory.max)")
    sandbox_cpu_seconds: int = arg(60, help="CPU seconds per sandboxed process (RLIMIT_CPU)")
    sandbox_max_processes: int = arg(8, help="processes and threads one sandbox may hold at once, its supervisor "
                                             "and interpreter included (RLIMIT_NPROC in its own user namespace); "
                                             "without a cgroup, a sandbox's memory is bounded by this x "
                                             "--sandbox-memory-mb + --sandbox-tmp-mb")
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
    threads: int | None = arg(None, help="CPU threads torch computes with while recording (intra-op, and inter-op "
                                         "where torch still allows it); recorded numbers can depend on it, so a resume "
                                         "must use the run's count (default: torch's own count, OMP_NUM_THREADS when "
                                         "set, else the cores it finds; the count used is recorded in the run's "
                                         "identity)")
    allow_empty_sites: bool = arg(False, help="with --intervention: record even when a rule of the spec changed no "
                                              "site in the first batch (by default such a run is refused before "
                                              "anything is written)")
    action_tokens: str | None = arg(None, metavar="<execute>=ID,</execute>=ID",
                                    help="codeact: reserved token ids of the action tokens (default: the "
                                         "checkpoint's training configuration, else Gemma 3's 262140/262141)")

    def options(self) -> RecordOptions:
        """The library config of these flags: ``--source-option`` and ``--action-tokens`` parsed, the
        ``--sandbox*`` flags gathered into a :class:`~sst_interp.sandbox.SandboxConfig` (a bad value is a
        :class:`UsageError` naming its flag); every other field is copied as it is."""
        same = {f.name: getattr(self, f.name) for f in dataclasses.fields(RecordOptions) if hasattr(self, f.name)}
        same.update(source_options=source_options(self.source_option),
                    action_tokens=action_token_ids(self.action_tokens), sandbox=self.sandbox_config())
        return RecordOptions(**same)

    def sandbox_config(self) -> SandboxConfig:
        """``--sandbox`` and its limits as a :class:`~sst_interp.sandbox.SandboxConfig`, each checked under its
        flag's name."""
        if not self.sandbox_timeout > 0:
            raise UsageError(f"--sandbox-timeout must be a positive number of seconds, got {self.sandbox_timeout}")
        limits = {"memory_mb": 1, "cpu_seconds": 1, "max_processes": 3, "tmp_mb": 1, "max_inodes": 1,
                  "max_file_mb": 1}
        for name, least in limits.items():
            value = getattr(self, f"sandbox_{name}")
            if value < least:
                raise UsageError(f"--sandbox-{name.replace('_', '-')} must be at least {least}, got {value}")
        return SandboxConfig(backend=self.sandbox, timeout_s=self.sandbox_timeout,
                             **{name: getattr(self, f"sandbox_{name}") for name in limits})


def source_options(items: Sequence[str] | None) -> dict[str, Any]:
    """``--source-option KEY=VALUE`` items as a dict (integer strings become ints)."""
    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--source-option {item!r} is not KEY=VALUE, e.g. --source-option subset=main")
        options[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value
    return options


def action_token_ids(text: str | None) -> tuple[tuple[str, int], ...] | None:
    """``--action-tokens "<execute>=ID,</execute>=ID"`` as ``(("<execute>", ID), ("</execute>", ID))``; None when not
    given. (Not the mechanism's ``KEY=ID`` mapping type: its message would not show the form to write.)"""
    if text is None:
        return None
    pairs: dict[str, int] = {}
    for item in text.split(","):
        token, sep, value = item.strip().rpartition("=")
        if not sep or not value.strip().isdigit():
            raise UsageError(f"--action-tokens {text!r}: write '<execute>=262140,</execute>=262141'")
        pairs[token] = int(value)
    if set(pairs) != set(ACTION_TOKEN_TEXTS):
        raise UsageError("--action-tokens must give ids for exactly <execute> and </execute>")
    return tuple((token, pairs[token]) for token in ACTION_TOKEN_TEXTS)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag maps to a :class:`RecordFlags` field."""
    parser = config_parser("python -m sst_interp.record", DESCRIPTION)
    add_config_flags(parser, RecordFlags)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> RecordFlags:
    """Parse the command line into :class:`RecordFlags` (bad input is a :class:`~sst_interp.kernels.errors.UsageError`)."""
    return config_from_namespace(RecordFlags, build_parser().parse_args(argv))


def run(argv: Sequence[str] | None = None) -> dict[int, float]:
    """Parse ``argv`` and record; returns the accuracy per depth (for callers in Python; errors raise)."""
    from sst_interp.record.runner import record

    return record(parse_args(argv).options())


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sst_interp.record``; returns the exit code (0 once the run is recorded)."""
    try:
        run(argv)
    except KeyboardInterrupt:
        print("interrupted: completed batches are saved; rerun the same command to resume", file=sys.stderr)
        return 130
    return 0


def console() -> int:
    """The ``sst-record`` console script."""
    return main()

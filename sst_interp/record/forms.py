"""The command-line forms of the three :class:`~sst_interp.record.options.RecordOptions` fields that are not typed as
they are held.

:class:`~sst_interp.record.options.RecordOptions` is the one declaration of ``record``'s options: every field carries
its default and help (:func:`~sst_interp.kernels.fields.arg`), and ``python -m sst_interp.record`` builds its parser
from it (:mod:`sst_interp.cli.record`). Three fields hold a value a user does not type directly (a fourth,
``loop_options`` typed as repeated ``--loop-option KEY=VALUE``, is declared in :mod:`sst_interp.model.loop_options`
because ``generate`` takes it too):

- ``source_options`` (a dict of question-loader keywords) is typed as repeated ``--source-option KEY=VALUE``;
- ``action_tokens`` (``(("<execute>", id), ("</execute>", id))``) is typed as one ``--action-tokens`` string;
- ``sandbox`` (a :class:`~sst_interp.sandbox.config.SandboxConfig`) is typed as ``--sandbox`` and seven
  ``--sandbox-*`` limits.

Each is declared with ``arg(..., flags=Flags(form, convert))``: the form below is a dataclass of the flags the field
is typed as, and ``convert`` turns a parsed form into the field's value, refusing bad input with a
:class:`~sst_interp.kernels.errors.UsageError` that names the flag. The command line shows the form's flags in the
field's place, so ``--help`` lists them where they always stood. Why a form and not a second flags dataclass of the
whole command: only these three fields differ between what is typed and what is held, so only they get a second
shape, and the sandbox limits take their defaults from :class:`SandboxConfig` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import Flags, arg
from sst_interp.sandbox.config import BACKENDS, SandboxConfig

#: The two action tokens a CodeACT episode needs ids for, in their order.
ACTION_TOKEN_TEXTS = ("<execute>", "</execute>")


@dataclass
class SourceOptionForm:
    """``--source-option KEY=VALUE``, repeatable: the question loader's keyword arguments."""

    source_option: list[str] | None = arg(None, repeat=True, metavar="KEY=VALUE",
                                          help="question-set option, repeatable; integers are passed as integers "
                                               "(gpqa: subset=, password=; demo: n=, seed=, level=)")


def source_options(items: Sequence[str] | None) -> dict[str, Any]:
    """``--source-option KEY=VALUE`` items as a dict (integer strings become ints)."""
    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--source-option {item!r} is not KEY=VALUE, e.g. --source-option subset=main")
        options[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value
    return options


@dataclass
class ActionTokensForm:
    """``--action-tokens "<execute>=ID,</execute>=ID"``."""

    action_tokens: str | None = arg(None, metavar="<execute>=ID,</execute>=ID",
                                    help="codeact: reserved token ids of the action tokens (default: the "
                                         "checkpoint's training configuration, else Gemma 3's 262140/262141)")


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


@dataclass
class SandboxForm:
    """``--sandbox`` and its limits; each default is :class:`SandboxConfig`'s own."""

    sandbox: str = arg(SandboxConfig.backend, choices=BACKENDS,
                       help="how model code runs (codeact, humaneval): bwrap (bubblewrap isolation, default) | "
                            "subprocess (a plain child process with rlimits: NOT isolated, trusted models only)")
    sandbox_timeout: float = arg(SandboxConfig.timeout_s, help="wall-clock seconds one code block may run")
    sandbox_memory_mb: int = arg(SandboxConfig.memory_mb,
                                 help="address space per sandboxed process, MiB (RLIMIT_AS), and where the host "
                                      "delegates a cgroup v2 memory controller also the memory of the whole "
                                      "sandbox (memory.max)")
    sandbox_cpu_seconds: int = arg(SandboxConfig.cpu_seconds, help="CPU seconds per sandboxed process (RLIMIT_CPU)")
    sandbox_max_processes: int = arg(SandboxConfig.max_processes,
                                     help="processes and threads one sandbox may hold at once, its supervisor "
                                          "and interpreter included (RLIMIT_NPROC in its own user namespace); "
                                          "without a cgroup, a sandbox's memory is bounded by this x "
                                          "--sandbox-memory-mb + --sandbox-tmp-mb")
    sandbox_tmp_mb: int = arg(SandboxConfig.tmp_mb,
                              help="size of the sandbox's one writable place, a memory-backed tmpfs that is its "
                                   "working directory and /tmp, MiB")
    sandbox_max_inodes: int = arg(SandboxConfig.max_inodes, help="files and directories that tmpfs may hold")
    sandbox_max_file_mb: int = arg(SandboxConfig.max_file_mb,
                                   help="largest file a sandboxed process may write, MiB (RLIMIT_FSIZE)")


def sandbox_config(form: SandboxForm) -> SandboxConfig:
    """``--sandbox`` and its limits as a :class:`SandboxConfig`, each checked under its flag's name."""
    if not form.sandbox_timeout > 0:
        raise UsageError(f"--sandbox-timeout must be a positive number of seconds, got {form.sandbox_timeout}")
    limits = {"memory_mb": 1, "cpu_seconds": 1, "max_processes": 3, "tmp_mb": 1, "max_inodes": 1, "max_file_mb": 1}
    for name, least in limits.items():
        value = getattr(form, f"sandbox_{name}")
        if value < least:
            raise UsageError(f"--sandbox-{name.replace('_', '-')} must be at least {least}, got {value}")
    return SandboxConfig(backend=form.sandbox, timeout_s=form.sandbox_timeout,
                         **{name: getattr(form, f"sandbox_{name}") for name in limits})


SOURCE_OPTION_FLAGS = Flags(SourceOptionForm, lambda form: source_options(form.source_option))
ACTION_TOKENS_FLAGS = Flags(ActionTokensForm, lambda form: action_token_ids(form.action_tokens))
SANDBOX_FLAGS = Flags(SandboxForm, sandbox_config)

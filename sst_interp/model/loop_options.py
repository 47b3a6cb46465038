"""``--loop-option KEY=VALUE``: a setting a looped family declares changeable at inference
(:attr:`~sst_interp.model.loop_declaration.LoopDeclaration.options`; Dory's ``recurrent_kv_cache_mode``).

The command-line form (:data:`LOOP_OPTION_FLAGS`, a repeated ``--loop-option``) is declared here, below the commands
that take it (``record``, ``generate``), so that both hold the same flag; it imports nothing heavy, so that their
``--help`` stays fast. Each value is checked against the values the model's config class allows, and set on the
config before the model is built, where the folder is opened
(:func:`~sst_interp.model.loop_folder.apply_loop_options`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.fields import Flags, arg


@dataclass
class LoopOptionForm:
    """``--loop-option KEY=VALUE``, repeatable: settings the family declares changeable at inference."""

    loop_option: list[str] | None = arg(None, repeat=True, metavar="KEY=VALUE",
                                        help="a setting the looped family declares changeable at inference, "
                                             "repeatable (dory: recurrent_kv_cache_mode=per_loop|last_loop); "
                                             "part of a run's identity")


def loop_options(items: Sequence[str] | None) -> dict[str, str]:
    """``--loop-option KEY=VALUE`` items as ``{KEY: VALUE}`` (checked against the family once its config is read:
    :func:`~sst_interp.model.loop_folder.apply_loop_options`)."""
    options: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UsageError(f"--loop-option {item!r} is not KEY=VALUE, e.g. --loop-option "
                             "recurrent_kv_cache_mode=last_loop")
        if key.strip() in options:
            raise UsageError(f"--loop-option {key.strip()} is given twice; give each setting once")
        options[key.strip()] = value.strip()
    return options


LOOP_OPTION_FLAGS = Flags(LoopOptionForm, lambda form: loop_options(form.loop_option))

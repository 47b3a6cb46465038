"""MkDocs hook: a command page's flag reference is the command's own ``--help``, run at build time.

A page writes ``<!-- help: sst_interp.record -->`` (the module after ``python -m``, then any subcommand); the build
replaces it with that command's ``--help`` output, so the docs list exactly the flags the code declares. A command
whose ``--help`` fails breaks the build (``mkdocs build --strict`` in the tests).
"""

from __future__ import annotations

import re
import subprocess
import sys

MARKER = re.compile(r"<!-- help: ([a-z_.]+(?: [a-z_-]+)?) -->")


def _help_text(command: str) -> str:
    module, *sub = command.split()
    done = subprocess.run([sys.executable, "-m", module, *sub, "--help"], capture_output=True, text=True,
                          env={"COLUMNS": "110", "PATH": "", "HF_HUB_OFFLINE": "1"}, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"python -m {command} --help exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout.rstrip()


def on_page_markdown(markdown: str, **_: object) -> str:
    """Replace each help marker with a fenced block of that command's ``--help``."""
    return MARKER.sub(lambda m: f"```text\n$ python -m {m.group(1)} --help\n{_help_text(m.group(1))}\n```", markdown)

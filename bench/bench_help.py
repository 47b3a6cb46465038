"""Benchmark: the CPU seconds of every command's ``--help``, against the goal of 0.5 s. Run by hand (not in CI):

    python bench/bench_help.py [--repeats 3]

Each command runs as ``python -m MODULE [SUB] --help`` in a fresh interpreter; its CPU time (user + system, from
``getrusage`` of the finished child) is steadier than the wall clock on a shared machine, and the fastest of the
repeats is reported (a cold file cache costs the first one). The bare interpreter (``python -c pass``) is the
floor, printed first. The test suite checks what keeps ``--help`` fast without timing it: no command imports a
library of ``tests.unit.test_imports.HELP_HEAVY`` to answer it.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.unit.test_imports import COMMANDS  # noqa: E402 - the one list of commands, the test's

GOAL_CPU_S = 0.5


def cpu_seconds(argv: list[str]) -> float:
    """User + system CPU seconds of running ``argv`` to its end (its output discarded; a failure raises)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per command; the fastest is reported")
    args = parser.parse_args(argv)
    rows = [("python -c pass (floor)", min(cpu_seconds([sys.executable, "-c", "pass"])
                                           for _ in range(args.repeats)))]
    for command in COMMANDS:
        best = min(cpu_seconds([sys.executable, "-m", *command, "--help"]) for _ in range(args.repeats))
        rows.append((f"{' '.join(command)} --help", best))
    width = max(len(name) for name, _ in rows)
    print(f"{'command':<{width}}  CPU s  goal <= {GOAL_CPU_S} s")
    for name, seconds in rows:
        verdict = "" if name.endswith("(floor)") else ("met" if seconds <= GOAL_CPU_S else "NOT met")
        print(f"{name:<{width}}  {seconds:5.2f}  {verdict}")
    missed = [name for name, seconds in rows[1:] if seconds > GOAL_CPU_S]
    print(f"goal {'missed by ' + ', '.join(missed) if missed else 'met by every command'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

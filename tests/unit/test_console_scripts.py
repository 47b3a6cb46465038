"""Every command as a user starts it: each console script of ``pyproject.toml`` and each ``python -m`` form, in a
fresh process, with ``--help`` (exit 0) and with a bad flag (exit 2 and exactly one ``error:`` line); and each
command once with a successful tiny run (exit 0), through its console script where it has one, whose captured
output (a log, not a terminal) has no carriage return and no line over 1 KB (issue 58: progress bars in plain lines).

A console script exits with whatever its entry returns, so an entry that returned anything but an int (``record``
used to return its accuracies, which became exit status 1) fails the tiny-run case here. The ``python -m`` form
exits with the same ``main()``'s value (``raise SystemExit(main())``, and each console script ``return main()``:
:func:`test_both_forms_exit_with_what_main_returns` reads that from the source), so one tiny run per command covers
both forms. The scripts are the ones
installed beside this interpreter (``pip install -e .`` writes them); the test also checks that the installed entry
points are the ones ``pyproject.toml`` declares, so a stale install fails instead of testing old code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

from sst_interp.synthetic import SyntheticSpec, write_synthetic_run
from tests.unit.conftest import FAST, save_tiny_model

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GSM8K = REPO / "tests/data/gsm8k_tiny.jsonl"
#: A small planted-truth run for report and probe (the shape test_error_contract uses).
SYNTHETIC = dict(halting_dims=(5, 17, 30), halting_strength=3.0, n_questions=40, num_layers=4, hidden_size=48,
                 full_positions=1, top_k=8, vocab_size=256, batch_questions=40, extra_tokens=2, seed=1)
#: One torch thread and no network: tiny models on a shared machine, and nothing may reach the hub.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
       "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class Command:
    """One command: its console script (None for the two that only have a ``python -m`` form), its module, the
    arguments of a successful tiny run (``{name}`` fields filled from the workspace fixture) and the file that run
    makes under ``{out}`` (None: it prints only)."""

    script: str | None
    module: str
    tiny: tuple[str, ...]
    makes: str | None = None
    serves: bool = False  # a server: the tiny run starts it, reads one page and stops it with Ctrl-C


COMMANDS = {
    "generate": Command("sst-generate", "sst_interp.generate",
                        ("--model", "{model}", "--prompt", "ab", "--depths", "1,2", "--max-new-tokens", "2",
                         "--device", "cpu"), None),
    "record": Command("sst-record", "sst_interp.record",
                      (*FAST, "--model", "{model}", "--depths", "1", "--limit", "2", "--out", "{out}/run"),
                      "run/manifest.json"),
    "report": Command("sst-report", "sst_interp.report",
                      ("--run", "{synthetic}", "--only", "tab_staged_breakdown", "--out", "{out}/report",
                       "--quiet"), "report/index.html"),
    "train": Command("sst-train", "sst_interp.train",
                     ("--model", "{model}", "--train-data", "{train_data}", "--action-tokens",
                      "<execute>=100,</execute>=101", "--out", "{out}/train", "--max-steps", "1", "--grad-accum",
                      "1", "--eval-every", "1", "--lora-r", "2", "--quantize", "none", "--device", "cpu",
                      "--no-gradient-checkpointing", "--threads", "1"), "train/summary.json"),
    "probe": Command("sst-probe", "sst_interp.probe",
                     ("train", "--run", "{synthetic}", "--epochs", "2", "--out", "{out}/probe"), "probe/summary.json"),
    "store": Command("sst-store", "sst_interp.store", ("verify", "{recorded}")),
    "codeact_data": Command(None, "sst_interp.train.codeact_data",
                            ("--gsm8k", str(GSM8K), "--out", "{out}/traces", "--sandbox", "subprocess"),
                            "traces/stats.json"),
    "position_sim": Command(None, "sst_interp.probe.position_sim",
                            ("--run", "{recorded}", "--policy", "entropy:1.0,max=2")),
    "intervene": Command("sst-intervene", "sst_interp.intervene",
                         ("window", "--out", "{out}/window", "--model", "{model}", "--demo-preset", "--limit", "1",
                          "--batch-size", "1", "--max-new-tokens", "2", "--full-positions", "2", "--top-k", "4",
                          "--device", "cpu", "--depth", "2", "--size", "2", "--resamples", "50", "--controls", "mean"),
                         "window/experiment-window.json"),
    "organism": Command("sst-organism", "sst_interp.organism",
                        ("train", "--out", "{out}/organism", "--steps", "2", "--batch-size", "2", "--hidden-size", "8",
                         "--max-depth", "1", "--test-size", "6", "--follow-ups", "0", "--threads", "1"),
                        "organism/depth_by_hop.csv"),
    "explore": Command("sst-explore", "sst_interp.explore", ("{synthetic}", "--port", "0"), serves=True),
    "features": Command("sst-features", "sst_interp.features",
                        ("train", "--run", "{synthetic}", "--layer", "0", "--iterations", "1", "--steps", "2", "--batch-size", "8",
                         "--buffer", "16", "--width", "16", "--k", "2", "--device", "cpu", "--out", "{out}/features"),
                        "features/iteration-1/sst_interp_dictionary.json"),
}
#: Every way to start each command: ("sst-record", argv prefix) and ("-m sst_interp.record", argv prefix).
FORMS = [pytest.param(name, [str(BIN / c.script)], id=c.script) for name, c in COMMANDS.items() if c.script] + \
        [pytest.param(name, [sys.executable, "-m", c.module], id=f"-m {c.module}") for name, c in COMMANDS.items()]
#: One way per command for the tiny run: its console script, else its ``python -m`` form.
ONE_FORM = [pytest.param(name, [str(BIN / c.script)] if c.script else [sys.executable, "-m", c.module],
                         id=c.script or f"-m {c.module}") for name, c in COMMANDS.items()]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, cwd=cwd, env=ENV, timeout=300)
    # decoded as written: text=True would turn a carriage return (a progress bar's redraw) into a newline
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict[str, str]:
    """The tiny model, a run recorded with it at depths 1 and 2, a planted synthetic run and a training file."""
    from sst_interp.cli.record import main as record_main

    root = tmp_path_factory.mktemp("scripts")
    model = save_tiny_model(root / "model")
    recorded = root / "recorded"
    assert record_main([*FAST, "--model", str(model), "--depths", "1,2", "--limit", "2", "--out", str(recorded)]) == 0
    write_synthetic_run(root / "synthetic", SyntheticSpec(**SYNTHETIC))
    train_data = root / "train.jsonl"
    train_data.write_text(json.dumps({"prompt": "1 + 1 =", "completion": " 2"}) + "\n")
    return {"model": str(model), "recorded": str(recorded), "synthetic": str(root / "synthetic"),
            "train_data": str(train_data)}


def test_the_installed_scripts_are_the_declared_ones():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    installed = {ep.name: ep.value for ep in metadata.distribution("sst-interp").entry_points
                 if ep.group == "console_scripts"}
    assert installed == declared, "reinstall the package (pip install -e .) after changing [project.scripts]"
    assert {c.script for c in COMMANDS.values() if c.script} == set(declared)
    for name, target in declared.items():
        command = next(key for key, c in COMMANDS.items() if c.script == name)
        assert target == f"sst_interp.cli.{command}:console", name
        assert (BIN / name).is_file(), f"{name} is not installed beside {sys.executable}"


@pytest.mark.parametrize("name, prefix", FORMS)
def test_help_exits_0(name, prefix, tmp_path):
    done = _run([*prefix, "--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ") and not done.stderr


@pytest.mark.parametrize("name, prefix", FORMS)
def test_a_bad_flag_is_one_error_line_and_exit_2(name, prefix, tmp_path):
    done = _run([*prefix, "--no-such-flag", "1"], tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "--help" in lines[0] and not done.stdout and not list(tmp_path.iterdir())


def _serve_once(argv: list[str], cwd: Path) -> None:
    """Start a server command, check it answers at the URL it prints, stop it with Ctrl-C: exit 0."""
    import httpx

    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                               env={**ENV, "PYTHONUNBUFFERED": "1"})
    try:
        line = process.stdout.readline()
        assert " at http://127.0.0.1:" in line, line + process.stderr.read()
        assert httpx.get(line.split(" at ")[1].split()[0] + "api/run", timeout=60).status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    assert process.returncode == 0, process.stderr.read()[-3000:]


def test_both_forms_exit_with_what_main_returns():
    """Each command's ``__main__`` ends in ``raise SystemExit(main())`` and its console script is
    ``return main()``, so the two forms exit alike and the tiny run needs only one of them."""
    import ast

    for name, command in COMMANDS.items():
        entry = REPO.joinpath(*command.module.split("."), "__main__.py")
        exits = [node for node in ast.walk(ast.parse(entry.read_text())) if isinstance(node, ast.Raise)]
        assert [ast.unparse(node.exc) for node in exits] == ["SystemExit(main())"], entry
        if command.script is None:
            continue
        cli = ast.parse((REPO / "sst_interp" / "cli" / f"{name}.py").read_text())
        console = next(node for node in cli.body if isinstance(node, ast.FunctionDef) and node.name == "console")
        returns = [ast.unparse(node.value) for node in ast.walk(console) if isinstance(node, ast.Return)]
        assert returns == ["main()"], f"sst_interp/cli/{name}.py console() returns {returns}"


@pytest.mark.slow
@pytest.mark.parametrize("name, prefix", ONE_FORM)
def test_a_tiny_run_exits_0(name, prefix, workspace, tmp_path):
    argv = [part.format(out=tmp_path, **workspace) for part in COMMANDS[name].tiny]
    if COMMANDS[name].serves:
        _serve_once([*prefix, *argv], tmp_path)
        return
    done = _run([*prefix, *argv], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    # its output is a log here (a pipe, not a terminal): progress in plain lines, no redraws, no line over 1 KB
    for output in (done.stdout, done.stderr):
        assert "\r" not in output, output[-3000:]
        assert max(len(line.encode()) for line in output.split("\n")) <= 1024, output[-3000:]
    if COMMANDS[name].makes is not None:
        assert (tmp_path / COMMANDS[name].makes).is_file()

"""``python -m sst_interp.explore``: it prints its URL, binds 127.0.0.1, serves the run; a port in use is one
``error:`` line and exit 2 (the other bad inputs are rows of tests/unit/test_error_contract.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sst_interp.cli.explore import main

REPO = Path(__file__).resolve().parents[3]


def test_a_port_in_use_is_one_error_line_and_exit_2(planted, capfd):
    root, _ = planted
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as stop:
            main([str(root / "sst"), "--port", str(port)])
    assert stop.value.code == 2
    out, err = capfd.readouterr()
    assert out == ""
    assert err.splitlines() == [f"error: port {port} on 127.0.0.1 is in use; pass another --port (0 picks a free one)"]


def test_the_command_prints_its_url_and_serves_the_run(planted):
    root, truth = planted
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen([sys.executable, "-m", "sst_interp.explore", str(root / "sst"), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        line = process.stdout.readline()
        assert line.startswith(f"exploring {root / 'sst'} at http://127.0.0.1:"), line + process.stderr.read()
        url = line.split(" at ")[1].split()[0]
        summary = httpx.get(url + "api/run", timeout=30).json()
        assert summary["depths"] == [1, 2, 3, 4] and summary["recorded"]["4"] == len(truth.question_ids)
        page = httpx.get(url, timeout=30).text
        assert '<script src="/static/plotly.min.js">' in page and "http" not in page.split("<body>")[0].replace(
            'charset="utf-8"', "")  # nothing in the head is fetched from another host
        assert httpx.get(url + "static/plotly.min.js", timeout=30).status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    assert process.returncode == 0

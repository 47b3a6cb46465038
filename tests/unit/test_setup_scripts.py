"""scripts/lib.sh, which the README's two commands run first: a missing prerequisite stops the script at once with
one ``error:`` line and exit code 2 (never halfway through the tests), and present ones install nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lib(body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` after sourcing scripts/lib.sh; shell functions stand in for id, sudo and apt-get."""
    script = f"set -euo pipefail\ncd {ROOT}\n. scripts/lib.sh\n{body}\necho reached-the-end\n"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)


def _one_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "reached-the-end" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_present_packages_install_nothing():
    done = _lib("PACKAGE_CHECK[bubblewrap]=true\napt-get() { echo apt-get-called; }\nensure_packages bubblewrap")
    assert done.returncode == 0 and done.stdout == "reached-the-end\n" and not done.stderr


def test_missing_package_without_apt_get_is_one_line():
    line = _one_error(_lib("PACKAGE_CHECK[bubblewrap]=false\nPATH=/nonexistent\nensure_packages bubblewrap"))
    assert "missing system packages: bubblewrap" in line and "package manager" in line


def test_missing_package_without_root_or_sudo_names_the_command():
    body = ("PACKAGE_CHECK[bubblewrap]=false\nPACKAGE_CHECK[chromium]=false\napt-get() { :; }\n"
            "id() { echo 1000; }\nsudo() { return 1; }\nensure_packages bubblewrap chromium")
    line = _one_error(_lib(body))
    assert "run 'sudo apt-get install -y bubblewrap chromium', then rerun" in line


def test_a_failing_apt_get_is_one_line():
    body = "PACKAGE_CHECK[bubblewrap]=false\napt-get() { echo noise; return 100; }\nid() { echo 0; }\n" \
           "ensure_packages bubblewrap"
    line = _one_error(_lib(body))
    assert "apt-get could not install bubblewrap" in line


def test_an_old_python_is_one_line():
    line = _one_error(_lib("python3() { [ \"$1\" = -V ] && echo 'Python 3.8.10' && return 0; return 1; }\n"
                           "check_python"))
    assert "python3 is 3.8.10; sst-interp needs Python 3.10 or newer" in line

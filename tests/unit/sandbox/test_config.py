"""Backend selection and its one-line errors; the bwrap command line (no sandbox is started here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.sandbox import PythonSession, SandboxConfig, check_backend, run_program
from sst_interp.sandbox import check as check_module
from sst_interp.sandbox.bwrap import bwrap_argv, mount_args
from sst_interp.sandbox.interpreter import Interpreter
from sst_interp.sandbox.limits import rlimits


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_missing_bwrap_is_one_line_naming_the_package_and_the_alternative(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no bwrap anywhere on PATH
    for attempt in (lambda: check_backend(SandboxConfig()), lambda: PythonSession(), lambda: run_program("pass")):
        with pytest.raises(UsageError) as err:
            attempt()
        message = _one_line(err)
        assert "bubblewrap" in message and "apt-get install bubblewrap" in message
        assert "--sandbox subprocess" in message


def test_subprocess_backend_needs_no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    check_backend(SandboxConfig(backend="subprocess"))


def test_bwrap_that_cannot_create_namespaces_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_module, "find_bwrap", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(check_module, "_probe_verdicts", {})
    monkeypatch.setattr(check_module, "probe_bwrap", lambda: "bwrap: No permissions to create new namespace\n")
    with pytest.raises(UsageError) as err:
        check_backend(SandboxConfig())
    message = _one_line(err)
    assert "cannot create" in message and "No permissions to create new namespace" in message
    assert "--sandbox subprocess" in message


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(UsageError) as err:
        SandboxConfig(backend="docker").validate()
    assert "bwrap, subprocess" in _one_line(err)


@pytest.mark.parametrize("field, value", [("timeout_s", 0), ("memory_mb", 0), ("max_processes", 2),
                                          ("output_cap_chars", -5)])
def test_out_of_range_limits_are_usage_errors(field: str, value: float) -> None:
    with pytest.raises(UsageError, match=field):
        SandboxConfig(**{field: value}).validate()


def test_limits_table_follows_the_config() -> None:
    config = SandboxConfig(cpu_seconds=7, memory_mb=300, max_processes=9, max_file_mb=2)
    table = rlimits(config, process_limit=True)
    assert table == {"RLIMIT_CPU": (7, 7), "RLIMIT_AS": (300 << 20, 300 << 20), "RLIMIT_FSIZE": (2 << 20, 2 << 20),
                     "RLIMIT_CORE": (0, 0), "RLIMIT_NPROC": (9, 9)}
    assert "RLIMIT_NPROC" not in rlimits(config, process_limit=False)


def _pairs(args: list[str], option: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == option]


def test_mounts_are_an_allow_list_with_the_interpreter_and_hidden_paths_inside_it() -> None:
    interpreter = Interpreter("/root/.pyenv/versions/3.11.7/bin/python3.11", ("/root/.pyenv/versions/3.11.7",))
    hidden = ["/root", "/home/me", "/srv/run-dir", "/root/.pyenv/versions/3.11.7/x"]
    args = mount_args(SandboxConfig(tmp_mb=8), interpreter, "/sandbox", hidden, size_option=True)
    assert "/" not in _pairs(args, "--ro-bind")  # the host root is never bound
    assert args[:3] == ["--ro-bind", "/usr", "/usr"]
    # only a hidden path inside an allowed tree needs covering; the rest simply does not exist inside
    assert _pairs(args, "--tmpfs") == ["/root/.pyenv/versions/3.11.7/x"]
    rebind = args.index(interpreter.roots[0])
    assert args[rebind - 1] == "--ro-bind" and args[rebind + 1] == interpreter.roots[0]
    assert args.index("/root/.pyenv/versions/3.11.7/x") > rebind  # stacked on the re-bound tree
    assert _pairs(args, "--dir")[-4:] == ["/root", "/root/.pyenv", "/root/.pyenv/versions", "/sandbox"]
    assert _pairs(args, "--bind") == []  # no host path is writable
    assert args[-3:] == ["--symlink", "/sandbox", "/tmp"]  # one writable place: the bootstrap's capped tmpfs


def test_full_command_line_isolates_and_clears_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    interpreter = Interpreter("/usr/bin/python3.11", ("/usr",))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = SandboxConfig(hidden_paths=(str(run_dir),))
    workdir = "/tmp/sst_interp_exec_x"
    argv = bwrap_argv("/usr/bin/bwrap", config, interpreter, workdir, privileged=False, command=["python3", "-c", "0"])
    for flag in ("--unshare-net", "--unshare-pid", "--unshare-user", "--die-with-parent", "--new-session",
                 "--clearenv"):
        assert flag in argv
    assert argv[-4:] == ["--", "python3", "-c", "0"]
    env = dict(zip(_pairs(argv, "--setenv"), [argv[i + 2] for i, a in enumerate(argv) if a == "--setenv"]))
    assert env == {"PATH": "/usr/bin:/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
                   "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    # an allow list: neither the caller's working directory nor HOME nor the run dir is bound
    bound = [*_pairs(argv, "--ro-bind"), *_pairs(argv, "--bind")]
    cwd = os.path.realpath(os.getcwd())
    assert not any(cwd == path or cwd.startswith(path.rstrip("/") + "/") for path in bound if path != "/usr")
    assert not any(path.startswith(str(tmp_path)) for path in bound)
    privileged = bwrap_argv("/usr/bin/bwrap", config, interpreter, workdir, privileged=True, command=["x"])
    assert "--unshare-user" not in privileged
    assert privileged[privileged.index("--cap-drop"):privileged.index("--cap-drop") + 6] == [
        "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


def test_hidden_paths_are_normalised() -> None:
    config = SandboxConfig(hidden_paths=[Path("relative/run")])
    assert config.hidden_paths == (os.path.abspath("relative/run"),)

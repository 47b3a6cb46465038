"""record --protocol codeact: bad input is one line and exit code 2, before any model loads."""

from __future__ import annotations

import os

import pytest

from sst_interp.cli.record import main, parse_args


def _fail(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    return err


def test_missing_bwrap_is_one_line_naming_the_package(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("sst_interp.sandbox.check.find_bwrap", lambda: None)
    err = _fail(["--protocol", "codeact", "--out", str(tmp_path / "run"), "--model", str(tmp_path / "none")], capsys)
    assert "apt-get install bubblewrap" in err and "--sandbox subprocess" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written



def test_bwrap_printing_bytes_that_are_not_utf8_is_one_line(monkeypatch, capsys, tmp_path):
    """A ``bwrap`` whose ``--version`` prints random bytes (not UTF-8) stops record with one error: line naming it,
    not a UnicodeDecodeError traceback, before anything is written."""
    from sst_interp.sandbox.bwrap import bwrap_version

    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    noise = bytes(os.urandom(64)) + b"\xff\xfe bubblewrap 0.8.0 \xc3\x28"  # 0xff never occurs in UTF-8
    (tmp_path / "noise").write_bytes(noise)
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'noise'}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    bwrap_version.cache_clear()
    try:
        err = _fail(["--protocol", "codeact", "--out", str(tmp_path / "run"), "--model", str(tmp_path / "none")],
                    capsys)
    finally:
        bwrap_version.cache_clear()
    assert err.startswith("error: ") and str(fake) in err and "not text" in err
    assert not (tmp_path / "run").exists()

@pytest.mark.parametrize("argv, message", [
    (["--protocol", "codeact", "--max-turns", "0"], "--max-turns must be at least 1"),
    (["--protocol", "codeact", "--action-tokens", "<execute>=x"], "--action-tokens"),
    (["--protocol", "codeact", "--max-new-tokens", "64", "--max-context-tokens", "64"], "--max-context-tokens"),
    (["--protocol", "codeact", "--sandbox-timeout", "0"], "--sandbox-timeout"),
    (["--protocol", "codeact", "--sandbox-memory-mb", "-1"], "--sandbox-memory-mb must be at least 1, got -1"),
    (["--protocol", "codeact", "--sandbox-max-processes", "2"], "--sandbox-max-processes must be at least 3"),
    (["--protocol", "codeact", "--sandbox-tmp-mb", "0"], "--sandbox-tmp-mb must be at least 1"),
    (["--protocol", "codeact", "--sandbox-max-inodes", "-3"], "--sandbox-max-inodes must be at least 1"),
    (["--protocol", "codeact", "--sandbox-cpu-seconds", "-5"], "--sandbox-cpu-seconds must be at least 1"),
    (["--protocol", "codeact", "--sandbox-max-file-mb", "0"], "--sandbox-max-file-mb must be at least 1"),
])
def test_bad_episode_options_are_one_line(argv, message, capsys, tmp_path):
    assert message in _fail(argv + ["--out", str(tmp_path / "run")], capsys)


def test_unknown_sandbox_is_one_error_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--protocol", "codeact", "--sandbox", "docker"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "invalid choice: 'docker'" in err.splitlines()[-1]


def test_sandbox_flags_reach_the_sandbox_config():
    """--tool-output-chars used to stop at the sandbox's own 2,000-character cut (issue 19, bug 1)."""
    from sst_interp.record.identity import sandbox_config

    args = parse_args(["--protocol", "codeact", "--tool-output-chars", "5000", "--sandbox-memory-mb", "512",
                       "--sandbox-max-processes", "5", "--sandbox-tmp-mb", "8", "--sandbox-cpu-seconds", "9",
                       "--sandbox-max-file-mb", "3", "--sandbox-max-inodes", "77"])
    config = sandbox_config(args)
    assert (config.output_cap_chars, config.memory_mb, config.max_processes, config.tmp_mb, config.cpu_seconds,
            config.max_file_mb, config.max_inodes) == (5000, 512, 5, 8, 9, 3, 77)
    assert sandbox_config(parse_args(["--protocol", "codeact"])).memory_mb == 1024  # the documented default


def test_unknown_protocol_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--protocol", "dialogue"])
    assert exit_info.value.code == 2 and "invalid choice: 'dialogue'" in capsys.readouterr().err


def test_codeact_defaults():
    args = parse_args(["--questions", "gsm8k", "--protocol", "codeact"])
    assert (args.max_turns, args.sandbox.backend, args.carry_state_across_turns, args.tool_output_chars) == (5, "bwrap",
                                                                                                   False, 2000)
    assert str(args.out_path()) == "runs/gsm8k-codeact"
    assert parse_args([]).protocol == "completion"


def test_unwritable_out_is_refused_before_the_model_loads(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    err = _fail(["--out", str(blocker / "run"), "--model", str(tmp_path / "no-model")], capsys)
    assert "is a file, not a folder" in err
    if os.geteuid() != 0:  # root ignores permission bits; the read-only case needs a mount we cannot make here
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        err = _fail(["--out", str(locked / "run"), "--model", str(tmp_path / "no-model")], capsys)
        assert "cannot write into" in err


def test_garbage_gguf_is_one_line(tmp_path, capsys):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf file at all")
    err = _fail(["--model", str(bad), "--out", str(tmp_path / "run")], capsys)
    assert "is not a GGUF file" in err
    assert not (tmp_path / "run").exists()

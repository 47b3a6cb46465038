"""`python -m sst_interp.generate`: bad input is one line on stderr and exit code 2."""

import pytest

from sst_interp.cli.generate import main


@pytest.mark.parametrize("argv, message", [
    (["--prompt", "x", "--depths", "0"], "invalid depth list '0'"),
    (["--prompt", "x", "--depths", "two"], "argument --depths: expected a comma-separated list of int, got 'two'"),
    (["--prompt", "x", "--checkpoint", "/nonexistent/ckpt"], "is not an SST checkpoint"),
    (["--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and message in err


def test_a_named_model_and_checkpoint_generate(capsys):
    """``--model hops-sst-backbone --checkpoint hops-sst``: named as everywhere else (the SST organism answers a
    1-hop question at both depths)."""
    assert main(["--model", "hops-sst-backbone", "--checkpoint", "hops-sst", "--prompt", "c=7 a=c ?a", "--depths",
                 "1,2", "--max-new-tokens", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in out[::2]] == ["--- depth 1", "--- depth 2"]
    assert out[1::2] == ["7", "7"]

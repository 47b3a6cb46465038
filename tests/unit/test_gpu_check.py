"""bench/gpu_check.py: the CPU smoke run prints the whole checklist and passes; without CUDA the script refuses in
one line (exit 2); a failing check makes the exit code 1."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.gpu_check import CheckResult, format_table, main, token_agreement
from bench.paper_shape_check import ShapeRow, format_rows, median_step, per_token, plain_compiled_row
from tests.paths import BENCHMARK_FIXTURES

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.py"
GSM8K = BENCHMARK_FIXTURES / "gsm8k"  # GSM8K test's first rows, real, in the repository


def _run(*flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")  # the smoke is timed noise anyway; keep it off the other core
    return subprocess.run([sys.executable, str(SCRIPT), *flags], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def _table(stdout: str) -> dict[str, tuple[str, str]]:
    """{check: (status, result)} from the summary table at the end of the output."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("check ") and "status" in line)
    rows = {}
    for line in lines[start + 2:]:
        if not line.strip():
            break
        name, status, result = line.split(maxsplit=2)
        rows[name] = (status, result)
    return rows


@pytest.mark.slow
def test_cpu_smoke_runs_every_check_and_passes():
    # one codeact episode, not the smoke's two: each is three records of the real 270M backbone
    done = _run("--cpu-smoke", "--sandbox", "subprocess", "--data", str(GSM8K), "--codeact-questions", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _table(done.stdout)
    assert list(rows) == ["precision", "qlora", "record", "episodes", "codeact", "device-map"]
    assert {name: status for name, (status, _) in rows.items()} == {
        "precision": "ok", "qlora": "skipped", "record": "ok", "episodes": "ok", "codeact": "ok", "device-map": "ok"}
    assert "bf16/fp32 token agreement d1 " in rows["precision"][1] and " d2 " in rows["precision"][1]
    assert rows["qlora"][1].startswith("4-bit skipped: bitsandbytes NF4 needs CUDA; plain LoRA instead: loss ")
    assert "tokens/s recorded; record/generate " in rows["record"][1]
    assert "float32 2/2 depths" in rows["episodes"][1]
    # CPU against CPU: the demo-codeact episodes are identical, token for token.
    assert rows["codeact"][1].startswith("1 GSM8K episodes x depths [1], sandbox subprocess: token agreement with "
                                         "the CPU float32 1.000 (min 0.99)")
    assert "identical episodes float32 1/1" in rows["codeact"][1]
    assert "layers on cpu, disk: tokens equal True, max |hidden diff| 0.0e+00" == rows["device-map"][1]
    for depth in (1, 2):  # the per-depth agreement lines, printed as the check runs
        assert f"   depth {depth}: token agreement " in done.stdout
    assert done.stdout.rstrip().endswith("all checks passed (1 skipped)")


@pytest.mark.slow
def test_a_failing_check_exits_1():
    done = _run("--cpu-smoke", "--checks", "precision", "--questions", "1", "--depths", "1",
                "--min-agreement", "1.01")
    assert done.returncode == 1
    assert _table(done.stdout)["precision"][0] == "FAIL"
    assert done.stdout.rstrip().endswith("FAILED: precision (0 skipped)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_2():
    done = _run()
    assert done.returncode == 2
    assert done.stdout == ""
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: CUDA is not available") and "--cpu-smoke" in err[0]


def test_bad_flags_are_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--cpu-smoke", "--checks", "precision,speed"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--checks precision,speed: use some of" in err[0]


def test_token_agreement_counts_positions_of_the_longer_answer():
    assert token_agreement([[1, 2, 3], [4]], [[1, 2, 3], [4]]) == 1.0
    assert token_agreement([[1, 2, 3, 4]], [[1, 9, 3]]) == 2 / 4
    assert token_agreement([[1], [5, 6]], [[2], [5]]) == 1 / 3
    assert token_agreement([[]], [[]]) == 1.0


def test_table_has_one_row_per_check():
    table = format_table([CheckResult("record", "ok", "12 tokens/s"), CheckResult("device-map", "FAIL", "x y")])
    assert table.splitlines() == ["check       status   result", "----------  -------  ------",
                                  "record      ok       12 tokens/s", "device-map  FAIL     x y"]


@pytest.mark.slow
def test_paper_shape_cpu_smoke_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "paper_shape.json"
    # Two layers, not the smoke's seven: compiling 7 layers twice takes minutes of the suite, and the compiled step
    # over sliding plus full attention layers is held by tests/unit/model/test_compiled_step.py.
    done = _run("--paper-shape", "--cpu-smoke", "--layers", "2", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    payload = json.loads(out.read_text())
    names = [row["name"] for row in payload["rows"]]
    assert names == ["build", "floor", "plain b1", "plain b2", "plain compiled", "sst compiled d1", "sst compiled d2",
                     "policy compiled d2", "record compiled d1", "record compiled d2", "sst d1", "sst d2", "record d1", "record d2",
                     "writer", "qlora 1-pass", "qlora 2-pass"]
    rows = {row["name"]: row for row in payload["rows"]}
    # The meta-device count of the full 27B configuration is part of the build row, even in the smoke run.
    assert rows["build"]["numbers"]["full_parameters"] == 27_009_346_304
    # Four decode tokens on a loaded CPU can time T(4) <= T(1): such a ratio is NaN (``per_token``), never <= 0.
    assert rows["sst d1"]["goal"] == "<= 1.05" and _measured_or_nan(rows["sst d1"]["ratio"])
    assert rows["plain compiled"]["numbers"]["compile_s"] > 0 and _measured_or_nan(rows["sst compiled d2"]["ratio"])
    # Every decode row states its multiple of the device's memory floor; the smoke's shrunk shape is not judged
    # (met None), so its status is "-", or "not measured" when the CPU's noise swamped the steps (a NaN ratio): the
    # status follows the ratio this run measured (the rule on given timings: test_the_plain_compiled_row_...).
    assert rows["floor"]["numbers"]["bytes_per_s"] > 0 and rows["floor"]["numbers"]["per_pass_bytes"] > 0
    plain = rows["plain compiled"]
    assert (plain["goal"], plain["met"]) == ("<= 1.1x floor", None)
    assert plain["status"] == ("not measured" if math.isnan(plain["ratio"]) else "-")
    assert all("floor_ratio" in rows[name]["numbers"] for name in ("plain b1", "plain compiled", "sst compiled d2",
                                                                   "record compiled d2"))
    assert "compiled <= 1.1x the floor on the CPU: " in done.stdout
    assert rows["record compiled d2"]["goal"] == "<= 1.1" and _measured_or_nan(rows["record compiled d2"]["ratio"])
    assert set(rows["policy compiled d2"]["numbers"]) == {"s_per_token", "fixed_s_per_token", "s_per_exit_test"}
    assert rows["record d2"]["numbers"]["payload_bytes"] > rows["record d1"]["numbers"]["payload_bytes"] > 0
    assert all(row["name"] in done.stdout for row in payload["rows"])
    assert done.stdout.count("   plain compiled: ") == 1  # each row printed once, as it is measured
    assert "goals " in done.stdout


def _measured_or_nan(ratio: float) -> bool:
    return math.isnan(ratio) or ratio > 0


def test_a_step_time_swamped_by_noise_is_nan_not_negative():
    # (T(N) - T(1)) / (N - 1) from made-up clocks: 4 tokens in 4 s and 1 token in 1 s is 1 s per step.
    assert per_token(lambda n: {4: 4.0, 1: 1.0}[n], 4) == 1.0
    assert math.isnan(per_token(lambda n: {4: 1.0, 1: 2.0}[n], 4))
    assert math.isnan(per_token(lambda n: 1.0, 4))
    assert median_step([math.nan, 1.0, 3.0]) == 2.0 and math.isnan(median_step([math.nan]))
    assert ShapeRow("x", "y", ratio=math.nan, goal="<= 1.1", met=False).status.startswith("not measured")
    assert ShapeRow("x", "y", ratio=1.2, goal="<= 1.1", met=False).status == "NOT met"


def test_the_plain_compiled_row_is_judged_from_the_timings_it_is_given():
    # 12 ms per step over a 10 ms floor is 1.2x: over the CPU's 1.1x goal, under a GPU's 1.25x; never judged in the
    # smoke run; a step time swamped by noise (NaN, per_token) is "not measured" whatever the run.
    row = plain_compiled_row(0.012, 0.010, 3.0, 0.048, "cpu", smoke=False, mode="default")
    assert (row.ratio, row.goal, row.met, row.status) == (pytest.approx(1.2), "<= 1.1x floor", False, "NOT met")
    assert row.result == ("12.00 ms per step at batch 1 against a floor of 10.00 ms (default; compile + warm-up 3 s); "
                          "HF eager 48.00 ms: 4.00x faster; the design's 25 ms: met")
    assert row.numbers == {"s_per_step": 0.012, "compile_s": 3.0, "floor_ratio": pytest.approx(1.2),
                           "hf_eager_s_per_step": 0.048}
    assert plain_compiled_row(0.012, 0.010, 3.0, None, "cuda:0", smoke=False, mode="reduce-overhead").status == "met"
    assert plain_compiled_row(0.030, 0.010, 3.0, None, "cuda:0", smoke=False, mode="x").result.endswith(
        "(x; compile + warm-up 3 s); the design's 25 ms: missed")
    smoke = plain_compiled_row(0.012, 0.010, 3.0, None, "cpu", smoke=True, mode="default")
    assert (smoke.met, smoke.status) == (None, "-")
    for judged in (False, True):
        noisy = plain_compiled_row(math.nan, 0.010, 3.0, 0.048, "cpu", smoke=judged, mode="default")
        assert math.isnan(noisy.ratio) and noisy.status == "not measured"


def test_the_paper_shape_table_aligns_its_columns_to_the_widest_cell():
    table = format_rows([ShapeRow("plain compiled", "113 ms", ratio=4.5, goal="<= 25 ms"),
                         ShapeRow("policy compiled d2", "x", ratio=math.nan, goal="<= 1.1", met=False)])
    assert table.splitlines() == [
        "measure             ratio  goal      status        peak GiB  result",
        "------------------  -----  --------  ------------  --------  ------",
        "plain compiled      4.500  <= 25 ms  -                    -  113 ms",
        "policy compiled d2    nan  <= 1.1    not measured         -  x"]


def test_paper_shape_flags_without_paper_shape_are_one_line_errors():
    done = _run("--cpu-smoke", "--layers", "4")
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        "error: --layers, --json, --phases and --profile belong to --paper-shape; add --paper-shape"]
    done = _run("--cpu-smoke", "--paper-shape", "--phases", "plain,warp")
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        "error: --phases plain,warp: use some of plain, compiled, sst, record, qlora"]


@pytest.mark.slow
def test_paper_shape_runs_only_the_chosen_phases_and_saves_after_each():
    """The table is handed over after the build and after every phase (the JSON is rewritten each time, so a run cut
    off by a time limit keeps what it measured), and --phases leaves the other phases out."""
    from bench.gpu_check import PAPER_SHAPE_SMOKE, PAPER_SHAPE_SMOKE_LAYERS
    from bench.paper_shape_check import ShapeSettings, run_paper_shape

    settings = ShapeSettings(device="cpu", dtype=torch.float32, layers=PAPER_SHAPE_SMOKE_LAYERS, smoke=True,
                             phases=("plain", "record"), **PAPER_SHAPE_SMOKE)
    saved: list[list[str]] = []
    rows, _ = run_paper_shape(settings, lambda so_far: saved.append([row.name for row in so_far]))
    assert saved == [["build"], ["build", "floor"], ["build", "floor", "plain b1", "plain b2"],
                     ["build", "floor", "plain b1", "plain b2", "record d1", "record d2", "writer"]]
    assert [row.name for row in rows] == saved[-1]


def test_compare_generations_counts_tokens_episodes_and_accuracy(tmp_path):
    import pandas as pd

    from bench.gpu_check import compare_generations

    def run(name: str, rows: list[tuple[str, int, int, list[int], bool]]):
        folder = tmp_path / name
        folder.mkdir()
        pd.DataFrame(rows, columns=["question_id", "depth", "turn", "token_ids", "correct"]).to_parquet(
            folder / "generations.parquet")
        return folder

    reference = run("cpu", [("a", 1, 0, [1, 2, 3, 4], False), ("a", 1, 1, [5, 6], True),
                            ("b", 1, 0, [7, 8], False)])
    other = run("gpu", [("a", 1, 0, [1, 2, 9, 4], False), ("a", 1, 1, [5, 6], True),
                        ("b", 1, 0, [7, 8], False), ("b", 1, 1, [1], True)])
    result = compare_generations(reference, other)
    # matched tokens 3 + 2 + 2 + 0 over the longer turns 4 + 2 + 2 + 1
    assert result["agreement"] == 7 / 9
    assert (result["identical"], result["episodes"]) == (0, 2)
    assert result["lines"][1].endswith("identical episodes 0/2; accuracy CPU 1/2, this run 2/2")

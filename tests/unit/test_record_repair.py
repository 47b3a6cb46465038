"""Repair means repair (issue 20 item 4): after any damage ``store verify`` reports, rerunning the same ``record``
command re-records exactly the batches the damage touched, and the run then equals an undamaged one bit for bit
(generations, questions, hidden states, logits and sketches of every question at every depth)."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from sst_interp.cli.record import main
from sst_interp.store import Run
from sst_interp.store.verify import verify_run
from tests.unit.conftest import FAST, save_tiny_model
from tests.unit.store.test_store_integrity import flip_page

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTIONS, BATCH, DEPTHS = 4, 2, (1, 2)


#: CodeACT episodes on the tiny model: action ids inside its vocabulary, code run without bubblewrap.
CODEACT = ["--protocol", "codeact", "--sandbox", "subprocess", "--action-tokens", "<execute>=100,</execute>=101",
           "--max-context-tokens", "400"]


def _argv(model: Path, out: Path, protocol: str = "completion") -> list[str]:
    return FAST + ["--model", str(model), "--out", str(out), "--depths", ",".join(map(str, DEPTHS)),
                   "--limit", str(QUESTIONS), "--batch-size", str(BATCH), "--demo-preset"] + \
        (CODEACT if protocol == "codeact" else [])


def _first(run: Path, kind: str) -> Path:
    return sorted((run / kind).rglob("*.parquet"))[0]


def _truncate(target: Path) -> None:
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])


#: damage -> (what it does to a run, how many question-depths its repair records again)
DAMAGE: dict[str, tuple[Callable[[Path], None], int]] = {
    "hidden-shard-truncated": (lambda r: _truncate(_first(r, "hidden")), BATCH),
    "sketch-shard-truncated": (lambda r: _truncate(_first(r, "sketch")), BATCH),
    "logits-shard-truncated": (lambda r: _truncate(_first(r, "logits")), BATCH),
    "hidden-shard-flipped": (lambda r: flip_page(_first(r, "hidden"), "values"), BATCH),
    # one row group per batch: a flipped page costs that batch only
    "generations-flipped": (lambda r: flip_page(r / "generations.parquet", "text"), BATCH),
    # a truncated table has no footer left, so none of its rows can be read: every batch is recorded again
    "generations-truncated": (lambda r: _truncate(r / "generations.parquet"), QUESTIONS * len(DEPTHS)),
    "generations-deleted": (lambda r: (r / "generations.parquet").unlink(), QUESTIONS * len(DEPTHS)),
    "questions-flipped": (lambda r: flip_page(r / "questions.parquet", "prompt"), 0),
    "questions-deleted": (lambda r: (r / "questions.parquet").unlink(), 0),
    # CodeACT runs: the episodes table, the source of truth for correctness, repaired the same way
    "codeact-episodes-flipped": (lambda r: flip_page(r / "episodes.parquet", "final_answer"), BATCH),
    "codeact-episodes-truncated": (lambda r: _truncate(r / "episodes.parquet"), QUESTIONS * len(DEPTHS)),
    "codeact-hidden-shard-truncated": (lambda r: _truncate(_first(r, "hidden")), BATCH),
}


def _record(model: Path, out: Path, protocol: str) -> str:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        main(_argv(model, out, protocol))
    return stdout.getvalue()


def _content(path: Path) -> dict[str, object]:
    """Everything a reader sees of a run, keyed so that the order of batches on disk does not matter."""
    run = Run.open(path)
    content: dict[str, object] = {
        "generations": run.generations().sort_values(["depth", "question_id", "turn"]).reset_index(drop=True),
        "questions": run.questions().sort_values("question_id").reset_index(drop=True),
        "episodes": run.episodes().sort_values(["depth", "question_id"]).reset_index(drop=True)
        if (path / "episodes.parquet").exists() else None,
    }
    for depth in DEPTHS:
        content[f"hidden{depth}"] = {b.question_id: b.values for b in run.hidden(depth)}
        content[f"logits{depth}"] = {b.question_id: (b.argmax, b.top_ids, b.top_logprobs, b.entropy,
                                                     b.tracked_logprobs) for b in run.logits(depth)}
        content[f"sketch{depth}"] = {b.question_id: b.top_indices for b in run.sketch(depth)}
    return content


def _assert_equal(a: object, b: object) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for key in a:
            _assert_equal(a[key], b[key])
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_equal(x, y)
    elif a is None:
        assert b is None
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()  # bit for bit, NaN too
    else:
        assert a.to_json() == b.to_json()  # DataFrames


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("repair") / "model")


@pytest.fixture(scope="module")
def pristine(model, tmp_path_factory) -> Callable[[str], Path]:
    """One undamaged run per protocol, recorded once (CodeACT's only when a row asks for it)."""
    runs: dict[str, Path] = {}

    def get(protocol: str) -> Path:
        if protocol not in runs:
            runs[protocol] = tmp_path_factory.mktemp(f"pristine-{protocol}") / "run"
            _record(model, runs[protocol], protocol)
        return runs[protocol]

    return get


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_rerun_repairs_exactly_the_damaged_batches(model, pristine, tmp_path, damage):
    protocol = "codeact" if damage.startswith("codeact-") else "completion"
    original = pristine(protocol)
    run = tmp_path / "run"
    shutil.copytree(original, run)
    harm, again = DAMAGE[damage]
    harm(run)
    assert not verify_run(run).ok  # the damage is one verify reports

    said = _record(model, run, protocol)  # the same command again: exit 0, no SystemExit

    match = re.search(r"resume: (\d+) question-depth\(s\)", said)
    assert (int(match.group(1)) if match else 0) == again, said
    assert verify_run(run).ok
    _assert_equal(_content(run), _content(original))


# --------------------------------------------------------------------------------------------------------------
# Damage is never blessed (issue 49): a flip in a footer's JSON metadata passes every page check; only the sha256
# sees it. Rerunning record (or store repair) must not rewrite the damaged bytes and hash them again.


def flip_footer_metadata(target: Path, n: int = 64) -> None:
    """XOR ``n`` bytes in the middle of the JSON the footer's key-value metadata holds: pandas' (tables written
    before this fix carry it) or else the run's stamp. This is the Parquet copy, which ``read_row_group`` returns
    and no page CRC covers (``read_table`` uses the copy inside the Arrow schema, so a plain read sees nothing)."""
    import pyarrow.parquet as pq

    from sst_interp.store.stamp import STAMP_KEY

    metadata = pq.read_metadata(target).metadata
    raw = metadata.get(b"pandas") or metadata[STAMP_KEY]
    data = bytearray(target.read_bytes())
    start = data.rfind(raw) + len(raw) // 2 - n // 2
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    assert start > footer and len(raw) > n  # inside the footer's copy, past every page
    for i in range(start, start + n):
        data[i] ^= 0xFF  # 0xFF-xored ASCII is >= 0x80 everywhere: not UTF-8
    target.write_bytes(bytes(data))


FOOTER_DAMAGE = {
    "episodes": lambda r: r / "episodes.parquet",
    "questions": lambda r: r / "questions.parquet",
    "hidden-shard": lambda r: _first(r, "hidden"),
}


def _report_refuses(run: Path, target: Path, out: Path, capsys) -> None:
    """report exits 2 with one error: line naming ``target`` and store repair, and writes no artefact."""
    from sst_interp.cli.report import main as report_main

    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        report_main(["--run", str(run), "--out", str(out), "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(target) in lines[0], err
    assert "python -m sst_interp.store repair" in lines[0] and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("where", list(FOOTER_DAMAGE))
def test_a_rerun_over_damaged_footer_metadata_rebuilds_it_and_never_blesses_it(model, pristine, tmp_path, capsys,
                                                                               where):
    original = pristine("codeact")
    run = tmp_path / "run"
    shutil.copytree(original, run)
    target = FOOTER_DAMAGE[where](run)
    rel = target.relative_to(run).as_posix()
    flip_footer_metadata(target)
    found = verify_run(run)
    assert [name for name, _ in found.damaged] == [rel]
    _report_refuses(run, target, tmp_path / "report", capsys)

    said = _record(model, run, "codeact")  # the same command again: the file is rebuilt, never re-stamped

    assert "damaged file(s) failed verification" in said and rel in said
    assert verify_run(run).ok  # rebuilt, and it verifies: the manifest's sha256 is that of bytes written afresh
    _assert_equal(_content(run), _content(original))


def test_store_repair_rebuilds_a_table_with_damaged_footer_metadata(pristine, tmp_path, capsys):
    from sst_interp.cli.store import main as store_main

    run = tmp_path / "run"
    shutil.copytree(pristine("codeact"), run)
    before = (run / "episodes.parquet").read_bytes()
    flip_footer_metadata(run / "episodes.parquet")
    damaged = (run / "episodes.parquet").read_bytes()
    assert store_main(["repair", str(run)]) == 0
    assert "rebuilt episodes.parquet" in capsys.readouterr().out
    after = (run / "episodes.parquet").read_bytes()
    assert after != damaged  # a new footer, not the damaged one hashed again
    assert after == before  # the verified rows under the writer's own footer: the bytes it wrote, sha256 and all
    assert verify_run(run).ok
    _assert_equal(_content(run), _content(pristine("codeact")))

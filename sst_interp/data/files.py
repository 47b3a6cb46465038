"""Finding and reading benchmark files: a local path, ``SST_INTERP_DATA_DIR``, or the Hugging Face hub.

Lookup order for a source when no path is given:

1. ``$SST_INTERP_DATA_DIR/<layout path>`` where the layout is that of the shared data
   folder (``gsm8k/test.jsonl``, ``gpqa/dataset.zip``, ``math500/test.jsonl``,
   ``humaneval/HumanEval.jsonl.gz``);
2. otherwise ``huggingface_hub.hf_hub_download`` of the hub copy in :data:`HUB_FILES`
   (online only; offline this is a UsageError asking for ``--data PATH``).

A given path may be the file itself or a folder holding either the layout path or the bare file name.
"""

from __future__ import annotations

import gzip
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from huggingface_hub import constants, hf_hub_download

from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.jsonlines import json_objects

DATA_DIR_ENV = "SST_INTERP_DATA_DIR"


@dataclass(frozen=True)
class HubFile:
    """A dataset file on the Hugging Face hub.

    Args:
        repo_id: dataset repository, e.g. ``"openai/gsm8k"``.
        filename: path of the file inside the repository.
        note: extra advice for the error message when the download fails (e.g. a gated repository).
    """

    repo_id: str
    filename: str
    note: str = ""


_GATED = "the repository is gated: accept its terms on the hub and log in with `hf auth login`"

HUB_FILES: dict[tuple[str, str], HubFile] = {
    ("gsm8k", "test"): HubFile("openai/gsm8k", "main/test-00000-of-00001.parquet"),
    ("gsm8k", "train"): HubFile("openai/gsm8k", "main/train-00000-of-00001.parquet"),
    ("math500", "test"): HubFile("HuggingFaceH4/MATH-500", "test.jsonl"),
    ("humaneval", "test"): HubFile("openai/openai_humaneval", "openai_humaneval/test-00000-of-00001.parquet"),
    **{
        ("gpqa", subset): HubFile("Idavidrein/gpqa", f"gpqa_{subset}.csv", _GATED)
        for subset in ("diamond", "main", "extended")
    },
}


def resolve_file(
    source: str, layout_path: str, path: str | os.PathLike[str] | None, expected: str, hub: HubFile | None
) -> Path:
    """The local file to read for ``source``.

    Args:
        source: source name, for messages.
        layout_path: the file's path in the shared data layout, e.g. ``"gsm8k/test.jsonl"``.
        path: a user-given file or folder, or None to use ``$SST_INTERP_DATA_DIR`` or the hub.
        expected: one-line description of the expected format, for messages.
        hub: the hub copy to download when no path and no data dir are given (None: no hub copy).
    """
    if path is not None:
        given = Path(path).expanduser()
        if given.is_dir():
            for candidate in (given / layout_path, given / Path(layout_path).name):
                if candidate.is_file():
                    return candidate
            raise UsageError(
                f"{source}: folder {given} holds neither {layout_path} nor {Path(layout_path).name}; "
                f"pass --data to the file ({expected})"
            )
        if not given.is_file():
            raise UsageError(f"{source}: data file {given} does not exist; pass --data to a local copy ({expected})")
        return given
    data_dir = os.environ.get(DATA_DIR_ENV)
    if data_dir:
        candidate = Path(data_dir).expanduser() / layout_path
        if not candidate.is_file():
            raise UsageError(
                f"{source}: {candidate} does not exist (from ${DATA_DIR_ENV}); expected {expected} at {layout_path}"
            )
        return candidate
    if hub is None:
        raise UsageError(f"{source}: no local file and no hub copy; pass --data PATH to a local copy ({expected})")
    return _download(source, hub, expected)


HUB_HOST = "huggingface.co"
RESOLVE_TIMEOUT_S = 3.0


def hub_unreachable_reason() -> str | None:
    """Why the hub cannot be reached, or None when it may be: offline mode is set, or its host name does not
    resolve within a few seconds. Checked before downloading because huggingface_hub retries for about a minute
    before it gives up on a machine without network."""

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    result: list[BaseException | None] = []

    def resolve() -> None:
        try:
            socket.getaddrinfo(HUB_HOST, 443)
            result.append(None)
        except OSError as err:  # no name resolution: the machine is offline
            result.append(err)

    worker = threading.Thread(target=resolve, daemon=True)
    worker.start()
    worker.join(RESOLVE_TIMEOUT_S)
    if not result:
        return f"{HUB_HOST} did not resolve within {RESOLVE_TIMEOUT_S:g} s"
    return None if result[0] is None else f"{HUB_HOST} does not resolve ({type(result[0]).__name__})"


def _download(source: str, hub: HubFile, expected: str) -> Path:
    """Download ``hub`` with huggingface_hub (cached by it); a failure becomes a UsageError."""

    offline = hub_unreachable_reason()
    if offline is not None:
        raise UsageError(f"{source}: the Hugging Face hub cannot be reached ({offline}); pass --data PATH to a "
                         f"local copy ({expected})")
    try:
        return Path(hf_hub_download(repo_id=hub.repo_id, filename=hub.filename, repo_type="dataset"))
    except Exception as err:  # any hub/network failure means the same thing to the user
        note = f"; {hub.note}" if hub.note else ""
        raise UsageError(
            f"{source}: could not download {hub.repo_id}/{hub.filename} from the Hugging Face hub "
            f"({type(err).__name__}{note}); pass --data PATH to a local copy ({expected})"
        ) from err


#: The longest line a JSON-lines data file may hold. Real rows are a few KB (GSM8K < 2 KB, a HumanEval task
#: < 10 KB); a line of many MB is a damaged or wrong file, and tokenising it would exhaust memory later.
MAX_LINE_BYTES = 1 << 20


def read_records(path: Path, expected: str, required: tuple[str, ...],
                 unique: str | None = None) -> list[dict[str, Any]]:
    """Rows of a ``.jsonl``, ``.jsonl.gz`` or ``.parquet`` file as dicts, validated row by row.

    Every row must hold the ``required`` keys with a value that is neither null nor an empty string; with
    ``unique``, that key's values must differ between rows. A JSON line longer than :data:`MAX_LINE_BYTES` is
    refused with its size before it is parsed.

    Raises UsageError naming the file, the row (line) number and the expected format when it cannot be read.
    """
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            records = pq.read_table(path).to_pylist()
        elif name.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                records = _parse_jsonl(handle, path, expected)
        else:
            with path.open("rb") as handle:
                records = _parse_jsonl(handle, path, expected)
    except UsageError:
        raise
    except (OSError, UnicodeDecodeError, EOFError, ValueError) as err:
        raise UsageError(f"cannot read {path} ({type(err).__name__}: {err}); expected {expected}") from err
    seen: dict[Any, int] = {}
    for index, record in enumerate(records):
        row = index + 1
        missing = [key for key in required if key not in record]
        if missing:
            raise UsageError(f"{path}: row {row} lacks keys {missing}; expected {expected}")
        for key in required:
            value = record[key]
            if value is None or (isinstance(value, str) and not value.strip()):
                what = "null" if value is None else "empty"
                raise UsageError(f"{path}: row {row}: {key!r} is {what}; expected {expected}")
        if unique is not None:
            key_value = record[unique]
            if key_value in seen:
                raise UsageError(f"{path}: row {row} repeats {unique} {key_value!r} of row {seen[key_value]}; "
                                 f"every {unique} must be unique")
            seen[key_value] = row
    if not records:
        raise UsageError(f"{path} holds no rows; expected {expected}")
    return records


def _parse_jsonl(handle: Any, path: Path, expected: str) -> list[dict[str, Any]]:
    """Parse JSON Lines from a binary file ``handle``, one line at a time; blank lines are skipped, anything else
    must be a JSON object of at most :data:`MAX_LINE_BYTES`."""
    return [record for _, record in json_objects(
        _bounded_lines(handle, path, expected),
        not_json=lambda number, error: f"{path}: line {number} is not JSON ({error}); expected {expected}",
        not_object=lambda number, _: f"{path}: line {number} is not a JSON object; expected {expected}")]


def _bounded_lines(handle: Any, path: Path, expected: str) -> Iterator[str]:
    """The lines of a binary file ``handle``, decoded; a line longer than :data:`MAX_LINE_BYTES` is refused with its
    size before it is decoded."""
    number = 0
    while True:
        # readline with a limit never holds more than one line's worth beyond it, however long the line is
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            size = len(line) + _rest_of_line(handle)
            raise UsageError(f"{path}: line {number} is {size / 2**20:.1f} MiB, longer than the "
                             f"{MAX_LINE_BYTES // 2**20} MiB a row may be; expected {expected}")
        yield line.decode("utf-8")


def _rest_of_line(handle: Any) -> int:
    """Bytes up to and including the next newline of ``handle`` (read in chunks, for the size in a message)."""
    total = 0
    while True:
        chunk = handle.readline(1 << 20)
        total += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return total

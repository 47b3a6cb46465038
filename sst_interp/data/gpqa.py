"""GPQA loader: the official password-protected zip (read in memory) or an extracted CSV.

The zip is never extracted to disk: the subset's CSV (``dataset/gpqa_<subset>.csv``) is
decrypted with :mod:`zipfile` into memory and parsed with :mod:`csv`. Subsets: ``diamond``
(default, 198 rows), ``main`` (448), ``extended`` (546). The zip's ``gpqa_experts.csv`` describes
the expert validators (name, domain, accuracy), not questions, so ``experts`` is refused with that reason.

Option order. The four options (``Correct Answer``, ``Incorrect Answer 1..3``) are shuffled
with a fixed seed per question: ``seed = int.from_bytes(sha256(record_id.encode("utf-8")).digest()[:8], "big")``,
then ``random.Random(seed).shuffle([0, 1, 2, 3])`` gives the order, where 0 is the correct answer and
``k`` is ``Incorrect Answer k``. The same ``Record ID`` always gets the same order, on any machine
and in any subset. The reference is the letter (``A``-``D``) at which the correct answer lands;
``metadata["option_order"]`` keeps the order.

GPQA's authors ask that its questions not be published in plain text: nothing here writes them
anywhere except into the prompts handed back to the caller.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import random
import re
import zipfile
import zlib
from pathlib import Path

from sst_interp.data.files import HUB_FILES, resolve_file
from sst_interp.data.prompts import OPTION_LETTERS, mcq_prompt
from sst_interp.data.question import Question
from sst_interp.kernels.errors import UsageError

GPQA_PASSWORD = "deserted-untie-orchid"
GPQA_SUBSETS = ("diamond", "main", "extended")
GPQA_FORMAT = (
    "the official GPQA dataset.zip (password-protected, dataset/gpqa_<subset>.csv inside) or an extracted "
    "gpqa_<subset>.csv with columns Question, Correct Answer, Incorrect Answer 1-3, Record ID"
)
REQUIRED_COLUMNS = (
    "Question",
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
    "Record ID",
)
_SUBSET_FILE = re.compile(r"gpqa_(diamond|main|extended)\.csv$", re.IGNORECASE)


def option_order(record_id: str) -> list[int]:
    """The fixed shuffled order of the four options for ``record_id`` (0 = correct, k = Incorrect Answer k)."""
    seed = int.from_bytes(hashlib.sha256(record_id.encode("utf-8")).digest()[:8], "big")
    order = [0, 1, 2, 3]
    random.Random(seed).shuffle(order)
    return order


def _read_zip(path: Path, subset: str, password: str) -> str:
    """The text of ``dataset/gpqa_<subset>.csv`` inside the zip, decrypted in memory."""
    member = f"dataset/gpqa_{subset}.csv"
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if member not in names:
                raise UsageError(f"{path} has no {member}; expected {GPQA_FORMAT}")
            data = archive.read(member, pwd=password.encode("utf-8"))
    except RuntimeError as err:
        if "password" in str(err).lower():
            raise UsageError(
                f"wrong password for {path}; the GPQA README gives it (default {GPQA_PASSWORD!r})"
            ) from err
        raise
    except (zipfile.BadZipFile, zlib.error) as err:
        # A wrong password passes ZipCrypto's one-byte check 1 time in 256 and then fails here.
        raise UsageError(f"cannot decrypt {member} in {path} ({err}); wrong password or damaged zip") from err
    except OSError as err:
        raise UsageError(f"cannot read {path} ({err}); expected {GPQA_FORMAT}") from err
    return data.decode("utf-8-sig")


def _parse_csv(text: str, origin: Path) -> list[dict[str, str]]:
    """Rows of a GPQA CSV (multi-line fields allowed); UsageError if a required column is missing."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise UsageError(f"{origin} lacks GPQA columns {missing}; expected {GPQA_FORMAT}")
    rows = list(reader)
    if not rows:
        raise UsageError(f"{origin} holds no rows; expected {GPQA_FORMAT}")
    seen: dict[str, int] = {}
    for number, row in enumerate(rows, start=1):
        # a short row reads None for its missing columns; a blank field would make an empty question or option
        blank = [c for c in REQUIRED_COLUMNS if not (row.get(c) or "").strip()]
        if blank:
            raise UsageError(f"{origin}: row {number} has no value for {blank}; expected {GPQA_FORMAT}")
        record_id = row["Record ID"].strip()
        if record_id in seen:
            raise UsageError(f"{origin}: row {number} repeats Record ID {record_id!r} of row {seen[record_id]}; "
                             "every Record ID must be unique")
        seen[record_id] = number
    return rows


def gpqa_file(path: str | os.PathLike[str] | None = None, subset: str = "diamond") -> Path:
    """The local GPQA file for ``subset``: the zip, or a CSV (given, or downloaded from the hub)."""
    if subset == "experts":
        raise UsageError(
            "GPQA 'experts' (gpqa_experts.csv) lists the expert validators, not questions; "
            f"choose a question subset: {list(GPQA_SUBSETS)}"
        )
    if subset not in GPQA_SUBSETS:
        raise UsageError(f"unknown GPQA subset {subset!r}; known: {list(GPQA_SUBSETS)}")
    return resolve_file("gpqa", "gpqa/dataset.zip", path, GPQA_FORMAT, HUB_FILES[("gpqa", subset)])


def load_gpqa(
    path: str | os.PathLike[str] | None = None, subset: str = "diamond", password: str = GPQA_PASSWORD
) -> list[Question]:
    """GPQA questions of ``subset`` with shuffled options (see the module docstring for the seed).

    Args:
        path: the zip, an extracted CSV, a folder holding ``gpqa/dataset.zip`` or ``dataset.zip``, or None.
        subset: ``diamond`` (default), ``main`` or ``extended``; an extracted CSV named
            ``gpqa_<subset>.csv`` sets the subset from its name.
        password: the zip password; a wrong one is a UsageError.
    """
    file = gpqa_file(path, subset)
    if zipfile.is_zipfile(file):
        text = _read_zip(file, subset, password)
    else:
        named = _SUBSET_FILE.search(file.name)
        subset = named.group(1).lower() if named else subset
        try:
            text = file.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as err:
            raise UsageError(f"cannot read {file} ({err}); expected {GPQA_FORMAT}") from err
    questions = []
    for row in _parse_csv(text, file):
        record_id = row["Record ID"].strip()
        options = [row["Correct Answer"]] + [row[f"Incorrect Answer {k}"] for k in (1, 2, 3)]
        order = option_order(record_id)
        choices = [options[k].strip() for k in order]
        questions.append(
            Question(
                question_id=record_id,
                source="gpqa",
                prompt=mcq_prompt(row["Question"], choices),
                reference=OPTION_LETTERS[order.index(0)],
                choices=choices,
                metadata={
                    "subset": subset,
                    "option_order": order,
                    "subdomain": row.get("Subdomain", ""),
                    "domain": row.get("High-level domain", ""),
                },
            )
        )
    return questions

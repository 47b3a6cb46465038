"""The one JSON Lines reader: numbered JSON objects from lines of text, each caller keeping its own error wording.

Question files (:func:`sst_interp.data.files.read_records`) and training data (:func:`sst_interp.train.data.read_jsonl`)
both read JSON Lines; they differ in where the lines come from (a size-bounded binary reader, a text file) and in
how their errors speak to their users, so those two stay with the callers and the parsing is here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sst_interp.kernels.errors import UsageError


def json_objects(lines: Iterable[str], *, not_json: Callable[[int, str], str],
                 not_object: Callable[[int, Any], str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of ``lines`` (numbered from 1, blank lines counted).

    Args:
        lines: the file's lines, decoded.
        not_json: (line number, the JSON error's message) -> the message of the UsageError for a line that is not
            JSON.
        not_object: (line number, the parsed value) -> the message of the UsageError for a line that is JSON but
            not an object.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise UsageError(not_json(number, err.msg)) from err
        if not isinstance(value, dict):
            raise UsageError(not_object(number, value))
        yield number, value

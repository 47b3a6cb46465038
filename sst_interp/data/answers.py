r"""Answer extraction for short answers: option letters, GSM8K numbers and the demo's leading integer.

Option letters (:func:`extract_choice_letter`), tried in this order:

1. an explicit statement, last one wins: ``The answer is (C)``, ``Answer: **C**``, ``correct option is C``;
2. a letter opening the completion: ``C)``, ``(C)``, ``**C**``, ``C.``, ``C:``, ``C`` alone on its line,
   or ``C`` before a non-lowercase word (``A good ...`` reads as an article, not an answer);
3. the last bracketed or bold letter anywhere: ``(C)``, ``**C**``, or ``C)`` opening a line;
4. the first line equal to one option's text (case-insensitive, trailing period ignored).

Only upper-case letters among the first ``n_choices`` count.

GSM8K numbers (:func:`extract_number`): the last number after ``answer is``/``answer:``/``####``
if any, else the last number in the text. Numbers may have thousands commas, a sign
(``-`` or ``−``) and decimals; they are compared as exact decimals, so ``18.00`` equals ``18``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from sst_interp.data.prompts import OPTION_LETTERS

NUMBER_PATTERN = r"(?<![\w.,])[-\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)"
_NUMBER = re.compile(NUMBER_PATTERN)
_EXPLICIT_NUMBER = re.compile(
    r"(?:(?i:answer)\s*(?:(?i:is)|:|=)|####)[^\d\n\-\u2212]{0,20}?(" + NUMBER_PATTERN.replace("(?<![\\w.,])", "") + ")"
)


def _letter_class(n_choices: int) -> str:
    return f"[{OPTION_LETTERS[:n_choices]}]"


def extract_choice_letter(text: str, n_choices: int = 4, choices: Sequence[str] = ()) -> str:
    """The option letter ``text`` commits to, or ``""`` when none is found (rules in the module docstring)."""
    letter = _letter_class(n_choices)
    explicit = re.compile(
        r"(?i:\b(?:answer|option|choice))\s*(?:(?i:is)\s*)?(?::\s*)?(?:(?i:option|choice)\s+)?"
        rf"[(\[*\s]*({letter})(?![A-Za-z0-9])"
    )
    found = explicit.findall(text)
    if found:
        return found[-1]
    leading = re.match(
        rf"\s*(?:\*\*|\(|\[)?({letter})(?:\*\*|\)|\]|[.:,](?!\d))"
        rf"|\s*({letter})[ \t]*(?:\n|$)"
        rf"|\s*({letter})[ \t]+(?![a-z])",
        text,
    )
    if leading:
        return next(g for g in leading.groups() if g)
    marked = re.findall(rf"\(({letter})\)|\*\*({letter})\*\*|^[ \t]*({letter})\)", text, flags=re.MULTILINE)
    if marked:
        return next(g for g in marked[-1] if g)
    first_line = text.strip().split("\n", 1)[0].strip().rstrip(".").casefold()
    for index, choice in enumerate(choices[:n_choices]):
        if first_line and first_line == choice.strip().rstrip(".").casefold():
            return OPTION_LETTERS[index]
    return ""


def normalise_number(text: str) -> str:
    """Canonical decimal string of a number: no commas, ``-`` for minus, no trailing zeros.

    ``"1,234.50"`` -> ``"1234.5"``, ``"18.00"`` -> ``"18"``, ``"\u22125"`` -> ``"-5"``.

    Returns ``""`` if ``text`` is not a number.
    """
    cleaned = text.strip().replace(",", "").replace("\u2212", "-").lstrip("$")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return ""
    if not value.is_finite():
        return ""
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_number(text: str) -> str:
    """The GSM8K-style final number in ``text``, normalised (:func:`normalise_number`), or ``""``."""
    explicit = _EXPLICIT_NUMBER.findall(text)
    if explicit:
        return normalise_number(explicit[-1])
    numbers = _NUMBER.findall(text)
    return normalise_number(numbers[-1]) if numbers else ""


def numbers_equal(a: str, b: str) -> bool:
    """Exact decimal equality of two number strings (commas allowed); False if either is not a number."""
    left, right = normalise_number(a), normalise_number(b)
    return bool(left) and left == right


def extract_leading_integer(text: str) -> str:
    """The first integer on the first non-empty line of ``text`` (the demo's exact answer), or ``""``."""
    for line in text.splitlines():
        if line.strip():
            match = re.match(r"\s*(?:\*\*)?\s*([-\u2212]?\d[\d,]*)", line)
            return normalise_number(match.group(1)) if match else ""
    return ""

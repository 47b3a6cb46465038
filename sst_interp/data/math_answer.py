r"""MATH-500 answers: ``\boxed{...}`` extraction, LaTeX normalisation and equivalence.

Extraction (:func:`extract_boxed_answer`): the contents of the last ``\boxed{...}`` or
``\fbox{...}`` (nested braces allowed; ``\boxed 5`` also works); failing that, the text after
the last ``answer is`` up to the end of its line; failing that, ``""``.

Normalisation (:func:`normalise_math_answer`), in order: drop ``$``, ``\left``/``\right``,
spacing commands (``\!``, ``\,``, ``\;``, ``\:``, ``\ ``, ``\quad``), ``\displaystyle``; unwrap
``\text{..}``, ``\textbf{..}``, ``\mathrm{..}``, ``\mbox{..}``; ``\dfrac``/``\tfrac`` -> ``\frac``;
drop degrees (``^\circ``, ``^{\circ}``) and percent signs; remove all whitespace; brace
shorthand (``\frac12`` -> ``\frac{1}{2}``, ``\sqrt2`` -> ``\sqrt{2}``); drop a leading single-letter
assignment (``x=5`` -> ``5``); drop a trailing period; remove thousands commas in a plain number;
``.5`` -> ``0.5``; a decimal with only zeros after the point loses them (``5.0`` -> ``5``).

Equivalence (:func:`math_answers_equal`): equal normalised strings, or both parse as the same
rational number (integers, decimals, ``\frac{a}{b}``, ``a/b``, with an optional sign).
"""

from __future__ import annotations

import re
from fractions import Fraction

_UNWRAP = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\(?:left|right|displaystyle|quad|qquad)(?![A-Za-z])|\\[!,;: ]")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d|\{[^{}]*\})\s*(\d|\{[^{}]*\})")
_SQRT_SHORT = re.compile(r"\\sqrt\s*(\d+|[A-Za-z])")
_ASSIGNMENT = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?=(?!=)")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_RATIONAL = re.compile(r"^(-?)(?:\\frac\{(-?\d+)\}\{(-?\d+)\}|(-?\d+)/(-?\d+)|(-?\d+(?:\.\d+)?))$")


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """Contents of the brace group opening at ``text[start] == "{"`` and the index after it; None if unbalanced."""
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char == "{" and (index == 0 or text[index - 1] != "\\"):
            depth += 1
        elif char == "}" and (index == 0 or text[index - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[start + 1 : index], index + 1
    return None


def extract_boxed_answer(text: str) -> str:
    """The final answer in a MATH-style solution (rules in the module docstring)."""
    found: list[tuple[int, str]] = []
    for match in re.finditer(r"\\(?:boxed|fbox)(?![A-Za-z])\s*", text):
        if text.startswith("{", match.end()):
            group = _braced(text, match.end())
            if group is not None:
                found.append((match.start(), group[0]))
        else:
            bare = re.match(r"[^\s$]+", text[match.end() :])
            if bare:
                found.append((match.start(), bare.group(0)))
    if found:
        return max(found)[1].strip()
    stated = re.findall(r"(?i:answer is)\s*:?\s*(.+)", text)
    if stated:
        return stated[-1].strip().rstrip(".").strip("$ ")
    return ""


def normalise_math_answer(answer: str) -> str:
    """Canonical string form of a LaTeX answer (steps in the module docstring)."""
    text = answer.replace("$", "")
    text = _SPACING.sub("", text)
    previous = None
    while previous != text:  # unwrap nested \text{\textbf{..}}
        previous, text = text, _UNWRAP.sub(r"\1", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ", "", text)
    text = text.replace("\\%", "").replace("%", "")
    text = re.sub(r"\s+", "", text)
    text = _FRAC_SHORT.sub(lambda m: f"\\frac{_brace(m.group(1))}{_brace(m.group(2))}", text)
    text = _SQRT_SHORT.sub(lambda m: f"\\sqrt{{{m.group(1)}}}", text)
    if text.count("=") == 1:
        text = _ASSIGNMENT.sub("", text)
    text = text.rstrip(".")
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    text = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", text)
    text = re.sub(r"(\d)\.0+(?!\d)", r"\1", text)
    return text


def _brace(group: str) -> str:
    return group if group.startswith("{") else "{" + group + "}"


def _as_rational(text: str) -> Fraction | None:
    """The value of a normalised answer that is a plain rational number, else None."""
    match = _RATIONAL.match(text)
    if match is None:
        return None
    sign, frac_num, frac_den, slash_num, slash_den, plain = match.groups()
    if frac_num is not None:
        value = Fraction(int(frac_num), int(frac_den)) if int(frac_den) != 0 else None
    elif slash_num is not None:
        value = Fraction(int(slash_num), int(slash_den)) if int(slash_den) != 0 else None
    else:
        value = Fraction(plain)
    if value is None:
        return None
    return -value if sign else value


def math_answers_equal(candidate: str, reference: str) -> bool:
    """Whether two LaTeX answers agree after normalisation (string or rational equality); ``""`` never matches."""
    left, right = normalise_math_answer(candidate), normalise_math_answer(reference)
    if not left:
        return False
    if left == right:
        return True
    left_value, right_value = _as_rational(left), _as_rational(right)
    return left_value is not None and left_value == right_value

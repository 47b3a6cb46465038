"""The report's sections are named once (sst_interp.analyses.sections), and a measurement entry is declared by
keyword: every entry and every report spec names a section by its constant, never by a spelled-out title."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sst_interp.analyses import sections
from sst_interp.analyses.measurement import Measurement
from sst_interp.catalogue import all_measurements
from sst_interp.reporting import artefacts
from sst_interp.reporting.registry import all_specs

ROOT = Path(__file__).resolve().parents[3]
#: The folders of the library (pyproject's package-dir maps hooks/ and analyses/ into sst_interp).
LIBRARY = (ROOT / "sst_interp", ROOT / "analyses", ROOT / "hooks")
#: The constructors whose ``family`` is a report section: keyword name -> its position when passed positionally.
SECTION_ARGUMENT = {"Measurement": None, "ArtefactSpec": 3}


def spelled_sections(source: str) -> list[tuple[int, str]]:
    """(line, text) of each spelled-out section in ``source``: a non-empty string literal given as the ``family``
    of a Measurement or ArtefactSpec (a title or not: either way it bypasses the constants)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", None))
        if name not in SECTION_ARGUMENT:
            continue
        position = SECTION_ARGUMENT[name]
        given = [k.value for k in node.keywords if k.arg == "family"]
        if position is not None and len(node.args) > position:
            given.append(node.args[position])
        found += [(v.lineno, v.value) for v in given if isinstance(v, ast.Constant) and v.value]
    return found


def test_the_sections_are_distinct_and_the_report_shows_them_in_order():
    assert len(set(sections.SECTIONS)) == len(sections.SECTIONS)
    constants = {value for name, value in vars(sections).items() if name.isupper() and isinstance(value, str)}
    assert constants == set(sections.SECTIONS)  # each constant is on the page, and nothing else is
    assert artefacts.FAMILIES == sections.SECTIONS


def test_every_entry_and_spec_names_a_declared_section():
    for entry in all_measurements():
        assert entry.family in ("", *sections.SECTIONS), entry.name
        assert not entry.caption or entry.family, f"{entry.name} has a caption but no section"
    for spec in all_specs():
        assert spec.family in sections.SECTIONS, spec.name


def test_no_library_module_spells_a_section_out():
    bad = [f"{path.relative_to(ROOT)}:{line}: {text!r}" for folder in LIBRARY for path in sorted(folder.rglob("*.py"))
           for line, text in spelled_sections(path.read_text())]
    assert not bad, "name a section by its constant in sst_interp.analyses.sections:\n" + "\n".join(bad)


def test_the_section_check_can_fail():
    planted = ('Measurement(name="x", family="Evaluation")\n'
               'Measurement(name="y", family="A section of its own")\n'
               'ArtefactSpec("tab_z", "table", "", "Made up", "caption")\n'
               'Measurement(name="w", family=sections.EVALUATION)\n')
    assert spelled_sections(planted) == [(1, "Evaluation"), (2, "A section of its own"), (3, "Made up")]


def test_a_measurement_entry_is_declared_by_keyword():
    def compute(analysis: object) -> None:
        return None

    with pytest.raises(TypeError):
        Measurement("x", "", "title", (), compute, lambda r: r, {})  # type: ignore[misc]
    entry = Measurement(name="x", label="", title="title", requires=(), compute=compute, tidy=lambda r: r, columns={})
    assert entry.key == "tab:x"

"""One job per module: no library module is longer than :data:`LIMIT` lines (issue 45, item 3).

A module that grows past the limit holds more than one concern; split it along its seams (STYLE.md, "God modules")
instead of raising the limit. Only a generated file may be longer, named in :data:`ALLOWED` with the reason.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The library's folders (pyproject's package-dir maps hooks/ and analyses/ into sst_interp).
LIBRARY = ("sst_interp", "analyses", "hooks")
LIMIT = 500
#: Modules allowed past :data:`LIMIT` (path from the repository root -> why). A generated file belongs here, since
#: its length is its generator's; the library holds none today.
ALLOWED: dict[str, str] = {}


def line_count(path: Path) -> int:
    with path.open(encoding="utf-8") as handle:
        return sum(1 for _ in handle)


def oversized(root: Path, folders: tuple[str, ...], limit: int, allowed: dict[str, str]) -> list[str]:
    """``path: N lines`` of each module under ``folders`` of ``root`` longer than ``limit`` and not ``allowed``."""
    return [f"{path.relative_to(root).as_posix()}: {count} lines"
            for folder in folders for path in sorted((root / folder).rglob("*.py"))
            if (count := line_count(path)) > limit and path.relative_to(root).as_posix() not in allowed]


def test_no_library_module_is_over_the_limit():
    bad = oversized(ROOT, LIBRARY, LIMIT, ALLOWED)
    assert not bad, f"modules over {LIMIT} lines (split each along its seams):\n" + "\n".join(bad)


def test_the_allowed_modules_exist_and_still_need_it():
    stale = [f"{name}: {line_count(ROOT / name) if (ROOT / name).is_file() else 'no such file'}"
             for name in ALLOWED if not (ROOT / name).is_file() or line_count(ROOT / name) <= LIMIT]
    assert not stale, "remove from ALLOWED (within the limit now, or gone):\n" + "\n".join(stale)


def test_the_size_check_can_fail(tmp_path):
    package = tmp_path / "pkg"
    (package / "inner").mkdir(parents=True)
    (package / "small.py").write_text("x = 1\n" * 3)
    (package / "inner" / "big.py").write_text("x = 1\n" * 4)
    (package / "generated.py").write_text("x = 1\n" * 5)
    assert oversized(tmp_path, ("pkg",), 3, {"pkg/generated.py": "generated"}) == ["pkg/inner/big.py: 4 lines"]

"""Every package directory ships: pyproject lists it (an editable install would hide a missing one)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"hooks": "sst_interp.hooks", "analyses": "sst_interp.analyses"}


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for top in ("sst_interp", *MAPPED):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            name = ".".join((MAPPED[parts[0]], *parts[1:]) if parts[0] in MAPPED else parts)
            found.add(name)
    assert found - listed == set(), f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert config["package-dir"] == {"sst_interp.hooks": "hooks", "sst_interp.analyses": "analyses"}


def test_report_templates_ship_as_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folder = ROOT / "sst_interp" / "reporting"
    patterns = config["package-data"]["sst_interp.reporting"]
    templates = [p.relative_to(folder) for p in (folder / "templates").iterdir() if p.is_file()]
    assert templates, "sst_interp/reporting/templates is empty"
    assert all(any(t.match(pattern) for pattern in patterns) for t in templates), (templates, patterns)

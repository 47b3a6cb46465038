"""index.html rendered by headless Chromium: every referenced file exists, every artefact is in the rendered DOM.

Needs the ``chromium`` binary (Debian package ``chromium``; CI installs it). The report is built from a planted
synthetic run with a baseline, a checkpoint and training logs, so the page holds tables, figures and skips.
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from sst_interp.reporting.registry import UNSUPPORTED

pytestmark = pytest.mark.slow
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class _Refs(HTMLParser):
    """Collects ``src``/``href`` references and element ids of a DOM dump."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.ids: set[str] = set()
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        for key in ("src", "href"):
            if values.get(key):
                self.refs.append(str(values[key]))
        if tag == "img" and values.get("src"):
            self.images.append(str(values["src"]))


def _chromium(args: list[str], user_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={user_dir}", *args], capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_index_renders_every_artefact_in_headless_chromium(planted_report, tmp_path):
    """The whole report of the planted inputs (tests/conftest.py), as its build left the output folder."""
    result, out = planted_report["result"], planted_report["pristine"]
    assert result.names("failed") == []
    url = (out / result.index.name).resolve().as_uri()

    dump = _chromium(["--dump-dom", url], tmp_path / "profile")
    assert dump.returncode == 0, dump.stderr[-2000:]
    dom = _Refs()
    dom.feed(dump.stdout)
    assert "SST interpretability report" in dump.stdout
    for name in [o.artefact.name for o in result.outcomes] + list(UNSUPPORTED):
        assert name in dom.ids, f"{name} is missing from the rendered page"
    local = [r for r in dom.refs if not r.startswith("#") and urlparse(r).scheme in ("", "file")]
    assert local, "the page references no files"
    for ref in local:
        assert (out / unquote(urlparse(ref).path)).is_file(), f"{ref} is referenced but missing"
    figures = [o.artefact.name for o in result.outcomes if o.status == "ok" and o.artefact.spec.kind == "figure"]
    assert sorted(Path(src).stem for src in dom.images) == sorted(figures)

    shot = tmp_path / "index.png"
    taken = _chromium([f"--screenshot={shot}", "--window-size=1280,2400", url], tmp_path / "profile2")
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

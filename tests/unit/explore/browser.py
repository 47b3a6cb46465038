"""A served explorer and a headless Chromium (Debian's ``chromium`` driven through ``chromium-driver``) for the
browser tests."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from sst_interp.explore.config import ExploreConfig
from sst_interp.explore.serve import bind, url_of
from sst_interp.explore.server import Explorer, create_app, open_explorer

CHROMIUM = "/usr/bin/chromium"


def chromedriver() -> str | None:
    """The chromium-driver binary (apt-get install chromium-driver), or None."""
    return shutil.which("chromedriver")


@contextmanager
def served(config: ExploreConfig) -> Iterator[str]:
    """Serve the explorer of ``config`` on a free port of 127.0.0.1 in a thread; yields its URL."""
    with serving(config) as (url, _):
        yield url


@contextmanager
def serving(config: ExploreConfig) -> Iterator[tuple[str, Explorer]]:
    """:func:`served`, yielding ``(URL, the Explorer)``: the server runs in this process, so a test can change its
    state (a threshold arriving) while the page is open."""
    explorer = open_explorer(config)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(explorer), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the explorer did not start")
        time.sleep(0.02)
    try:
        yield url_of(sock), explorer
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextmanager
def browser(width: int = 1600, height: int = 1000, scale: float = 1) -> Iterator[object]:
    """A headless Chromium WebDriver (quit on exit); ``scale``: device pixels per CSS pixel (2 for a screenshot that
    stays sharp when the docs show it at its width)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={width},{height}", f"--force-device-scale-factor={scale}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(chromedriver()), options=options)
    try:
        yield driver
    finally:
        driver.quit()

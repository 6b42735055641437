"""Pages in a real browser: Debian's Chromium through Playwright, against the service
served by uvicorn on a free loopback port."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from playwright.sync_api import sync_playwright

from app.main import create_app

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def chromium_path() -> str:
    found = os.environ.get("CLOSER_CHROMIUM") or shutil.which("chromium")
    if not found:
        raise RuntimeError("Chromium not found: 'apt-get install chromium' (scripts/test does)")
    return found


@contextmanager
def serve_in_thread(settings) -> Iterator[str]:
    """The service on a free loopback port, served by uvicorn in a thread: an app of its
    own over the given database, as a deployment runs it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    served = create_app(settings)
    config = uvicorn.Config(served, host="127.0.0.1", port=port, log_level="warning")
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not runner.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        runner.should_exit = True
        thread.join(timeout=10)
        served.state.engine.dispose()


@pytest.fixture
def server(settings):
    with serve_in_thread(settings) as url:
        yield url


@pytest.fixture(scope="module")
def chromium():
    """One Chromium per test module: starting it took about a second a test. Not one per
    session: while Playwright's synchronous API runs, the thread has a running event
    loop, and a later test's asyncio.run() would refuse to start."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def browser(chromium):
    """The shared Chromium; every page or context a test opens (each a context of its
    own: cookies, storage and cache) is closed when it ends."""
    yield chromium
    for context in chromium.contexts:
        context.close()


def screenshots_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CLOSER_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def until(page, expression: str, seconds: float = 15.0) -> None:
    """Wait until `expression` holds in the page. Page.wait_for_function evaluates its
    text with eval, which the pages' Content-Security-Policy refuses, as it should."""
    deadline = time.monotonic() + seconds
    while not page.evaluate(f"() => Boolean({expression})"):
        assert time.monotonic() < deadline, f"still not true: {expression}"
        time.sleep(0.02)


DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def look_at_pages(page, browser, server: str, pages: dict[str, str], shots: Path) -> None:
    """Each page at desktop and phone size, light and dark, as a researcher sees it (the
    screenshots kept as artifacts): none scrolls sideways on a phone, and the pages'
    Content-Security-Policy blocks nothing. `page` is signed in; the dark one shares its
    cookies."""
    dark = browser.new_page(viewport=DESKTOP, color_scheme="dark")
    dark.context.add_cookies(page.context.cookies())
    refused: list[str] = []
    for watched in (page, dark):
        watched.on(
            "console",
            lambda m: (
                refused.append(m.text)
                if m.type == "error" and ("Content Security Policy" in m.text or "Eval" in m.text)
                else None
            ),
        )
    for name, path in pages.items():
        for size, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            page.set_viewport_size(viewport)
            page.goto(f"{server}{path}")
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(shots / f"every-{name}-{size}.png"), full_page=True)
            if size == "phone":
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= PHONE["width"], f"{name} scrolls sideways on a phone ({width}px)"
        dark.goto(f"{server}{path}")
        dark.wait_for_load_state("networkidle")
        dark.screenshot(path=str(shots / f"every-{name}-dark.png"), full_page=True)
    dark.close()
    page.set_viewport_size(DESKTOP)
    assert refused == []

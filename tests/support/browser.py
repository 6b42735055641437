"""Pages in a real browser: Debian's Chromium through Playwright, against the service
served by uvicorn on a free loopback port."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from app.main import create_app

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def chromium_path() -> str:
    found = os.environ.get("CLOSER_CHROMIUM") or shutil.which("chromium")
    if not found:
        raise RuntimeError("Chromium not found: 'apt-get install chromium' (scripts/test does)")
    return found


class RequestLog:
    """An ASGI wrapper that notes each request the test server takes: when it came, how
    long it took and its status, and what the requests still in hand are waiting on, so
    that a page test that timed out says whether the server was slow or never asked."""

    def __init__(self, most: int = 200) -> None:
        self.app = None  # the served app, set by serve_in_thread
        self.most = most
        self.started = time.monotonic()
        self.done: list[tuple[float, str, int, float]] = []
        self.in_hand: dict[int, tuple[float, str, asyncio.Task | None]] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        came = time.monotonic()
        what = f"{scope['method']} {scope['path']}"
        status = 0

        async def noting(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        key = id(scope)
        self.in_hand[key] = (came, what, asyncio.current_task())
        try:
            await self.app(scope, receive, noting)
        finally:
            del self.in_hand[key]
            self.done.append((came - self.started, what, status, time.monotonic() - came))
            del self.done[: -self.most]

    def report(self, last: int = 30) -> str:
        now = time.monotonic()
        lines = [
            f"{at:8.2f} s  {took * 1000:8.1f} ms  {status}  {what}"
            for at, what, status, took in self.done[-last:]
        ]
        for came, what, task in list(self.in_hand.values()):
            lines.append(f"{came - self.started:8.2f} s  in hand for {now - came:.2f} s: {what}")
            if task is not None:
                lines += [f"      awaiting in {where}" for where in _awaiting(task.get_coro())]
        if self.in_hand:  # the work a request handed to a thread shows in the thread's stack
            names = {thread.ident: thread.name for thread in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident != threading.get_ident():
                    lines.append(f"thread {names.get(ident, ident)}:")
                    lines += traceback.format_stack(frame, limit=8)
        return "\n".join(lines)


def _awaiting(coroutine, most: int = 40) -> list[str]:
    """Where a coroutine waits: each frame down its chain of awaits (a task's own stack
    shows the outermost one only)."""
    found = []
    while coroutine is not None and len(found) < most:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "gi_frame", None)
        if frame is not None:
            found.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "gi_yieldfrom", None)
    return found[-12:]


@contextmanager
def serve_in_thread(settings, log: RequestLog | None = None) -> Iterator[str]:
    """The service on a free loopback port, served by uvicorn in a thread: an app of its
    own over the given database, as a deployment runs it. `log`, if given, is filled with
    its requests (see RequestLog)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    served = create_app(settings)
    if log is not None:
        log.app = served
    asgi = served if log is None else log
    config = uvicorn.Config(asgi, host="127.0.0.1", port=port, log_level="warning")
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
def server(settings, request):
    """The test's server; a failed page test's report lists its last requests."""
    log = RequestLog()
    request.node.served_requests = log
    with serve_in_thread(settings, log) as url:
        yield url


@pytest.fixture(scope="package")
def chromium():
    """One Chromium for the page tests' package (tests/pages), while a test worker runs
    them one after another: starting it took about a second a test, and a few CPU
    seconds each time the suite's dealt order moved between the page modules. Not one
    per session: while Playwright's synchronous API runs, the thread has a running event
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


def shoot(page, path: Path, full_page: bool = False) -> None:
    """A screenshot for a person to look at, taken where CLOSER_SCREENSHOTS names a folder
    (`CLOSER_SCREENSHOTS=shots scripts/test tests/pages`). Without it, as in CI where
    nobody looks, none is taken: a full page's shot is ~0.3 s of a core, 48 of them a run."""
    if os.environ.get("CLOSER_SCREENSHOTS"):
        page.screenshot(path=str(path), full_page=full_page)


def until(page, expression: str, seconds: float = 15.0) -> None:
    """Wait until `expression` holds in the page. Page.wait_for_function evaluates its
    text with eval, which the pages' Content-Security-Policy refuses, as it should. A
    page being replaced by the next one (a form's redirect) is not there yet: the wait
    goes on in the new one."""
    deadline = time.monotonic() + seconds
    while not _holds(page, expression):
        assert time.monotonic() < deadline, f"still not true: {expression}"
        time.sleep(0.02)


def settled(page) -> None:
    """Until the page loaded, the fragments htmx fetches on load arrived and two frames
    were drawn. Playwright's "networkidle" waits for half a second without a request after
    every load (~20 s of a run of the pages), and never comes on a page that polls."""
    page.wait_for_load_state("load")
    until(page, "!document.querySelector('.htmx-request')", seconds=10)
    page.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def shown_query(page) -> str | None:
    """The query id of the comparison on the rating page (None once there is none)."""
    return page.evaluate(
        "document.querySelector('#comparison input[name=query_id]')?.value ?? null"
    )


def answered(page, act) -> None:
    """Do `act` (a key pressed, a button clicked) and wait until the page shows the next
    comparison, or the end."""
    before = shown_query(page)
    act()
    until(
        page,
        "document.getElementById('completion-code') || document.querySelector("
        f"'#comparison input[name=query_id]')?.value !== '{before}'",
    )


def until_htmx(page) -> None:
    """Wait until htmx has taken over the page's forms. `window.htmx` is defined when its
    deferred script runs, but htmx binds the forms only at DOMContentLoaded: a tap in
    between posts the form without it (a full page follows, not the fragment). The
    navigation's domContentLoadedEventEnd is set once that event's handlers have run,
    while images may still be loading (or held by the test)."""
    until(
        page,
        "window.htmx !== undefined"
        " && performance.getEntriesByType('navigation')[0]?.domContentLoadedEventEnd > 0",
    )


def _holds(page, expression: str) -> bool:
    try:
        return page.evaluate(f"() => Boolean({expression})")
    except PlaywrightError as error:
        if "Execution context was destroyed" in str(error):
            return False
        raise


def hold_images(page) -> list:
    """From now on the page's item images wait until the test continues them (each
    route in the returned list): what a slow connection shows before they arrive."""
    held: list = []
    page.route("**/media/**", lambda route: held.append(route))
    return held


def boxes(page, selector: str) -> list[list[int]]:
    """Where each element `selector` matches is on the page: x, y, width and height in
    whole pixels."""
    return page.eval_on_selector_all(
        selector,
        """parts => parts.map(part => {
          const box = part.getBoundingClientRect();
          return [box.x, box.y, box.width, box.height].map(Math.round);
        })""",
    )


def stays_put_while_images_arrive(page, held: list, selector: str) -> None:
    """Continue the held images; once every one has loaded, the parts `selector` matches
    are where they were without them. A press lands where the rater aimed even if an
    image arrives before the release: a comparison that grew as its images loaded moved
    the candidates away between the two, and the click went to neither (a lost answer)."""
    # One request per distinct image: an attention check shows its anchor twice, and the
    # browser asks for it once (with 5% checks, the first screen is one in about 20 runs).
    shown = page.eval_on_selector_all(
        "#comparison img", "images => new Set(images.map(image => image.src)).size"
    )
    deadline = time.monotonic() + 15
    while len(held) < shown:  # each image's request has reached the route
        assert time.monotonic() < deadline, f"{len(held)} of {shown} images asked for"
        page.wait_for_timeout(20)
    # A browser paints nothing before its stylesheets, but a script can measure the
    # page without them: an unstyled grid is not the layout a rater sees.
    until(page, "[...document.querySelectorAll('link[rel=stylesheet]')].every(l => l.sheet)")
    assert page.evaluate("[...document.images].some(image => !image.complete)"), "all loaded"
    waiting = boxes(page, selector)
    assert held and waiting, f"{len(held)} images held, {len(waiting)} parts found"
    for route in held:
        route.continue_()
    until(page, "[...document.images].every(image => image.complete && image.naturalWidth)")
    loaded = boxes(page, selector)
    assert loaded == waiting, f"moved as the images arrived: {waiting} -> {loaded}"


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
            settled(page)
            shoot(page, shots / f"every-{name}-{size}.png", full_page=True)
            if size == "phone":
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= PHONE["width"], f"{name} scrolls sideways on a phone ({width}px)"
        dark.goto(f"{server}{path}")
        settled(dark)
        shoot(dark, shots / f"every-{name}-dark.png", full_page=True)
    dark.close()
    page.set_viewport_size(DESKTOP)
    assert refused == []

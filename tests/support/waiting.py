"""Waiting for an event the test cannot be told of directly: polled until it comes, and
a wait that runs out fails the test (never a sleep standing in for the event)."""

from __future__ import annotations

import time


def wait_for(condition, seconds: float, what: str, every: float = 0.05):
    """The first true value of `condition()`, polled every `every` seconds; an
    AssertionError naming `what` once `seconds` pass without one."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"waited {seconds:g} s for {what}"
        time.sleep(every)

"""Password checks under a sign-in flood: how many at once, in what order, and what an
attempt on no account costs.

Each check (Argon2id) takes 64 MiB and tens of milliseconds of a core, so a web process
checks a few at a time (`password_checks_at_once`). Counting them was not enough: a
small anonymous flood from rotating addresses (5 attempts a second) took the slots, and
most honest sign-ins met "busy". Three rules keep them getting through:

- An attempt on an email with no account (or no password) is not checked at all: it
  waits as long as a check takes now (the checks' recent typical duration, stretched by
  the queue ahead of it), so its answer comes no sooner than a real one; it holds no slot
  and no memory. A flood of made-up emails costs the process sleeping coroutines.
- Waiting checks take turns account by account, the account served least recently
  first: a flood on one account, or on a few, is served often and so waits behind
  every account it does not flood.
- A browser that signed in to an account before carries a signed device cookie for it
  (`closer_device`); its attempts on that account go before every attempt without one.
  A flood aimed at a researcher's own email cannot keep them out of their own browser.
  The cookie only orders the queue: the password is checked as always.

Each account has a few waiting places per tier, the process a bounded number in all;
beyond them, and after `wait_seconds` in the queue, an attempt is told to retry (503,
Retry-After), in the same words whether its email exists or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable

from app.core.errors import ServiceError

# Waiting places for one account in one tier, and for the process in all: enough for
# a lab signing in together, few enough that the waiting requests stay small.
MOST_WAITING_PER_ACCOUNT = 4
MOST_WAITING = 256
# Attempts on no account waiting out their stand-in time at once; past it they are busy.
MOST_PRETENDING = 2_048
_SMOOTHING = 0.2  # the weight of the newest check in the typical duration
_STAND_IN = 0  # the account the stand-in hash's timing check waits as (no researcher's id)
_REMEMBERED = 4_096  # accounts whose last turn is remembered (the rest: long ago)


class SignInsBusy(ServiceError):
    status_code = 503

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            "Many sign-ins are being checked at this moment: try again in a few seconds."
        )
        self.headers = {"Retry-After": str(retry_after)}


class PasswordChecks:
    """A web process's password checks: at most `at_once` running; the rest wait in turn
    (trusted browsers first, then account by account) up to `wait_seconds`.
    `stand_in_check` checks a password against a stand-in hash (in a thread): it times
    the first attempt on no account, before any real check has been timed."""

    def __init__(
        self, at_once: int, stand_in_check: Callable[[], object], wait_seconds: float = 5.0
    ) -> None:
        self.at_once, self.wait_seconds = at_once, wait_seconds
        self._stand_in_check = stand_in_check
        self._calibration: asyncio.Future | None = None
        self.running = 0
        self.waiting = 0
        self.pretending = 0
        # The typical duration of a check, as measured here (None: none measured yet).
        self.typical_seconds: float | None = None
        # Tier 0: attempts from a browser that signed in to the account before; tier 1:
        # the others. Each an account's queue of turns.
        self._tiers: tuple[dict[int, deque[asyncio.Future]], ...] = ({}, {})
        # When each account was last given a turn, the least recent first.
        self._served_at: OrderedDict[int, float] = OrderedDict()

    @contextlib.asynccontextmanager
    async def slot(self, account: int, trusted: bool = False) -> AsyncIterator[None]:
        """A turn to check a password of `account` (a researcher's id)."""
        if self.running < self.at_once and not self.waiting:
            self.running += 1
            self._served(account)
        else:
            await self._wait_turn(account, trusted)
        started = time.perf_counter()
        try:
            yield
        finally:
            self._measured(time.perf_counter() - started)
            self._hand_on()

    async def pretend(self) -> None:
        """An attempt on no account: as long as checking it would take now, without a
        check. Until a check has been timed, one check of a stand-in hash is (once: the
        attempts meanwhile wait for it)."""
        if self.pretending >= MOST_PRETENDING:
            raise SignInsBusy(retry_after=2)
        if self.typical_seconds is None:
            if self._calibration is None or self._calibration.done():  # (none, or busy)
                self._calibration = asyncio.ensure_future(self._time_a_check())
            await asyncio.shield(self._calibration)
            assert self.typical_seconds is not None
        queued = min(self.waiting / self.at_once, self.wait_seconds / self.typical_seconds)
        delay = self.typical_seconds * (1 + queued) * random.uniform(0.9, 1.1)
        self.pretending += 1
        try:
            await asyncio.sleep(delay)
        finally:
            self.pretending -= 1

    async def _wait_turn(self, account: int, trusted: bool) -> None:
        tier = self._tiers[0 if trusted else 1]
        queue = tier.get(account)
        if self.waiting >= MOST_WAITING or (
            queue is not None and len(queue) >= MOST_WAITING_PER_ACCOUNT
        ):
            raise SignInsBusy(retry_after=2)
        if queue is None:
            queue = tier[account] = deque()
        turn = asyncio.get_running_loop().create_future()
        queue.append(turn)
        self.waiting += 1
        try:
            await asyncio.wait_for(turn, self.wait_seconds)
        except TimeoutError:
            self._leave(tier, account, turn)
            raise SignInsBusy(retry_after=2) from None
        except asyncio.CancelledError:  # the client went away while it waited
            if turn.done() and not turn.cancelled():
                self._hand_on()  # the turn was handed to it: pass it on
            else:
                self._leave(tier, account, turn)
            raise

    def _leave(self, tier: dict, account: int, turn: asyncio.Future) -> None:
        queue = tier.get(account)
        if queue is not None and turn in queue:
            queue.remove(turn)
            self.waiting -= 1
            if not queue:
                del tier[account]

    def _hand_on(self) -> None:
        """The slot goes to the next waiting turn (trusted first, then that of the account
        served least recently), or is free."""
        for tier in self._tiers:
            while tier:
                account = min(tier, key=lambda waiting: self._served_at.get(waiting, 0.0))
                queue = tier[account]
                turn = queue.popleft()
                self.waiting -= 1
                if not queue:
                    del tier[account]
                if not turn.done():
                    self._served(account)
                    turn.set_result(None)
                    return
        self.running -= 1

    def _served(self, account: int) -> None:
        self._served_at[account] = time.monotonic()
        self._served_at.move_to_end(account)
        if len(self._served_at) > _REMEMBERED:
            self._served_at.popitem(last=False)

    async def _time_a_check(self) -> None:
        """One check of the stand-in hash, in a slot of its own, timed as every check is."""
        async with self.slot(account=_STAND_IN):
            await asyncio.to_thread(self._stand_in_check)

    def _measured(self, seconds: float) -> None:
        typical = self.typical_seconds
        self.typical_seconds = (
            seconds if typical is None else (1 - _SMOOTHING) * typical + _SMOOTHING * seconds
        )

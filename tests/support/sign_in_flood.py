"""A sign-in flood beside honest sign-ins, for the flood test and benchmarks/sign_in_flood.py.

The flood posts wrong passwords to /login at a steady rate, each attempt from an address
of its own (so the per-address limit never stops it), with a CSRF token it fetched once,
as an attacker can. The honest researchers sign in as a browser does (the page, then the
form, each from an address of its own), spread over the flood, with or without the
device cookie their browser got from an earlier sign-in.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')
NONCE_COOKIE = "closer_sign_in"
DEVICE_COOKIE = "closer_device"

# A client from one address: in-process (httpx.ASGITransport(client=...)), or to a
# server behind which the address is X-Forwarded-For.
ClientFor = Callable[[str], Any]  # httpx.AsyncClient, or what quacks like one


def addresses() -> itertools.count:
    return itertools.count(1)


def address_of(number: int) -> str:
    return f"10.{number // 65_536 % 256}.{number // 256 % 256}.{number % 256}"


@dataclass
class FloodResult:
    honest_in: int = 0
    honest_tried: int = 0
    honest_seconds: list[float] = field(default_factory=list)
    flood_statuses: Counter = field(default_factory=Counter)

    @property
    def share(self) -> float:
        return self.honest_in / self.honest_tried if self.honest_tried else 0.0


async def _form(client: Any, cookies: dict[str, str]) -> tuple[str, str]:
    """The sign-in form's CSRF token and the nonce cookie it goes with."""
    page = await client.get("/login", headers=_cookie_header(cookies))
    token = CSRF.search(page.text)
    assert token is not None, page.text[:300]
    return token.group(1), page.cookies.get(NONCE_COOKIE) or cookies.get(NONCE_COOKIE, "")


def _cookie_header(cookies: dict[str, str]) -> dict[str, str]:
    held = "; ".join(f"{name}={value}" for name, value in cookies.items() if value)
    return {"cookie": held} if held else {}


async def sign_in(
    client: Any, email: str, password: str, device: str | None = None
) -> tuple[int, str | None]:
    """(status, the device cookie given) of a browser's sign-in: the page, then the form."""
    cookies = {DEVICE_COOKIE: device or ""}
    csrf, nonce = await _form(client, cookies)
    response = await client.post(
        "/login",
        data={"email": email, "password": password, "csrf_token": csrf},
        headers=_cookie_header({**cookies, NONCE_COOKIE: nonce}),
    )
    return response.status_code, response.cookies.get(DEVICE_COOKIE)


async def flood(
    client_for: ClientFor,
    *,
    seconds: float,
    per_second: float,
    flooded_emails: list[str],
    honest: list[tuple[str, str | None]],
    password: str,
) -> FloodResult:
    """`per_second` wrong-password attempts on `flooded_emails` (in turn) for `seconds`,
    and the `honest` sign-ins (email, the browser's device cookie or None; `password`)
    spread over the same time."""
    result = FloodResult()
    numbers = addresses()
    async with client_for(address_of(next(numbers))) as first:
        csrf, nonce = await _form(first, {})
    emails = itertools.cycle(flooded_emails)
    pending: list[asyncio.Task] = []

    async def attempt(address: str, email: str) -> None:
        async with client_for(address) as client:
            response = await client.post(
                "/login",
                data={"email": email, "password": "not the password", "csrf_token": csrf},
                headers=_cookie_header({NONCE_COOKIE: nonce}),
            )
        result.flood_statuses[response.status_code] += 1

    async def honest_one(address: str, email: str, device: str | None) -> None:
        started = time.perf_counter()
        async with client_for(address) as client:
            status, _ = await sign_in(client, email, password, device)
        result.honest_tried += 1
        if status == 303:
            result.honest_in += 1
            result.honest_seconds.append(time.perf_counter() - started)

    started = time.perf_counter()
    sent, honest_sent = 0, 0
    while (now := time.perf_counter() - started) < seconds:
        while sent < now * per_second:
            pending.append(asyncio.create_task(attempt(address_of(next(numbers)), next(emails))))
            sent += 1
        # The honest ones begin a moment in, once the flood has built its queue.
        while honest_sent < len(honest) and now >= (honest_sent + 0.5) * seconds / (
            len(honest) + 0.5
        ):
            email, device = honest[honest_sent]
            address = address_of(next(numbers))
            pending.append(asyncio.create_task(honest_one(address, email, device)))
            honest_sent += 1
        await asyncio.sleep(0.005)
    await asyncio.gather(*pending)
    return result

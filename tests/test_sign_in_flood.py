"""Honest researchers sign in through a flood of wrong passwords from rotating addresses
(40 attempts a second, each from an address of its own), whatever the flood aims at:
emails with no account (waited out without a check), other researchers' accounts (the
checks take turns account by account), or the researcher's own email (their browser's
device cookie goes first). The probe of 2026-12-01 saw 6 of 19 get through at 5 a second."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.auth import service
from app.core.db import unit_of_work
from tests.support.sign_in_flood import flood, sign_in

HONEST = ("ada@lab.example", "a long passphrase")
OTHERS = [f"student{n}@lab.example" for n in range(4)]
LAB = [f"member{n}@lab.example" for n in range(6)]


def _client_for(app):
    def client_for(address: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=app, client=(address, 40_000))
        return httpx.AsyncClient(transport=transport, base_url="http://testserver")

    return client_for


@pytest.mark.slow  # seconds of real Argon2 checks on both cores
@pytest.mark.one_database  # the checks' turns are the process's, whatever the database
def test_honest_sign_ins_get_through_a_flood_of_forty_attempts_a_second(app):
    with unit_of_work(app.state.session_factory) as session:
        for email in [HONEST[0], *OTHERS, *LAB]:
            service.set_researcher_password(session=session, email=email, password=HONEST[1])
    client_for = _client_for(app)

    async def run() -> dict[str, float]:
        async with client_for("192.0.2.1") as browser:
            status, device = await sign_in(browser, *HONEST)
        assert status == 303 and device  # the browser is known to the account from now on
        shares = {}
        lab = [(email, None) for email in LAB]  # researchers each signing in once
        for name, flooded, honest in [
            ("made-up emails", [f"x{n}@nowhere.example" for n in range(50)], lab),
            ("other accounts", OTHERS, lab),
            ("their own email", [HONEST[0]], [(HONEST[0], device)] * 6),
        ]:
            result = await flood(
                client_for,
                seconds=3,
                per_second=40,
                flooded_emails=flooded,
                honest=honest,
                password=HONEST[1],
            )
            # (the test's client shares the server's event loop: it falls a little behind)
            assert sum(result.flood_statuses.values()) >= 3 * 30, result
            assert set(result.flood_statuses) <= {400, 503}, result.flood_statuses
            shares[name] = result.share
            print(name, result.honest_in, "of", result.honest_tried, dict(result.flood_statuses))
        return shares

    shares = asyncio.run(run())
    assert shares == {"made-up emails": 1.0, "other accounts": 1.0, "their own email": 1.0}

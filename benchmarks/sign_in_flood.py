"""Honest sign-ins through an anonymous flood of wrong passwords (issue 55).

A real `closer serve` (SQLite, one web process, the default 2 password checks at
once) and 8 researchers with passwords. For each flood rate and target, wrong passwords
arrive at a steady rate, each from an address of its own (X-Forwarded-For, which uvicorn
takes from a proxy on 127.0.0.1), while 19 honest sign-ins (the sign-in page, then the
form, each from an address of its own) are spread over the same time. The flood aims at
emails with no account, at the other researchers' accounts, or at the honest
researcher's own email. The honest sign-ins are 19 researchers of a lab, each signing in
once, or (where the flood aims at her) one researcher 19 times, from the browser that
signed in before (its device cookie) or from a new one.

The peer, in the same run: the same honest sign-ins with no flood (what every one of
them costs alone). Reported per case: how many of the 19 got through (the probe of
2026-12-01 saw 6 of 19 at 5 attempts a second, 1-2 of 19 at 15), their median and
slowest time, what the flood was answered, and the server's peak memory.

    .venv/bin/python benchmarks/sign_in_flood.py [--seconds 20] [--rates 5,15,40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.service import ServiceProcesses  # noqa: E402
from tests.support.sign_in_flood import flood, sign_in  # noqa: E402

HONEST = ("ada@lab.example", "a long passphrase")
OTHERS = [f"student{n}@lab.example" for n in range(7)]
LAB = [f"member{n}@lab.example" for n in range(19)]


def _database(data_dir: Path) -> str:
    from app.auth import service
    from app.core import migrations
    from app.core.db import make_engine, make_session_factory, unit_of_work

    url = f"sqlite:///{data_dir}/closer.db"
    migrations.upgrade(url)
    engine = make_engine(url)
    with unit_of_work(make_session_factory(engine)) as session:
        for email in [HONEST[0], *OTHERS, *LAB]:
            service.set_researcher_password(session=session, email=email, password=HONEST[1])
    engine.dispose()
    return url


class _Response:
    def __init__(self, status: int, text: str, cookies: dict[str, str]) -> None:
        self.status_code, self.text, self.cookies = status, text, cookies


class _Client:
    """What tests/support/sign_in_flood.py asks of a client (httpx's calls), over one
    aiohttp session: httpx spent a core of this machine at 40 attempts a second, and
    the honest sign-ins then waited in the benchmark's own event loop."""

    def __init__(self, session: aiohttp.ClientSession, address: str) -> None:
        self.session, self.address = session, address

    async def __aenter__(self) -> _Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def _send(self, method: str, path: str, **options) -> _Response:
        headers = {**options.pop("headers", {}), "X-Forwarded-For": self.address}
        async with self.session.request(
            method, path, headers=headers, allow_redirects=False, **options
        ) as response:
            cookies = {name: morsel.value for name, morsel in response.cookies.items()}
            return _Response(response.status, await response.text(), cookies)

    async def get(self, path: str, headers: dict) -> _Response:
        return await self._send("GET", path, headers=headers)

    async def post(self, path: str, data: dict, headers: dict) -> _Response:
        return await self._send("POST", path, data=data, headers=headers)


def _peak_mib(pid: int) -> float:
    """The peak resident memory of the web process and its children (uvicorn's workers)."""
    total = 0.0
    for path in Path("/proc").glob("[0-9]*/status"):
        try:
            text = path.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("PPid", "").strip() == str(pid) or path.parent.name == str(pid):
            total += int(fields.get("VmHWM", "0 kB").split()[0]) / 1024
    return total


async def main(seconds: float, rates: list[float]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch)
        url = _database(data_dir)
        service = ServiceProcesses(url, data_dir, web_processes=1, workers=0)
        service.env["CLOSER_RATE_LIMITS"] = "true"
        service.start_web()
        try:
            session = aiohttp.ClientSession(
                service.url,
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=30),
                connector=aiohttp.TCPConnector(limit=0),
            )

            def client_for(address: str) -> _Client:
                return _Client(session, address)

            async with client_for("192.0.2.1") as browser:
                status, device = await sign_in(browser, *HONEST)
            assert status == 303 and device
            lab = [(email, None) for email in LAB]  # 19 researchers, each signing in once
            made_up = [f"x{n}@nowhere.example" for n in range(500)]
            ada_browser = [(HONEST[0], device)] * 19
            new_browser = [(HONEST[0], None)] * 19
            cases = [("no flood, 19 researchers", 0.0, made_up, lab)]
            for rate in rates:
                cases += [
                    (f"{rate:g}/s on made-up emails", rate, made_up, lab),
                    (f"{rate:g}/s on 7 other accounts", rate, OTHERS, lab),
                    (f"{rate:g}/s on ada's email, ada's browser", rate, [HONEST[0]], ada_browser),
                    (f"{rate:g}/s on ada's email, a new browser", rate, [HONEST[0]], new_browser),
                ]
            print(f"{'case':<44} {'honest in':>9} {'median s':>9} {'max s':>7}  flood answered")
            for name, rate, flooded, honest in cases:
                result = await flood(
                    client_for,
                    seconds=seconds,
                    per_second=rate,
                    flooded_emails=flooded,
                    honest=honest,
                    password=HONEST[1],
                )
                times = result.honest_seconds or [float("nan")]
                print(
                    f"{name:<44} {result.honest_in:>4} of {result.honest_tried:<2} "
                    f"{statistics.median(times):>9.2f} {max(times):>7.2f}  "
                    f"{dict(sorted(result.flood_statuses.items()))}",
                    flush=True,
                )
            print(f"web process peak memory: {_peak_mib(service.web.pid):.0f} MiB")
            await session.close()
        finally:
            service.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rates", default="5,15,40")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.seconds, [float(r) for r in arguments.rates.split(",")]))

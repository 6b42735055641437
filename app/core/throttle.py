"""Rate limits on what anyone with a public rating link can do: join, and answer; and on
attempts at the workspace's sign-in form.

A study link is posted where bots and curious people try things. Joins are limited per
client address and per study, answers per session, sign-in attempts per address; the
limits are settings, written as `limits` strings ("60/minute", "10/second;300/minute").
A request over a limit gets a 429 with `Retry-After`. Requests bearing a valid researcher
token are not limited: a researcher testing their study (`closer simulate`) is no stranger.

An address is an IPv4 address, or an IPv6 address's /64 (one subscriber's network: its
2^64 addresses are one visitor's). A flood must cost the flooder, not the crowd: the
study's limit counts only an address's repeated joins, so an address's first join, an
honest rater's, is never refused for what other addresses did.

Each limit counts the requests of its last period exactly (a moving window), so a
client learns nothing by timing requests to a window's edge. The counts live in each web
process's memory, so with N processes a limit allows up to
N times its figure; behind a reverse proxy, run uvicorn with --proxy-headers so the
client address is the visitor's, not the proxy's.
"""

from __future__ import annotations

import ipaddress
import math
import re
import threading
import time

from fastapi import Request
from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.core.errors import ServiceError
from app.core.limits import ResearcherTokens
from app.core.signing import RATER_COOKIE


class TooManyRequests(ServiceError):
    status_code = 429

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.headers = {"Retry-After": str(retry_after)}


def client_address(request: Request) -> str:
    """The client's address as the limits count it: an IPv6 address by its /64."""
    host = request.client.host if request.client else "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 4:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.ip_network(f"{address}/64", strict=False))


class Throttle:
    def __init__(
        self,
        *,
        joins_per_address: str,
        joins_per_study: str,
        answers_per_session: str,
        sign_ins_per_address: str = "10/minute;100/hour",
        new_raters_per_study: str = "600/minute;6000/hour",
        reserved_for_platform_ids: float = 0.5,
        is_researcher: ResearcherTokens,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._newcomers = threading.Lock()
        self._joins_per_address = parse_many(joins_per_address)
        self._joins_per_study = parse_many(joins_per_study)
        self._new_raters = parse_many(new_raters_per_study)
        # What anonymous newcomers may take of each: the rest is kept for platform ids.
        self._new_anonymous_raters = [
            type(limit)(
                max(1, math.floor(limit.amount * (1 - reserved_for_platform_ids))), limit.multiples
            )
            for limit in self._new_raters
        ]
        self._answers_per_session = parse_many(answers_per_session)
        self._sign_ins_per_address = parse_many(sign_ins_per_address)
        self._is_researcher = is_researcher

    async def _exempt(self, request: Request) -> bool:
        if not self.enabled:
            return True
        return await self._is_researcher.from_headers(request.headers)

    def _hit(self, limits: list[RateLimitItem], what: str, *key: str) -> None:
        for limit in limits:
            if not self._limiter.hit(limit, what, *key):
                self._refuse(limit, what, *key)

    def _refuse(self, limit: RateLimitItem, what: str, *key: str) -> None:
        reset = self._limiter.get_window_stats(limit, what, *key).reset_time
        retry_after = max(1, math.ceil(reset - time.time()))
        raise TooManyRequests(
            f"too many {what} ({limit}); try again in {retry_after} s", retry_after
        )

    async def join(self, request: Request, slug: str) -> None:
        if await self._exempt(request):
            return
        address = client_address(request)
        what = "joins from this address"
        self._hit(self._joins_per_address, what, address)
        window = self._joins_per_address[0]  # any of them counts the address's recent joins
        stats = self._limiter.get_window_stats(window, what, address)
        if window.amount - stats.remaining > 1:  # not this address's first join
            self._hit(self._joins_per_study, "joins to this study", slug)

    def newcomer(self, slug: str, named: bool) -> None:
        """A new rater of the study, whatever their address: within the study's budget of
        new raters, of which an anonymous one (no platform participant id) may take all
        but the share kept for named ones. Refused newcomers count against nothing."""
        if not self.enabled:
            return
        counted = [(limit, "new raters of this study") for limit in self._new_raters]
        if not named:
            counted += [
                (limit, "new anonymous raters of this study")
                for limit in self._new_anonymous_raters
            ]
        # Joins run on the process's threads: checked and counted under one lock, or
        # each of several at once would see the last place free and take it.
        with self._newcomers:
            for limit, what in counted:
                if not self._limiter.test(limit, what, slug):
                    self._refuse(limit, what, slug)
            for limit, what in counted:
                self._limiter.hit(limit, what, slug)

    async def sign_in(self, request: Request) -> None:
        """Password guessing at the sign-in form is limited per client address."""
        if not self.enabled:
            return
        address = client_address(request)
        self._hit(self._sign_ins_per_address, "sign-in attempts from this address", address)

    async def answer(self, request: Request, slug: str, token: str | None) -> None:
        if not token or await self._exempt(request):
            return  # without a session the answer is refused anyway, and cheaply
        self._hit(self._answers_per_session, "answers in this session", slug, token)


_JOIN = re.compile(r"^/api/v1/rate/([^/]+)/raters$")
# What a session sends, through the JSON routes and the rating pages' forms (htmx sends
# an answer again after a 429): answers, the consent and the questionnaire, counted
# together as the session's answers.
_ANSWER = re.compile(
    r"^(?:/api/v1/rate/([^/]+)/(?:answers|consent|questionnaire)"
    r"|/r/([^/]+)/(?:answer|consent|questionnaire))$"
)


class ThrottleRaterRoutes:
    """Applies the limits to joins through the JSON route and to every answer, before
    routing, body parsing or validation: a refused request (a bot's burst) costs the
    service a lookup in memory, not a request's work. The Start page checks the join
    limits in its route, where a refusal is a page."""

    def __init__(self, app: ASGIApp, throttle: Throttle) -> None:
        self.app = app
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            join, answer = _JOIN.match(path), _ANSWER.match(path)
            if join or answer:
                request = Request(scope)
                try:
                    if join:
                        await self.throttle.join(request, join.group(1))
                    elif answer:
                        slug = answer.group(1) or answer.group(2)
                        token = request.headers.get("x-rater-token")
                        token = token or request.cookies.get(RATER_COOKIE)
                        await self.throttle.answer(request, slug, token)
                except TooManyRequests as refused:
                    response = JSONResponse(
                        {"detail": refused.detail}, status_code=429, headers=refused.headers
                    )
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)

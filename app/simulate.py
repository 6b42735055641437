"""A simulated crowd: raters that answer a running server's comparisons over HTTP, as
people would, from the items' feature vectors (a `FeatureOracle`), with a noise rate and
a think time. Each rater joins through the study's public link and answers through the
rater routes only; the researcher token is used to read the items' features and, if
asked, to watch a build. It goes with the rater requests too, unless `throttled`: the
rate limits of public links are for strangers, and a researcher's own test crowd is none.
With `own_addresses`, each simulated person comes from an address of their own
(X-Forwarded-For), as real raters behind a proxy do.

An answer whose response never came (a timeout, a server restart) is sent again with
the same query id until the server acknowledges it: the answer is idempotent, so it is
stored once however often it is sent. A 503 or 429 is retried after the Retry-After the
server gives, as the rating page does; the report counts every 5xx by status.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

from app.formats import TRIPLET, named
from app.learn import FeatureOracle

API = "/api/v1"
RETRY_SECONDS = 0.25


class CrowdError(RuntimeError):
    """The crowd cannot start or go on; the message says why, in one line."""


@dataclass
class CrowdReport:
    answers: int = 0
    replayed: int = 0
    retries: int = 0
    throttled: int = 0  # 429s: the server's rate limits held a request back
    server_errors: Counter = field(default_factory=Counter)  # 5xx answers, by status
    unadvised_503: int = 0  # 503s that said nothing of when to come back (Retry-After)
    raters: int = 0  # sessions started: each simulated person joins anew after a session
    completed_sessions: int = 0  # reached the study's answers per rater
    out_of_work_sessions: int = 0  # ended early: the study had nothing left to ask them
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    acknowledged: list[int] = field(default_factory=list)  # query ids the server confirmed
    practice_answers: int = 0  # practice screens answered: kept apart, never acknowledged
    build_status: str | None = None
    routing_status: str | None = None

    def summary(self) -> dict:
        latencies = np.array(self.latencies) * 1000 if self.latencies else np.zeros(1)
        return {
            "answers": self.answers,
            "practice_answers": self.practice_answers,
            "answers_per_second": round(self.answers / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": round(float(np.percentile(latencies, 50)), 1),
            "p99_ms": round(float(np.percentile(latencies, 99)), 1),
            "replayed": self.replayed,
            "retries": self.retries,
            "throttled": self.throttled,
            "sessions_started": self.raters,
            "sessions_completed": self.completed_sessions,
            "sessions_out_of_work": self.out_of_work_sessions,
            "seconds": round(self.seconds, 1),
            "build_status": self.build_status,
            "routing_status": self.routing_status,
        }


def rater_oracle(X: np.ndarray, noise: float, noise_model: str, seed: int) -> FeatureOracle:
    """A simulated person over feature vectors `X`, wrong on a share `noise` of triplets:
    on the near ties, as people are ("human"), or uniformly at random ("uniform")."""
    if noise_model == "human" and noise > 0:
        scale = FeatureOracle(X).scale_for_error(min(noise, 0.499))
        return FeatureOracle(X, noise_scale=scale, random_state=seed)
    return FeatureOracle(X, noise=noise, random_state=seed)


class _Items:
    """Item keys to oracle positions, and the oracle answering by key."""

    def __init__(
        self, exported: list[dict], noise: float, seed: int, noise_model: str = "uniform"
    ) -> None:
        with_features = [item for item in exported if item.get("features")]
        if len(with_features) < 3:
            raise ValueError(
                "the simulated crowd answers from feature vectors, and this project has "
                f"{len(with_features)} items with features"
            )
        self.index = {item["key"]: i for i, item in enumerate(with_features)}
        X = np.array([item["features"] for item in with_features], dtype=np.float64)
        self.oracle = rater_oracle(X, noise, noise_model, seed)
        # A person errs on near ties: attention checks are clear questions, answered right.
        self.noise = 0.0 if noise_model == "human" else noise
        self.rng = random.Random(seed)

    def choose(self, comparison: dict) -> dict:
        """The answer's body, as the comparison's format answers (app/formats): a
        triplet's `choice`, a screen's `picks`, a sorting screen's `sides`."""
        return named(comparison.get("format", TRIPLET.name)).simulated_answer(comparison, self)


@dataclass(frozen=True)
class _Response:
    status: int
    body: Any  # the JSON the server answered, None where it sent none

    def raise_for_status(self, what: str = "the request") -> None:
        if self.status >= 400:
            detail = self.body.get("detail") if isinstance(self.body, dict) else self.body
            raise CrowdError(f"{what}: the server answered {self.status}: {detail}")


async def _request(
    client: aiohttp.ClientSession,
    method: str,
    url: str,
    report: CrowdReport,
    retry: bool = True,
    **kw,
) -> tuple[_Response, float]:
    """Send until the server answers (restarts and timeouts are retried); returns the
    response and the seconds the successful attempt took."""
    while True:
        started = time.perf_counter()
        try:
            async with client.request(method, url, **kw) as response:
                status = response.status
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as error:
            if not retry:
                raise CrowdError(f"no answer to {method} {url}: {error}") from error
            report.retries += 1
            await asyncio.sleep(RETRY_SECONDS)
            continue
        if status == 429:  # over a rate limit: wait as long as the server asks
            report.throttled += 1
            wait = response.headers.get("Retry-After", "")
            await asyncio.sleep(float(wait) if wait.isdigit() else RETRY_SECONDS)
            continue
        if status >= 500:  # a server restarting, its database down, or overloaded
            report.retries += 1
            report.server_errors[status] += 1
            wait = response.headers.get("Retry-After", "")
            if status == 503 and not wait.isdigit():
                report.unadvised_503 += 1
            await asyncio.sleep(float(wait) if wait.isdigit() else RETRY_SECONDS)
            continue
        try:
            body = json.loads(text)
        except ValueError:
            body = {"detail": text[:500]}
        return _Response(status, body), time.perf_counter() - started


async def _rater(
    number: int,
    client: aiohttp.ClientSession,
    slug: str,
    items: _Items,
    think_time: float,
    rng: random.Random,
    stop: asyncio.Event,
    report: CrowdReport,
    prefix: str,
    answers_each: int | None,
    base_headers: dict[str, str],
) -> None:
    session_number = 0
    given = 0  # by this simulated person, over all their sessions
    while not stop.is_set():
        participant = f"{prefix}-{number}-{session_number}"
        response, _ = await _request(
            client,
            "POST",
            f"{API}/rate/{slug}/raters",
            report,
            json={"participant": participant},
            headers=base_headers,
        )
        response.raise_for_status()
        report.raters += 1
        headers = {**base_headers, "X-Rater-Token": response.body["rater_token"]}
        if response.body.get("step") == "consent":  # the simulated people all agree
            agreed, _ = await _request(
                client,
                "POST",
                f"{API}/rate/{slug}/consent",
                report,
                json={"agree": True},
                headers=headers,
            )
            agreed.raise_for_status()
        response, _ = await _request(
            client, "GET", f"{API}/rate/{slug}/next", report, headers=headers
        )
        response.raise_for_status()
        state = await _answer_questionnaire(client, slug, report, headers, response.body)
        while not stop.is_set() and state["comparison"] is not None:
            if answers_each is not None and given >= answers_each:
                return
            comparison = state["comparison"]
            shown = time.perf_counter()
            answer = items.choose(comparison)
            if think_time > 0:
                # People take about `think_time` seconds, some much longer: log-normal.
                await asyncio.sleep(rng.lognormvariate(math.log(think_time), 0.5))
            response, seconds = await _request(
                client,
                "POST",
                f"{API}/rate/{slug}/answers",
                report,
                headers=headers,
                json={
                    "query_id": comparison["query_id"],
                    **answer,
                    "response_time_ms": int((time.perf_counter() - shown) * 1000),
                },
            )
            if response.status == 401:  # the session was replaced: join again
                break
            response.raise_for_status()
            state = response.body
            report.latencies.append(seconds)
            if comparison.get("practice"):  # stored apart: not one of the study's answers
                report.practice_answers += 1
                state = await _answer_questionnaire(client, slug, report, headers, state)
                continue
            report.acknowledged.append(comparison["query_id"])
            report.answers += 1
            report.replayed += bool(state["replayed"])
            given += 1
            state = await _answer_questionnaire(client, slug, report, headers, state)
        if state.get("out_of_work"):
            report.out_of_work_sessions += 1
            session_number += 1
            await asyncio.sleep(1.0)  # this person saw everything; the next one comes later
            continue
        if state.get("complete"):
            report.completed_sessions += 1
            session_number += 1
            continue
        if state["comparison"] is None and not stop.is_set():
            await asyncio.sleep(1.0)  # nothing to ask right now: look again soon
        session_number += 1


def simulated_questionnaire(questionnaire: dict) -> dict:
    """What a simulated person answers: a plausible value of each question's kind."""
    answers: dict = {}
    for question in questionnaire["questions"]:
        kind, options = question["kind"], question.get("options") or []
        if kind == "number":
            answers[question["name"]] = 30
        elif kind == "choices":
            answers[question["name"]] = options[:1]
        elif kind in ("choice", "likert"):
            answers[question["name"]] = options[len(options) // 2]
        else:
            answers[question["name"]] = "simulated"
    return answers


async def _answer_questionnaire(client, slug: str, report, headers, state: dict) -> dict:
    """The state after the questionnaire, where it is the step (else `state` itself)."""
    if state.get("step") != "questionnaire":
        return state
    response, _ = await _request(
        client,
        "POST",
        f"{API}/rate/{slug}/questionnaire",
        report,
        json={"answers": simulated_questionnaire(state["questionnaire"])},
        headers=headers,
    )
    response.raise_for_status()
    if response.body.get("comparison") is None and not response.body.get("complete"):
        # Before the task: the first comparison comes with the next request.
        response, _ = await _request(
            client, "GET", f"{API}/rate/{slug}/next", report, headers=headers
        )
        response.raise_for_status()
    return response.body


FINISHED = ("complete", "cancelled", "failed")


async def _watch(client, what: str, path: str, headers, stop, report, poll=1.0):
    """Stop the crowd once the build or routing at `path` is finished."""
    while not stop.is_set():
        response, _ = await _request(client, "GET", path, report, headers=headers)
        response.raise_for_status(what)
        status = response.body["status"]
        setattr(report, f"{what.split()[0]}_status", status)
        if status in FINISHED:
            stop.set()
            return
        await asyncio.sleep(poll)


async def _stop_when_set(until: threading.Event, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if until.is_set():
            stop.set()
            return
        await asyncio.sleep(0.1)


async def _report_progress(report: CrowdReport, stop: asyncio.Event, every: float, callback):
    started = time.perf_counter()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=every)
        except TimeoutError:
            report.seconds = time.perf_counter() - started
            callback(report)


async def run_crowd(
    *,
    url: str,
    project_id: int,
    token: str,
    raters: int,
    noise: float = 0.0,
    noise_model: str = "uniform",
    think_time: float = 1.0,
    seconds: float | None = None,
    answers_each: int | None = None,
    build_id: int | None = None,
    routing_id: int | None = None,
    seed: int = 0,
    throttled: bool = False,
    own_addresses: bool = False,
    timeout: float = 30.0,
    on_progress=None,
    progress_every: float = 5.0,
    until: threading.Event | None = None,
) -> CrowdReport:
    """Run `raters` simulated people against the server at `url` until the build (with
    `build_id`) or the routing (`routing_id`) is finished, `seconds` pass,
    each gave `answers_each` answers, or another thread sets `until`."""
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=raters + 4)
    timeouts = aiohttp.ClientTimeout(total=timeout)
    report = CrowdReport()
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeouts) as client:
        try:
            rating, _ = await _request(
                client,
                "GET",
                f"{API}/projects/{project_id}/rating",
                report,
                retry=False,
                headers=headers,
            )
        except CrowdError as error:
            raise CrowdError(
                f"no Closer server answers at {url} ({error.__cause__}); start one with "
                "`closer serve`, or point --url (or CLOSER_HOST and CLOSER_PORT) at it"
            ) from error
        rating.raise_for_status(f"project {project_id}")
        slug = rating.body["public_slug"]
        if rating.body.get("link_state", "open") != "open":
            raise CrowdError(
                f"project {project_id}'s study link is {rating.body['link_state']}: raters "
                f"cannot join. Open it first (PUT {API}/projects/{project_id}/link with "
                '{"state": "open"}, or Open the link on the project\'s page)'
            )
        watched = []
        if build_id is not None:
            watched.append((f"build {build_id}", f"{API}/projects/{project_id}/builds/{build_id}"))
        if routing_id is not None:
            watched.append(
                (f"routing {routing_id}", f"{API}/projects/{project_id}/routings/{routing_id}")
            )
        for what, path in watched:
            found, _ = await _request(client, "GET", path, report, retry=False, headers=headers)
            found.raise_for_status(what)
        exported, _ = await _request(
            client,
            "GET",
            f"{API}/projects/{project_id}/items/export",
            report,
            params={"format": "json"},
            headers=headers,
        )
        exported.raise_for_status(f"project {project_id}'s items")
        try:
            items = _Items(exported.body, noise, seed, noise_model)
        except ValueError as error:
            raise CrowdError(str(error)) from error
        stop = asyncio.Event()
        started = time.perf_counter()
        tasks = [
            asyncio.create_task(
                _rater(
                    number,
                    client,
                    slug,
                    items,
                    think_time,
                    random.Random(seed * 100_003 + number),
                    stop,
                    report,
                    f"sim{seed}",
                    answers_each,
                    {
                        **({} if throttled else headers),
                        # Each person from an address of their own, as a proxy in front
                        # of the server would say (uvicorn trusts one on 127.0.0.1).
                        **(
                            {
                                "X-Forwarded-For": f"10.{number // 65536 % 256}."
                                f"{number // 256 % 256}.{number % 256}"
                            }
                            if own_addresses
                            else {}
                        ),
                    },
                )
            )
            for number in range(raters)
        ]
        for what, path in watched:
            tasks.append(asyncio.create_task(_watch(client, what, path, headers, stop, report)))
        if until is not None:
            tasks.append(asyncio.create_task(_stop_when_set(until, stop)))
        if on_progress is not None:
            reporter = asyncio.create_task(
                _report_progress(report, stop, progress_every, on_progress)
            )
        try:
            await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            stop.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            report.seconds = time.perf_counter() - started
            if on_progress is not None:
                await reporter
    failures = [result for result in results if isinstance(result, BaseException)]
    if failures:
        raise failures[0]
    return report

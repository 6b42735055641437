"""The answer path exists twice: `closer_answer()` in PostgreSQL takes the usual answer in
one call, the Python scheduler takes SQLite and every case the function hands back. Here
the function's text is held to its one source file and the Python enums, and the same
seeded scenarios run through both paths (and through SQLite's) must write the same rows
and give the same responses."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, select, update

from app import formats
from app.auth.service import create_token
from app.builds import jobs as build_jobs
from app.builds.jobs import STEP
from app.builds.warm import WarmBuilds
from app.core import migrations
from app.core.caches import Caches, using
from app.core.config import Settings
from app.core.db import unit_of_work
from app.main import create_app
from app.models import (
    ADAPTIVE_PURPOSES,
    FROM_QUEUE,
    Assignment,
    Base,
    BuildStatus,
    Choice,
    Item,
    LinkState,
    Purpose,
    QuerySlot,
    SlotState,
    TripletSource,
)
from app.models._types import utcnow
from app.worker.loop import Worker

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "app" / "scheduling" / "closer_answer.sql"
FROZEN = REPO / "migrations" / "versions" / "sql"
API = "/api/v1"
ENUMS = {
    "Purpose": Purpose,
    "SlotState": SlotState,
    "Choice": Choice,
    "TripletSource": TripletSource,
    "LinkState": LinkState,
    "formats": {"TRIPLET": formats.TRIPLET},
    "BuildStatus": BuildStatus,
    "models": {"FROM_QUEUE": FROM_QUEUE},
}


def _sql_literal(value) -> str:
    return str(int(value)) if isinstance(value, int) else f"'{value}'"


def test_every_enum_code_in_the_answer_function_is_the_python_enums():
    """Each code is marked with its enum (`4 /* Purpose.attention */`) and must equal it;
    a comparison with a bare code would escape that check, so there is none."""
    source = SOURCE.read_text()
    marked = re.findall(r"('\w+'|-?\d+) /\* (\w+)\.(\w+) \*/", source)
    assert len(marked) >= 12
    for literal, enum, member in marked:
        assert literal == _sql_literal(ENUMS[enum][member]), (literal, enum, member)
    adaptive = re.findall(r"IN \(([\d, ]+)\) /\* ADAPTIVE_PURPOSES \*/", source)
    assert [sorted(int(code) for code in codes.split(",")) for codes in adaptive] == [
        sorted(int(purpose) for purpose in ADAPTIVE_PURPOSES)
    ]
    body = source[source.index("$$") :]
    bare = re.findall(
        r"(?:purpose|state|p_choice)\s*(?:(?:=|<>|:=)\s*(?:'\w+'|\d+\b)|IN \([\d, ]+\))(?! /\*)",
        body,
    )
    assert bare == [], "mark each enum code with the enum it stands for"


def test_the_newest_migration_installs_the_source_file():
    """Whoever changes the function adds a migration that freezes the new text."""
    newest = max(FROZEN.glob("closer_answer_*.sql"))
    assert newest.read_text() == SOURCE.read_text(), (
        f"{SOURCE.name} changed since {newest.name}: add a migration that installs a "
        "frozen copy of it"
    )


@pytest.fixture(scope="module")
def postgres_url(make_database_url):
    url = make_database_url("postgresql", "answer_paths")
    migrations.upgrade(url)
    return url


def test_the_installed_function_is_the_source_file(postgres_url):
    """pg_get_functiondef of the migrated database's function equals that of the source
    file installed into a schema of its own."""
    import psycopg
    from sqlalchemy.engine import make_url

    plain = make_url(postgres_url).set(drivername="postgresql")
    with psycopg.connect(plain.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS from_source CASCADE")
        conn.execute("CREATE SCHEMA from_source")
        conn.execute("SET search_path TO from_source")
        conn.execute(SOURCE.read_text())
        conn.execute("SET search_path TO public")
        definitions = dict(
            conn.execute(
                "SELECT n.nspname, pg_get_functiondef(f.oid) FROM pg_proc f "
                "JOIN pg_namespace n ON n.oid = f.pronamespace WHERE f.proname = 'closer_answer'"
            ).fetchall()
        )
        conn.execute("DROP SCHEMA from_source CASCADE")
    assert set(definitions) == {"public", "from_source"}
    assert definitions["public"] == definitions["from_source"].replace("from_source.", "public.")


# -- the differential test --------------------------------------------------------------

SEED = 20261126


@dataclass
class Run:
    """What one path did: every response, and every row of the tables answers write."""

    responses: list = field(default_factory=list)
    rows: dict = field(default_factory=dict)


def _settings(url: str, data_dir: Path, answer_function: bool) -> Settings:
    return Settings(
        data_dir=data_dir,
        database_url=url,
        worker_in_process=False,
        rate_limits=False,
        answer_function=answer_function,
        scheduler_seed=SEED,
    )


def _items(count: int) -> str:
    return "key,label\n" + "".join(f"i{n:02d},{'ab'[n % 2]}\n" for n in range(count))


class Scenario:
    """A few hundred answers through the public rating API: CompRF build queries with
    several answers each, a sampler's proposals, random triplets and attention checks,
    "can't tell", retried answers, leases that expire and late answers to them, a rater
    excluded by failed checks, completed sessions, and raters of a small study who run
    out of work."""

    def __init__(self, client: TestClient, app, auth: dict) -> None:
        self.client, self.app, self.auth = client, app, auth
        self.rng = np.random.default_rng(SEED)
        self.responses: list = []
        # The worker's memory of its builds, on the scenario's clock rather than the
        # machine's: a step saves the build every few seconds and compares the whole
        # queue every half minute, so a slower run would save once more.
        self.worker_caches = Caches()
        warm = self.worker_caches.get("builds.warm", WarmBuilds)
        warm.save_seconds, warm.full_sync_seconds = 0.0, math.inf
        warm.upkeep_spacing = warm.save_spacing = warm.step_spacing = 0.0

    def project(self, name: str, items: int, **rating) -> tuple[int, str]:
        pid = self.client.post(f"{API}/projects", json={"name": name}, headers=self.auth).json()[
            "id"
        ]
        uploaded = self.client.post(
            f"{API}/projects/{pid}/items",
            headers=self.auth,
            files={"file": ("items.csv", _items(items))},
        )
        assert uploaded.status_code == 201, uploaded.text
        settings = self.client.patch(f"{API}/projects/{pid}/rating", headers=self.auth, json=rating)
        assert settings.status_code == 200, settings.text
        self.link(pid, "open")
        return pid, settings.json()["public_slug"]

    def link(self, project_id: int, state: str) -> None:
        changed = self.client.put(
            f"{API}/projects/{project_id}/link", headers=self.auth, json={"state": state}
        )
        assert changed.status_code == 200 and changed.json()["link_state"] == state

    def record(self, response) -> dict:
        assert response.status_code in (200, 201, 400, 404, 409, 422), response.text
        body = response.json()
        body.pop("rater_token", None)
        self.responses.append((response.status_code, body))
        return body

    def join(self, slug: str, participant: str) -> dict | None:
        joined = self.client.post(f"{API}/rate/{slug}/raters", json={"participant": participant})
        self.record(joined)
        return (
            {"X-Rater-Token": joined.json()["rater_token"]} if joined.status_code == 201 else None
        )

    def next(self, slug: str, token: dict) -> dict:
        return self.record(self.client.get(f"{API}/rate/{slug}/next", headers=token))

    def answer(self, slug: str, token: dict, query_id: int, choice: str) -> dict:
        return self.send(slug, token, query_id, {"choice": choice})

    def send(self, slug: str, token: dict, query_id: int, answer: dict) -> dict:
        body = {"query_id": query_id, "response_time_ms": 700, **answer}
        return self.record(self.client.post(f"{API}/rate/{slug}/answers", headers=token, json=body))

    def picks(self, shown: dict, careless: bool = False) -> dict:
        """A screen's answer: a careful rater passes its checks (the reference picked
        first, the item shown once picked as odd), a careless one picks at random; now
        and then "can't tell"."""
        keys = [item["key"] for item in shown["items"]]
        draw = self.rng.random()
        if draw < 0.08:
            return {"choice": "cant_tell"}
        order = [keys[at] for at in self.rng.permutation(len(keys))]
        if shown["format"] == "rank":
            reference = shown["reference"]["key"]
            if reference in order and not careless:
                order.remove(reference)
                order.insert(0, reference)
            return {"picks": list(dict.fromkeys(order))[: shown["picks"]]}
        if not careless:
            order.sort(key=keys.count)  # the item shown once first
        return {"picks": order[:1]}

    def sides(self, shown: dict) -> dict:
        """A sorting screen's answer: each item to a side, now and then "can't tell" for
        one item or the whole screen."""
        draw = self.rng.random()
        if draw < 0.08:
            return {"choice": "cant_tell"}
        sides = self.rng.choice(["left", "right", "cant_tell"], p=[0.45, 0.45, 0.1], size=99)
        return {
            "sides": [
                {"key": item["key"], "side": str(side)}
                for item, side in zip(shown["items"], sides, strict=False)
            ]
        }

    def choice(self, shown: dict, careless: bool = False) -> str:
        """An attention check repeats the anchor on one side: a careful rater picks it,
        a careless one answers at random (and is excluded for it)."""
        draw = self.rng.random()
        if not careless:
            for side in ("left", "right"):
                if shown[side]["key"] == shown["anchor"]["key"]:
                    return side
            if draw < 0.1:
                return "cant_tell"
        return "left" if draw < 0.55 else "right"

    def expire_leases(self, project_id: int) -> None:
        """Time passes: every lease of the project runs out."""
        past = utcnow() - timedelta(hours=1)
        with unit_of_work(self.app.state.session_factory) as session:
            session.execute(
                update(Assignment)
                .where(Assignment.project_id == project_id, Assignment.answered_at.is_(None))
                .values(expires_at=past)
            )
            session.execute(
                update(QuerySlot)
                .where(QuerySlot.project_id == project_id, QuerySlot.lease_expires_at.is_not(None))
                .values(lease_expires_at=past)
            )

    def build_steps(self) -> None:
        """The worker folds the answers into the build: its next nodes ask new queries."""
        with using(self.worker_caches):
            Worker(self.app.state.session_factory, kinds=[STEP], upkeep=False).run(until_idle=True)

    def propose(self, project_id: int, count: int) -> None:
        """A sampler's proposals, as the worker's refresh stores them (priority 5)."""
        with unit_of_work(self.app.state.session_factory) as session:
            ids = session.scalars(
                select(Item.id).where(Item.project_id == project_id).order_by(Item.id)
            ).all()
            rows = [
                {
                    "project_id": project_id,
                    "priority": int(Purpose.proposal),
                    "query_key": n,
                    "anchor_id": ids[n],
                    "lo_id": ids[(n + 1) % len(ids)],
                    "hi_id": ids[(n + 3) % len(ids)],
                    "state": SlotState.open,
                    "created_at": utcnow(),
                }
                for n in range(count)
            ]
            for row in rows:
                row["lo_id"], row["hi_id"] = sorted((row["lo_id"], row["hi_id"]))
            session.execute(insert(QuerySlot), rows)

    def play(self) -> None:
        study, slug = self.project(
            "study",
            12,
            attention_rate=0.15,
            random_share=0.25,
            allow_cant_tell=True,
            answers_per_rater=40,
            completion_code="STUDY-DONE",
            min_attention_accuracy=0.8,
            quality_min_answers=3,
            arms=[{"name": "A"}, {"name": "B", "question": "Which of the two is more alike?"}],
        )
        self.propose(study, 6)  # stored before the build's slots: ids not in priority order
        build = self.client.post(
            f"{API}/projects/{study}/builds",
            headers=self.auth,
            json={"n_trees": 2, "leaf_size": 2, "answers_per_query": 2, "random_state": 0},
        )
        assert build.status_code == 201, build.text
        raters = [self.join(slug, f"p{n}") for n in range(5)]
        held = {n: self.next(slug, token)["comparison"] for n, token in enumerate(raters)}
        late: dict[int, int] = {}
        for turn in range(230):
            n = turn % len(raters)
            if held[n] is None:
                continue
            if turn == 100:
                # The researcher pauses the link: each rater's answer to the comparison
                # on their screen still counts, then nothing new is served, no code is
                # given, and nobody joins; resumed, everyone gets a comparison again.
                self.link(study, "paused")
                assert self.join(slug, "while paused") is None
                for k, token in enumerate(raters):
                    if held[k] is not None:
                        self.answer(slug, token, held[k]["query_id"], self.choice(held[k]))
                        held[k] = self.next(slug, token)["comparison"]
                assert held == dict.fromkeys(held)
                self.link(study, "open")
                held = {k: self.next(slug, token)["comparison"] for k, token in enumerate(raters)}
            if turn in (60, 140):
                stale = {k: shown["query_id"] for k, shown in held.items() if shown is not None}
                self.expire_leases(study)
                for k, token in enumerate(raters):
                    if k in stale:
                        held[k] = self.next(slug, token)["comparison"]
                        late[k] = stale[k]
            if turn == 120:  # what raters see changes: the answers after it are version 2
                changed = self.client.patch(
                    f"{API}/projects/{study}/rating",
                    headers=self.auth,
                    json={"question": "Which of the two is closer to the top one, at a glance?"},
                )
                assert changed.status_code == 200, changed.text
            query_id = held[n]["query_id"]
            if turn % 20 == 19:
                self.build_steps()
            choice = self.choice(held[n], careless=n == 4)
            state = self.answer(slug, raters[n], query_id, choice)
            if turn % 7 == 3:  # the same answer again: a retry, a double click
                state = self.answer(slug, raters[n], query_id, choice)
            if n in late:  # the answer to the lease that expired comes in late
                self.answer(slug, raters[n], late.pop(n), "left")
            held[n] = state["comparison"]
        self.answer(slug, raters[0], 10**12, "left")  # a query never served: 404

        small, small_slug = self.project(
            "small",
            5,
            attention_rate=0.2,
            random_share=0.3,
            answers_per_rater=0,
            completion_code="SMALL-DONE",
        )
        few = [self.join(small_slug, f"q{n}") for n in range(2)]
        shown = [self.next(small_slug, token)["comparison"] for token in few]
        for turn in range(160):
            n = turn % 2
            if shown[n] is None:
                continue
            # Now and then a "can't tell" this study does not offer: refused (400).
            state = self.answer(small_slug, few[n], shown[n]["query_id"], self.choice(shown[n]))
            if "detail" not in state:
                shown[n] = state["comparison"]
        assert shown == [None, None]  # both ran out of work

        # A study that screens out raters who fail its checks: the careless one's session
        # ends at the check that takes them below the threshold, and the answer they
        # then send from another tab (a query served after the first one's lease ran
        # out) is not recorded.
        screened, screened_slug = self.project(
            "screened",
            8,
            attention_rate=0.4,
            random_share=0.6,
            allow_cant_tell=True,
            answers_per_rater=30,
            completion_code="SCREENED-DONE",
            min_attention_accuracy=0.9,
            quality_min_answers=2,
            screened_out_code="SCREENED-OUT",
            screened_out_url="https://example.org/screened",
        )
        three = [self.join(screened_slug, f"s{n}") for n in range(3)]
        shown = [self.next(screened_slug, token)["comparison"] for token in three]
        other_tab = None
        for turn in range(90):
            n = turn % 3
            if shown[n] is None:
                continue
            careless = n == 2
            is_check = shown[n]["anchor"]["key"] in (
                shown[n]["left"]["key"],
                shown[n]["right"]["key"],
            )
            if careless and other_tab is None and not is_check:
                other_tab = shown[n]["query_id"]
                self.expire_leases(screened)
                shown = [self.next(screened_slug, token)["comparison"] for token in three]
                continue
            choice = self.choice(shown[n], careless=careless)
            state = self.answer(screened_slug, three[n], shown[n]["query_id"], choice)
            shown[n] = state["comparison"]
            if state["screened_out"] and other_tab is not None:
                self.answer(screened_slug, three[n], other_tab, "left")
                self.next(screened_slug, three[n])
                other_tab = None

        # Studies of screens: the function hands them to the Python path, which serves
        # screens and checks in the study's format and stores judgements; a triplet's
        # answer to a screen is refused (422), a retry stores nothing more.
        for judgement in ("odd_one_out", "rank"):
            screened_study, slug = self.project(
                judgement,
                9,
                judgement=judgement,
                shown=4,
                picks=2,
                attention_rate=0.3,
                random_share=0.5,
                allow_cant_tell=True,
                answers_per_rater=12,
                completion_code=f"{judgement}-DONE",
                min_attention_accuracy=0.7,
                quality_min_answers=2,
            )
            # A sampler's questions, asked on screens around them (after the first answer).
            self.propose(screened_study, 4)
            two = [self.join(slug, f"{judgement}{n}") for n in range(2)]
            shown = [self.next(slug, token)["comparison"] for token in two]
            for turn in range(40):
                n = turn % 2
                if shown[n] is None:
                    continue
                if turn == 4:
                    self.answer(slug, two[n], shown[n]["query_id"], "left")
                answer = self.picks(shown[n], careless=n == 1)
                state = self.send(slug, two[n], shown[n]["query_id"], answer)
                if turn % 5 == 2:
                    state = self.send(slug, two[n], shown[n]["query_id"], answer)
                shown[n] = state["comparison"]
            assert shown == [None, None]  # both sessions complete

        # A build that sorts: a queue draw is handed to the Python path, which serves
        # sorting screens of the node's items; triplets (random questions, checks) still
        # take the function. A screen's answer of another shape is refused (422).
        sorting_study, slug = self.project(
            "sorting",
            14,
            attention_rate=0.15,
            random_share=0.25,
            allow_cant_tell=True,
            answers_per_rater=25,
            completion_code="SORTED",
        )
        build = self.client.post(
            f"{API}/projects/{sorting_study}/builds",
            headers=self.auth,
            json={"n_trees": 2, "answers_per_query": 2, "random_state": 1, "sort_size": 3},
        )
        assert build.status_code == 201, build.text
        three = [self.join(slug, f"sort{n}") for n in range(3)]
        shown = [self.next(slug, token)["comparison"] for token in three]
        formats = set()
        for turn in range(90):
            n = turn % 3
            if shown[n] is None:
                continue
            if turn % 10 == 9:
                self.build_steps()
            formats.add(shown[n]["format"])
            query_id = shown[n]["query_id"]
            if shown[n]["format"] == "sort":
                if turn % 11 == 4:
                    self.send(slug, three[n], query_id, {"picks": [shown[n]["items"][0]["key"]]})
                answer = self.sides(shown[n])
            else:
                answer = {"choice": self.choice(shown[n])}
            state = self.send(slug, three[n], query_id, answer)
            if turn % 6 == 1:
                state = self.send(slug, three[n], query_id, answer)
            shown[n] = state["comparison"]
        assert formats == {"triplet", "sort"}


def _value(value):
    if isinstance(value, datetime):
        return "time"  # when: differs between runs; durations are compared below
    if isinstance(value, bytes | memoryview):
        return bytes(value)
    return value


def _rows(app) -> dict:
    """Every table's rows in id order, with times and secrets blanked (session tokens,
    public slugs), and each assignment's lease length in seconds."""
    blank = {"token_hash", "public_slug", "session_hash", "secret_hash", "locked_by"}
    rows = {}
    with app.state.session_factory() as session:
        for table in Base.metadata.sorted_tables:
            if table.name in ("api_tokens", "researchers", "alembic_version"):
                continue
            order = [column for column in table.primary_key.columns]
            result = session.execute(select(table).order_by(*order)).mappings().all()
            rows[table.name] = [
                {key: _value(value) for key, value in row.items() if key not in blank}
                for row in result
            ]
            if any(column.name in blank for column in order):  # ordered by a secret
                rows[table.name].sort(key=lambda row: sorted(row.items()))
        rows["lease seconds"] = [
            round((expires - served).total_seconds()) if expires > served else "expired"
            for expires, served in session.execute(
                select(Assignment.expires_at, Assignment.served_at).order_by(Assignment.id)
            )
        ]
    return rows


def _run(url: str, data_dir: Path, answer_function: bool) -> Run:
    app = create_app(_settings(url, data_dir, answer_function))
    try:
        with TestClient(app) as client:
            with unit_of_work(app.state.session_factory) as session:
                token = create_token(session=session, researcher_name="alice")
            scenario = Scenario(client, app, {"Authorization": f"Bearer {token}"})
            scenario.play()
            run = Run(responses=scenario.responses, rows=_rows(app))
            function = app.state.answer_function
            calls = 0 if function is None else function.pool.get_stats().get("requests_num", 0)
            run.rows["function calls"] = calls
    finally:
        app.state.engine.dispose()
    return run


def _first_difference(one: Run, other: Run) -> str | None:
    for number, (a, b) in enumerate(zip(one.responses, other.responses, strict=True)):
        if a != b:
            return f"response {number}: {a} != {b}"
    for table in one.rows:
        if table == "function calls":
            continue
        mine, theirs = one.rows[table], other.rows[table]
        if len(mine) != len(theirs):
            return f"{table}: {len(mine)} rows != {len(theirs)} rows"
        for a, b in zip(mine, theirs, strict=True):
            if a != b:
                return f"{table}: {a} != {b}"
    return None


def test_the_answer_function_and_the_python_scheduler_write_the_same(
    make_database_url, tmp_path, monkeypatch
):
    """The same seeded scenario through closer_answer() (PostgreSQL), the Python path on
    PostgreSQL (the function turned off) and the Python path on SQLite. A process asks
    for a build step at most every half second, which depends on how fast a path runs:
    here every answer to a build's query asks (one job stays queued either way)."""
    monkeypatch.setattr(build_jobs, "STEP_REQUEST_SECONDS", 0)
    runs = {}
    for name, backend, function in (
        ("function", "postgresql", True),
        ("python", "postgresql", False),
        ("sqlite", "sqlite", False),
    ):
        url = make_database_url(backend, f"paths_{name}")
        migrations.upgrade(url)
        runs[name] = _run(url, tmp_path / name, function)
    function, python, sqlite = runs["function"], runs["python"], runs["sqlite"]
    # The scenario covered what it claims, and the function took most of the answers.
    assignments = function.rows["assignments"]
    purposes = {row["purpose"] for row in assignments}
    assert purposes == {int(p) for p in Purpose} - {int(Purpose.routing)}, purposes
    assert {row["choice"] for row in assignments} >= {"left", "right", "cant_tell"}
    excluded = [row["id"] for row in function.rows["raters"] if row["excluded"]]
    # The careless rater of "study", the one screened out, and each screen study's (a
    # careful one may join them: "can't tell" on a check fails it).
    careless = {"p4", "s2", "odd_one_out1", "rank1"}
    assert careless <= {row["external_id"] for row in function.rows["raters"] if row["excluded"]}
    served_to_excluded = [
        row for row in assignments if row["rater_id"] in excluded and row["slot_id"] is not None
    ]
    assert len(served_to_excluded) >= 3  # their answers to queue slots release them
    assert sum(row["completed_at"] is not None for row in function.rows["raters"]) >= 3
    assert sum(body.get("out_of_work", False) for _, body in function.responses) == 2
    screened_out = [body for _, body in function.responses if body.get("screened_out")]
    assert len(screened_out) == 3  # the check that ended it, the other tab's answer, a visit
    assert {body["completion_code"] for body in screened_out} == {"SCREENED-OUT"}
    assert sum(body.get("replayed", False) for _, body in function.responses) >= 25
    assert sum(row["answered_at"] is not None for row in assignments) >= 280
    assert function.rows["function calls"] >= 250
    # Each answer of the study with arms records its rater's arm and the version asking.
    recorded = {(row["arm"], row["design_version"]) for row in function.rows["triplets"]}
    assert {("A", 1), ("B", 1), ("A", 2), ("B", 2)} <= recorded
    assert python.rows["function calls"] == 0
    # The next query was decided as each was served (app/scheduling/upcoming.py): every
    # kind was, and the checks and random questions drawn ahead were served as drawn,
    # but for those the rater was served meanwhile (a late answer to a lease that ran out).
    decided = {row["upcoming_purpose"] for row in assignments}
    assert decided >= {FROM_QUEUE, *map(int, (Purpose.random, Purpose.attention, Purpose.repeat))}
    drawn = {
        (row["rater_id"], row["upcoming_anchor_id"], row["upcoming_lo_id"], row["upcoming_hi_id"])
        for row in assignments
        if row["upcoming_anchor_id"] is not None
    }
    as_drawn = [
        row
        for row in assignments
        if (row["rater_id"], row["anchor_id"], row["lo_id"], row["hi_id"]) in drawn
    ]
    assert len(as_drawn) >= 200
    formats = {row["format"] for row in function.rows["judgements"]}
    assert formats == {"odd_one_out", "rank", "sort"}
    screens = [row for row in assignments if row["format"] != "triplet"]
    assert {row["purpose"] for row in screens} >= {
        int(Purpose.random),
        int(Purpose.attention),
        int(Purpose.proposal),
        int(Purpose.build),
    }
    sorted_items = [row for row in assignments if row["format"] == "sort"]
    assert sum(row["screen_id"] is not None for row in sorted_items) >= 20
    assert sum(status == 422 for status, _ in function.responses) >= 3

    assert _first_difference(function, python) is None, _first_difference(function, python)
    assert _first_difference(python, sqlite) is None, _first_difference(python, sqlite)

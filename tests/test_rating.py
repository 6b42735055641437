"""Rating through the public link, on both databases: joining, the scheduler's leases and
priorities, idempotent answers, attention checks and exclusion, completion."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sqlalchemy import select

from app.builds.jobs import sweep
from app.core import caches
from app.core.db import unit_of_work
from app.learn import CompRF, FeatureOracle
from app.models import (
    ADAPTIVE_PURPOSES,
    Assignment,
    Item,
    Job,
    Project,
    Purpose,
    QuerySlot,
    Rater,
    SlotState,
    Triplet,
    TripletSource,
)
from app.models._types import utcnow
from app.worker.loop import Worker
from tests.support.links import open_link
from tests.support.rating import (
    answer,
    blob_study,
    check_answer,
    configure,
    join,
    join_answered,
    oracle_choice,
    start_build,
)

API = "/api/v1"


@pytest.fixture
def blobs():
    return make_blobs(n_samples=60, centers=3, cluster_std=1.0, random_state=0)


@pytest.fixture
def study(client, auth, project, blobs):
    """60 labelled items with features (the last 12 in the test split); returns the
    project id, its public slug and the item keys in order."""
    X, y = blobs
    return blob_study(client, auth, project["id"], X, y)


def triplets(app, project_id):
    with app.state.session_factory() as session:
        return session.query(Triplet).filter(Triplet.project_id == project_id).all()


class TestAnswers:
    def test_an_answer_is_stored_once_however_often_it_is_sent(self, app, client, auth, study):
        project_id, slug, _ = study
        # No attention check (5% by default): a check stores no triplet, and this test
        # follows the triplet of one answer.
        configure(client, auth, project_id, attention_rate=0)
        rater, joined = join(client, slug, PROLIFIC_PID="p-1", STUDY_ID="s-9")
        first = joined["comparison"]
        stored = answer(client, slug, rater, first["query_id"], "right", response_time_ms=812)
        assert stored.status_code == 200 and stored.json()["answered"] == 1
        again = answer(client, slug, rater, first["query_id"], "left")
        assert again.status_code == 200 and again.json()["replayed"] is True
        assert again.json()["answered"] == 1
        rows = triplets(app, project_id)
        assert len(rows) == 1
        ids = {key: item_id for key, item_id in _item_ids(app, project_id).items()}
        row = rows[0]
        assert row.source is TripletSource.rater and row.response_time_ms == 812
        assert (row.anchor_id, row.closer_id, row.farther_id) == (
            ids[first["anchor"]["key"]],
            ids[first["right"]["key"]],
            ids[first["left"]["key"]],
        )

    def test_a_query_served_to_someone_else_or_unknown_cannot_be_answered(self, client, study):
        _, slug, _ = study
        alice, joined = join(client, slug, participant="alice")
        bob, _ = join(client, slug, participant="bob")
        stolen = answer(client, slug, bob, joined["comparison"]["query_id"])
        assert stolen.status_code == 404 and "no query" in stolen.json()["detail"]
        assert answer(client, slug, alice, 10**9).status_code == 404
        bad = answer(client, slug, alice, joined["comparison"]["query_id"], "middle")
        assert bad.status_code == 422

    def test_a_rater_reaches_only_their_study_and_never_the_api(self, client, auth, study):
        _, slug, _ = study
        rater, _ = join(client, slug, participant="carol")
        other = client.post(f"{API}/projects", json={"name": "other"}, headers=auth).json()
        other_slug = client.get(f"{API}/projects/{other['id']}/rating", headers=auth).json()[
            "public_slug"
        ]
        assert client.get(f"{API}/rate/{other_slug}/next", headers=rater).status_code == 401
        bearer = {"Authorization": f"Bearer {rater['X-Rater-Token']}"}
        assert client.get(f"{API}/projects", headers=bearer).status_code == 401
        assert client.get(f"{API}/rate/not-a-study/next", headers=rater).status_code == 404

    def test_the_same_participant_continues_where_they_were(self, client, study):
        _, slug, _ = study
        first, joined = join(client, slug, workerId="W1", assignmentId="A1")
        answer(client, slug, first, joined["comparison"]["query_id"])
        again, rejoined = join(client, slug, workerId="W1", assignmentId="A2")
        assert rejoined["answered"] == 1

    def test_joining_with_someone_elses_id_takes_over_nothing(self, client, study):
        """Issue 15, hole 3: a second join with a participant id gets a session of its
        own on the same rater; the first browser's session keeps working."""
        _, slug, _ = study
        victim, joined = join(client, slug, PROLIFIC_PID="P-123")
        answer(client, slug, victim, joined["comparison"]["query_id"])
        intruder, _ = join(client, slug, PROLIFIC_PID="P-123")
        assert intruder["X-Rater-Token"] != victim["X-Rater-Token"]
        state = client.get(f"{API}/rate/{slug}/next", headers=victim)
        assert state.status_code == 200 and state.json()["answered"] == 1
        answer(client, slug, victim, state.json()["comparison"]["query_id"])
        assert client.get(f"{API}/rate/{slug}/next", headers=intruder).json()["answered"] == 2

    def test_completion_code_after_the_configured_answers(self, client, auth, study):
        project_id, slug, _ = study
        settings = configure(
            client,
            auth,
            project_id,
            answers_per_rater=3,
            completion_code="DONE-42",
            completion_url="https://example.org/back?cc=DONE-42",
        )
        assert settings["public_url"].endswith(f"/r/{slug}")
        rater, state = join(client, slug)
        for _ in range(3):
            assert state["complete"] is False
            state = answer(client, slug, rater, state["comparison"]["query_id"]).json()
        assert state["complete"] is True and state["comparison"] is None
        assert state["completion_code"] == "DONE-42"
        assert state["completion_url"] == "https://example.org/back?cc=DONE-42"

    def test_cant_tell_only_where_offered_and_the_query_goes_back(self, app, client, auth, study):
        project_id, slug, _ = study
        configure(client, auth, project_id, random_share=0, attention_rate=0)
        start_build(client, auth, project_id, n_trees=1, random_state=0)
        rater, state = join_answered(client, slug)
        query_id = state["comparison"]["query_id"]
        refused = answer(client, slug, rater, query_id, "cant_tell")
        assert refused.status_code == 400 and "can't tell" in refused.json()["detail"]
        configure(client, auth, project_id, allow_cant_tell=True)
        before = len(triplets(app, project_id))
        assert answer(client, slug, rater, query_id, "cant_tell").status_code == 200
        assert len(triplets(app, project_id)) == before
        with app.state.session_factory() as session:
            slot_id = session.get(Assignment, query_id).slot_id
            slot = session.get(QuerySlot, slot_id)
            assert slot.state is SlotState.open and slot.lease_rater_id is None
        other, other_state = join_answered(client, slug)
        assert other_state["comparison"]["query_id"] != query_id
        with app.state.session_factory() as session:
            assert session.get(Assignment, other_state["comparison"]["query_id"]).slot_id == slot_id


class TestNoDeadEnds:
    """A participant promised 40 answers in a study of 4 items (24 distinct queries and
    checks): they answer every one, then end with a code and a redirect, never on a
    page that tells them to come back later."""

    @pytest.fixture
    def tiny(self, client, auth, project):
        rows = "key,features\ncircle,0 0\noval,0.2 0.1\nsquare,3 3\ntriangle,3.5 2.5"
        uploaded = client.post(
            f"{API}/projects/{project['id']}/items",
            headers=auth,
            files={"file": ("items.csv", rows)},
        )
        assert uploaded.status_code == 201, uploaded.text
        configure(
            client,
            auth,
            project["id"],
            answers_per_rater=40,
            completion_code="DONE-40",
            completion_url="https://example.org/done",
        )
        slug = open_link(client, auth, project["id"])
        return project["id"], slug["public_slug"]

    def _answer_everything(self, client, slug, participant):
        rater, state = join(client, slug, PROLIFIC_PID=participant)
        shown = set()
        while state["comparison"] is not None:
            comparison = state["comparison"]
            keys = (comparison["anchor"]["key"], comparison["left"]["key"])
            shown.add((keys[0], frozenset((keys[1], comparison["right"]["key"]))))
            state = answer(client, slug, rater, comparison["query_id"], "left").json()
            assert len(shown) <= 24
        return state, shown

    def test_a_rater_who_saw_everything_gets_the_completion_code(self, client, tiny):
        _, slug = tiny
        state, shown = self._answer_everything(client, slug, "p-small")
        assert len(shown) == 24  # 12 triplets and 12 attention checks, each once
        assert state["answered"] == 24 and state["target"] == 40
        assert state["complete"] is True and state["out_of_work"] is True
        assert state["completion_code"] == "DONE-40"
        assert state["completion_url"] == "https://example.org/done"

    def test_a_no_more_work_code_and_redirect_when_configured(self, client, auth, tiny):
        project_id, slug = tiny
        settings = configure(
            client,
            auth,
            project_id,
            no_more_work_code="NOMORE-1",
            no_more_work_url="https://example.org/no-more",
        )
        assert settings["no_more_work_code"] == "NOMORE-1"
        state, _ = self._answer_everything(client, slug, "p-configured")
        assert state["out_of_work"] is True and state["completion_code"] == "NOMORE-1"
        assert state["completion_url"] == "https://example.org/no-more"
        again = client.get(f"{API}/rate/{slug}/next", headers=join(client, slug)[0]).json()
        assert again["comparison"] is not None  # a new rater still has everything to see

    def test_the_participants_list_says_how_each_session_ended_as_json_and_csv(
        self, app, client, auth, tiny
    ):
        """What a researcher pays from: each participant's outcome and the code they were
        shown, the same in the API's JSON, the CSV (a spreadsheet's: BOM, no formula) and
        the page."""
        import csv as csv_module
        import io

        project_id, slug = tiny
        configure(client, auth, project_id, answers_per_rater=2)
        done, state = join(client, slug, PROLIFIC_PID="p-done", STUDY_ID="s-1", SESSION_ID="x")
        for _ in range(2):
            state = answer(client, slug, done, state["comparison"]["query_id"]).json()
        assert state["completion_code"] == "DONE-40"
        configure(client, auth, project_id, answers_per_rater=40, no_more_work_code="NOMORE-1")
        self._answer_everything(client, slug, "p-out")
        join(client, slug, PROLIFIC_PID='=HYPERLINK("http://x")', STUDY_ID="s-1")
        careless, _ = join(client, slug, PROLIFIC_PID="p-careless")
        gone, _ = join(client, slug, PROLIFIC_PID="p-gone")
        configure(client, auth, project_id, min_attention_accuracy=0.8, quality_min_answers=4)
        with unit_of_work(app.state.session_factory) as session:
            for rater in session.query(Rater).filter(Rater.project_id == project_id):
                if rater.external_id == "p-careless":
                    rater.attention_failed = 4
                if rater.external_id == "p-out":  # (it answered "left" to every check)
                    rater.attention_passed += rater.attention_failed
                    rater.attention_failed = 0
                if rater.external_id == "p-gone":
                    rater.created_at = rater.last_seen_at = utcnow() - timedelta(hours=2)

        listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth)
        assert listed.status_code == 200
        outcomes = {
            p["participant_id"]: (p["outcome"], p["completion_code"]) for p in listed.json()
        }
        assert outcomes == {
            "p-done": ("completed", "DONE-40"),
            "p-out": ("out_of_work", "NOMORE-1"),
            '=HYPERLINK("http://x")': ("in_progress", None),
            "p-careless": ("failed_attention", None),
            "p-gone": ("abandoned", None),
        }
        done_row = next(p for p in listed.json() if p["participant_id"] == "p-done")
        assert done_row["platform_ids"] == {
            "PROLIFIC_PID": "p-done",
            "STUDY_ID": "s-1",
            "SESSION_ID": "x",
        }
        assert done_row["answers"] == 2 and done_row["minutes"] is not None

        exported = client.get(f"{API}/projects/{project_id}/participants/export", headers=auth)
        assert exported.status_code == 200
        assert exported.headers["content-type"] == "text/csv; charset=utf-8"
        assert "attachment" in exported.headers["content-disposition"]
        assert exported.content.startswith(b"\xef\xbb\xbf")  # UTF-8 with a byte-order mark
        rows = list(csv_module.DictReader(io.StringIO(exported.content.decode("utf-8-sig"))))
        assert [r["participant_id"] for r in rows] == [
            ("'" if p["participant_id"].startswith("=") else "") + p["participant_id"]
            for p in listed.json()
        ]  # the same participants, in the same order; none read as a formula
        for row, item in zip(rows, listed.json(), strict=True):
            assert row["outcome"] == item["outcome"]
            assert row["completion_code"] == (item["completion_code"] or "")
            assert row["answers"] == str(item["answers"])
            assert row["PROLIFIC_PID"].lstrip("'") == item["platform_ids"]["PROLIFIC_PID"]
        assert "workerId" not in rows[0]  # only the platform parameters met

        page = client.get(f"/projects/{project_id}/participants", headers=auth).text
        assert "<dt>Completed</dt><dd>1</dd>" in page
        assert "<dt>Failed attention checks</dt><dd>1</dd>" in page
        assert "<code>NOMORE-1</code>" in page

    def test_the_rating_page_ends_with_the_code_and_the_redirect(self, client, tiny):
        _, slug = tiny
        started = client.post(f"/r/{slug}/start", data={"PROLIFIC_PID": "page-1"})
        assert started.status_code == 200  # followed to the rating page
        page = started.text
        for _ in range(30):
            if 'name="query_id"' not in page:
                break
            query_id = page.split('name="query_id" value="')[1].split('"')[0]
            page = client.post(
                f"/r/{slug}/answer",
                data={"query_id": query_id, "choice": "right", "response_time_ms": "900"},
                headers={"HX-Request": "true"},
            ).text
        assert "DONE-40" in page and 'data-redirect="https://example.org/done"' in page
        assert "come back later" not in page


class TestScheduler:
    def test_first_answers_of_open_nodes_come_before_further_answers(
        self, app, client, auth, study
    ):
        project_id, slug, _ = study
        # No repeated random questions (the noise ceiling's): each rater's first is random.
        configure(client, auth, project_id, random_share=0, attention_rate=0, repeat_share=0)
        start_build(client, auth, project_id, n_trees=1, answers_per_query=3, random_state=0)
        with app.state.session_factory() as session:
            slots = session.query(QuerySlot.priority, QuerySlot.anchor_id).all()
        # The root of 48 items asks 46 queries (not its pivots), three answers each.
        assert len(slots) == 3 * 46
        assert sorted(p for p, _ in slots) == [1] * 46 + [2] * 92
        served = []
        for number in range(47):
            _, state = join_answered(client, slug, participant=f"r{number}")
            comparison = state["comparison"]
            served.append(
                (comparison["anchor"]["key"], comparison["left"]["key"], comparison["right"]["key"])
            )
        queries = [(anchor, frozenset((a, b))) for anchor, a, b in served]
        assert len(set(queries[:46])) == 46  # one first answer for every query first
        assert queries[46] in set(queries[:46])  # then a second answer for one of them
        with app.state.session_factory() as session:
            purposes = [a.purpose for a in session.query(Assignment).order_by(Assignment.id)]
        # Each rater's first query was a random one, then the build's.
        assert purposes == [int(Purpose.random), 1] * 46 + [int(Purpose.random), 2]

    def test_a_rater_never_sees_a_query_twice(self, app, client, auth, study):
        project_id, slug, _ = study
        configure(
            client, auth, project_id, random_share=0.5, attention_rate=0.1, answers_per_rater=0
        )
        start_build(client, auth, project_id, n_trees=2, answers_per_query=3, random_state=1)
        rater, state = join(client, slug)
        for _ in range(150):
            state = answer(client, slug, rater, state["comparison"]["query_id"]).json()
        with app.state.session_factory() as session:
            rows = session.query(Assignment.anchor_id, Assignment.lo_id, Assignment.hi_id).all()
        assert len(rows) == 151 and len(set(rows)) == 151

    def test_an_expired_lease_is_served_again_and_its_late_answer_still_counts(
        self, app, client, auth, study
    ):
        project_id, slug, _ = study
        configure(client, auth, project_id, random_share=0, attention_rate=0, lease_seconds=5)
        start_build(client, auth, project_id, n_trees=1, random_state=0)
        slow, slow_state = join_answered(client, slug, participant="slow")
        first_slot = _slot_of(app, slow_state["comparison"]["query_id"])
        _, quick_state = join_answered(client, slug, participant="quick")
        assert _slot_of(app, quick_state["comparison"]["query_id"]) != first_slot
        with unit_of_work(app.state.session_factory) as session:  # time passes
            session.get(QuerySlot, first_slot).lease_expires_at = utcnow() - timedelta(seconds=1)
        late, late_state = join_answered(client, slug, participant="late")
        assert _slot_of(app, late_state["comparison"]["query_id"]) == first_slot
        before = len(triplets(app, project_id))
        stored = answer(client, slug, slow, slow_state["comparison"]["query_id"])
        assert stored.status_code == 200 and stored.json()["replayed"] is False
        assert len(triplets(app, project_id)) == before + 1

    def test_many_raters_at_once_never_share_a_slot(self, app, client, auth, study):
        project_id, slug, _ = study
        configure(client, auth, project_id, random_share=0, attention_rate=0)
        start_build(client, auth, project_id, n_trees=3, random_state=0)
        raters = [join_answered(client, slug, participant=f"c{i}")[0] for i in range(16)]
        with unit_of_work(app.state.session_factory) as session:  # leases of the joins end
            session.query(Assignment).delete()
            session.query(QuerySlot).update({"lease_expires_at": None, "lease_rater_id": None})
        served, barrier = [], threading.Barrier(len(raters))

        def ask(rater):
            barrier.wait()
            response = client.get(f"{API}/rate/{slug}/next", headers=rater)
            served.append(response.json()["comparison"]["query_id"])

        threads = [threading.Thread(target=ask, args=(rater,)) for rater in raters]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        slots = [_slot_of(app, query_id) for query_id in served]
        assert len(slots) == 16 and None not in slots and len(set(slots)) == 16


class TestQuality:
    def test_a_screened_out_code_ends_the_session_of_a_rater_who_fails_the_checks(
        self, app, client, auth, study
    ):
        """Prolific and MTurk pay a failed attention check differently: with a code for
        it, the rater's session ends at the check that takes them below the threshold,
        with that code and redirect, and nothing they send afterwards is recorded, on
        either answer path. Without one they carry on, excluded (the test below)."""
        project_id, slug, _ = study
        configure(
            client,
            auth,
            project_id,
            attention_rate=1.0,
            random_share=0,
            answers_per_rater=10,
            completion_code="DONE-10",
            min_attention_accuracy=0.75,
            quality_min_answers=3,
            screened_out_code="FAILED-CHECKS",
            screened_out_url="https://example.org/screened",
        )
        careless, state = join(client, slug, PROLIFIC_PID="careless")
        careful, careful_state = join(client, slug, PROLIFIC_PID="careful")

        for _ in range(2):
            comparison = state["comparison"]
            chosen = check_answer(comparison, passing=True)
            state = answer(client, slug, careless, comparison["query_id"], chosen)
            assert state.json()["screened_out"] is False
            state = state.json()
        held_check = state["comparison"]
        # A second tab: the check's lease runs out and a plain triplet is served instead.
        with unit_of_work(app.state.session_factory) as session:
            session.get(Assignment, held_check["query_id"]).expires_at = utcnow() - timedelta(
                seconds=1
            )
        configure(client, auth, project_id, attention_rate=0)
        other_tab = client.get(f"{API}/rate/{slug}/next", headers=careless).json()["comparison"]
        assert other_tab["query_id"] != held_check["query_id"]
        with app.state.session_factory() as session:
            before = session.query(Rater).filter_by(external_id="careless").one()
            checks_so_far = before.attention_passed + before.attention_failed
        assert checks_so_far == 2
        # Passed 2 of 3: below 75 %, the session ends at the third check.
        failing = check_answer(held_check, passing=False)
        ended = answer(client, slug, careless, held_check["query_id"], failing).json()
        assert ended["screened_out"] is True and ended["comparison"] is None
        assert ended["completion_code"] == "FAILED-CHECKS"
        assert ended["completion_url"] == "https://example.org/screened"
        assert ended["out_of_work"] is False

        # The query in the other tab is not recorded, and nothing new is served.
        late = answer(client, slug, careless, other_tab["query_id"], "left")
        assert late.status_code == 200 and late.json()["completion_code"] == "FAILED-CHECKS"
        again = client.get(f"{API}/rate/{slug}/next", headers=careless).json()
        assert again["screened_out"] is True and again["comparison"] is None
        with app.state.session_factory() as session:
            rater = session.query(Rater).filter_by(external_id="careless").one()
            assert rater.answers == 3 and rater.screened_out_at is not None
            assert session.get(Assignment, other_tab["query_id"]).answered_at is None
            served = session.query(Assignment).filter_by(rater_id=rater.id).count()
        assert served == 4
        assert triplets(app, project_id) == []

        # Whoever passes the checks carries on to the completion code.
        for _ in range(10):
            comparison = careful_state["comparison"]
            chosen = check_answer(comparison, passing=True)
            careful_state = answer(client, slug, careful, comparison["query_id"], chosen).json()
        assert careful_state["completion_code"] == "DONE-10"
        assert careful_state["screened_out"] is False

        listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
        outcomes = {p["participant_id"]: (p["outcome"], p["completion_code"]) for p in listed}
        assert outcomes == {
            "careless": ("failed_attention", "FAILED-CHECKS"),
            "careful": ("completed", "DONE-10"),
        }
        # Without the code, a screened-out rater's session goes on where it stopped.
        configure(client, auth, project_id, screened_out_code=None)
        resumed = client.get(f"{API}/rate/{slug}/next", headers=careless).json()
        assert resumed["screened_out"] is False and resumed["comparison"] is not None

    def test_failed_attention_checks_exclude_a_rater_from_builds_reversibly(
        self, app, client, auth, study, blobs
    ):
        project_id, slug, keys = study
        X, _ = blobs
        configure(
            client,
            auth,
            project_id,
            attention_rate=1.0,
            random_share=0,
            min_attention_accuracy=0.8,
            quality_min_answers=4,
        )
        careless, state = join(client, slug, participant="careless")
        for _ in range(4):  # always the wrong side: the one that is not the anchor
            comparison = state["comparison"]
            wrong = check_answer(comparison, passing=False)
            state = answer(client, slug, careless, comparison["query_id"], wrong).json()
        assert triplets(app, project_id) == []  # checks are not triplets
        listed = client.get(f"{API}/projects/{project_id}/raters", headers=auth).json()
        assert listed[0]["attention_failed"] == 4 and listed[0]["excluded"] is True
        assert "attention checks" in listed[0]["exclusion_reason"]

        # Their answers are kept but do not reach a build; the researcher can overrule.
        configure(client, auth, project_id, attention_rate=0, random_share=0)
        build = start_build(client, auth, project_id, n_trees=1, random_state=0)
        held = state["comparison"]  # served as a check before the settings changed
        comparison = answer(client, slug, careless, held["query_id"]).json()["comparison"]
        answer(client, slug, careless, comparison["query_id"], oracle_choice(X, keys, comparison))
        sweep(app.state.session_factory)
        Worker(app.state.session_factory).run(until_idle=True)
        progress = client.get(f"{API}/projects/{project_id}/builds/{build['id']}", headers=auth)
        assert progress.json()["progress"]["queries_answered"] == 0
        assert len(triplets(app, project_id)) == 1
        rater_id = listed[0]["id"]
        included = client.patch(
            f"{API}/projects/{project_id}/raters/{rater_id}", headers=auth, json={"excluded": False}
        )
        assert included.json()["excluded"] is False
        sweep(app.state.session_factory)
        Worker(app.state.session_factory).run(until_idle=True)
        progress = client.get(f"{API}/projects/{project_id}/builds/{build['id']}", headers=auth)
        assert progress.json()["progress"]["queries_answered"] == 1

    def test_a_finished_build_says_which_excluded_raters_it_holds_and_builds_again(
        self, app, client, auth, study, blobs
    ):
        """A finished build keeps its trees when a rater is excluded: the build says it
        holds their answers (API and Builds page), and "build again" starts a new build
        as the old one started, without them; including the rater again settles it."""
        project_id, _, keys = study
        X, _ = blobs
        index = {key: i for i, key in enumerate(keys)}
        other = client.post(f"{API}/projects", headers=auth, json={"name": "other"}).json()["id"]
        client.post(
            f"{API}/projects/{other}/items",
            headers=auth,
            files={"file": ("i.csv", "key,label\nx,a\ny,b\nz,a\n")},
        )
        assert start_build(client, auth, other, n_trees=1)["number"] == 1
        build = start_build(client, auth, project_id, n_trees=1, random_state=0)
        assert build["number"] == 1 and build["id"] > 1  # the project's first build
        url = f"{API}/projects/{project_id}/builds/{build['id']}"

        def answer_what_it_asks(build_url: str, rater: str) -> int:
            sent = 0
            for _ in range(60):
                asked = client.get(f"{build_url}/queries?limit=100000", headers=auth).json()
                if not asked:
                    return sent
                lines = ["anchor,closer,farther,rater"]
                for query in asked:
                    a, left, right = (index[query[role]] for role in ("anchor", "left", "right"))
                    if np.linalg.norm(X[a] - X[left]) > np.linalg.norm(X[a] - X[right]):
                        left, right = right, left
                    lines.append(f"{keys[a]},{keys[left]},{keys[right]},{rater}")
                client.post(
                    f"{API}/projects/{project_id}/triplets",
                    headers=auth,
                    files={"file": ("answers.csv", "\n".join(lines))},
                )
                sent += len(asked)
                sweep(app.state.session_factory)
                Worker(app.state.session_factory).run(until_idle=True)
            raise AssertionError("the build still asks after 60 rounds")

        answered = answer_what_it_asks(url, "spammer")
        assert client.get(url, headers=auth).json()["status"] == "complete"
        assert client.get(url, headers=auth).json()["exclusions_since"] is None
        # A rater whose answers came after it finished: excluding them changes no tree,
        # and building again is not offered.
        late = "anchor,closer,farther,rater\n" + f"{keys[0]},{keys[1]},{keys[2]},late\n"
        client.post(
            f"{API}/projects/{project_id}/triplets",
            headers=auth,
            files={"file": ("late.csv", late)},
        ).raise_for_status()
        raters = client.get(f"{API}/projects/{project_id}/raters", headers=auth).json()
        spammer, latecomer = raters
        client.patch(
            f"{API}/projects/{project_id}/raters/{latecomer['id']}",
            headers=auth,
            json={"excluded": True},
        ).raise_for_status()
        assert client.get(url, headers=auth).json()["exclusions_since"] is None
        assert "Build again" not in client.get(f"/projects/{project_id}/builds", headers=auth).text
        client.patch(
            f"{API}/projects/{project_id}/raters/{spammer['id']}",
            headers=auth,
            json={"excluded": True},
        )
        finished = client.get(url, headers=auth).json()
        assert finished["status"] == "complete"  # its trees stay, and its models with them
        assert finished["exclusions_since"] == {
            "excluded": [spammer["id"]],
            "included": [],
            "answers": answered,
        }
        page = client.get(f"/projects/{project_id}/builds", headers=auth).text
        assert f"Its trees hold {answered:,} answers of 1 rater excluded since it finished" in page
        # What it would ask for, before it starts: the new build's own first estimate.
        estimate = client.get(f"{url}/rebuild/estimate", headers=auth).json()
        assert estimate["answers"] > 0
        confirm = client.get(f"/projects/{project_id}/builds/{build['id']}/again", headers=auth)
        assert f"Build again, asking ~{estimate['answers']:,} answers" in confirm.text

        again = client.post(f"{url}/rebuild", headers=auth)
        assert again.status_code == 201, again.text
        rebuilt = again.json()
        assert rebuilt["id"] != build["id"] and rebuilt["params"] == finished["params"]
        assert rebuilt["number"] == 2
        page = client.get(f"/projects/{project_id}/builds", headers=auth).text
        assert "<h3>Build 2 <span" in page and "<h3>Build 1 <span" in page
        assert rebuilt["status"] == "running" and rebuilt["exclusions_since"] is None
        assert rebuilt["progress"]["queries_answered"] == 0  # none of the spammer's count
        Worker(app.state.session_factory).run(until_idle=True)  # its first step
        stepped = client.get(f"{API}/projects/{project_id}/builds/{rebuilt['id']}", headers=auth)
        assert stepped.json()["progress"]["answers_needed_estimate"] == estimate["answers"]
        running = client.post(
            f"{API}/projects/{project_id}/builds/{rebuilt['id']}/rebuild", headers=auth
        )
        assert running.status_code == 409 and "replayed" in running.json()["detail"]

        # Included again: the old build matches the raters once more; the new one is
        # replayed with the spammer's answers and finishes without asking anything new.
        client.patch(
            f"{API}/projects/{project_id}/raters/{spammer['id']}",
            headers=auth,
            json={"excluded": False},
        )
        assert client.get(url, headers=auth).json()["exclusions_since"] is None
        sweep(app.state.session_factory)
        Worker(app.state.session_factory).run(until_idle=True)
        rebuilt_url = f"{API}/projects/{project_id}/builds/{rebuilt['id']}"
        assert answer_what_it_asks(rebuilt_url, "another") == 0
        assert client.get(rebuilt_url, headers=auth).json()["status"] == "complete"

    def test_agreement_with_the_majority(self, app, client, auth, study, blobs):
        project_id, slug, keys = study
        X, _ = blobs
        configure(
            client,
            auth,
            project_id,
            random_share=0,
            attention_rate=0,
            min_majority_agreement=0.5,
            quality_min_answers=5,
            answers_per_rater=0,
        )
        start_build(client, auth, project_id, n_trees=1, answers_per_query=3, random_state=0)
        names = ("ann", "ben", "cat", "dan", "contrarian")
        raters = [join(client, slug, participant=name)[0] for name in names]
        states = [client.get(f"{API}/rate/{slug}/next", headers=r).json() for r in raters]
        for _ in range(30):  # 150 answers: every query of the root gets its three
            for index, rater in enumerate(raters):
                comparison = states[index]["comparison"]
                choice = oracle_choice(X, keys, comparison)
                if names[index] == "contrarian":
                    choice = "left" if choice == "right" else "right"
                states[index] = answer(client, slug, rater, comparison["query_id"], choice).json()
        # The workers' upkeep computes it: nobody has to press "Recompute".
        from app.raters.jobs import keep_agreement_current

        keep_agreement_current(app.state.session_factory)
        kept = client.get(f"{API}/projects/{project_id}/raters", headers=auth).json()
        with app.state.session_factory() as session:
            computed_at = session.get(Project, project_id).agreement_updated_at
        assert computed_at is not None
        keep_agreement_current(app.state.session_factory)  # no new answers: left alone
        with app.state.session_factory() as session:
            assert session.get(Project, project_id).agreement_updated_at == computed_at
        # Sorted by agreement, either way, raters without a figure come last.
        unknown = {r["external_id"] for r in kept if r["majority_agreement"] is None}
        for order in ("asc", "desc"):
            page = client.get(
                f"/projects/{project_id}/raters?sort=agreement&order={order}", headers=auth
            ).text
            shown = sorted(names, key=lambda n: page.index(f'">{n}</a>'))
            assert set(shown[len(shown) - len(unknown) :]) == unknown
            assert shown[0 if order == "asc" else len(shown) - len(unknown) - 1] == "contrarian"
        listed = client.post(f"{API}/projects/{project_id}/raters/quality", headers=auth).json()
        assert sorted(listed, key=lambda r: r["id"]) == sorted(kept, key=lambda r: r["id"])
        by_name = {rater["external_id"]: rater for rater in listed}
        honest = [by_name[name] for name in names[:4]]
        assert sum(rater["majority_compared"] >= 5 for rater in honest) >= 3
        for rater in honest:  # (one may share each query only with a tie: nothing to compare)
            assert rater["majority_agreement"] in (None, 1.0) and rater["excluded"] is False
        assert by_name["contrarian"]["majority_agreement"] == 0.0
        assert by_name["contrarian"]["excluded"] is True
        assert "majority" in by_name["contrarian"]["exclusion_reason"]
        # A refresh that took 30 s (5 M answers) waits ten minutes before the next one.
        caches.current().get("raters.agreement_seconds", dict)[project_id] = 30.0
        comparison = states[0]["comparison"]
        states[0] = answer(client, slug, raters[0], comparison["query_id"], "left").json()
        with app.state.session_factory() as session:
            last = session.get(Project, project_id).agreement_updated_at
        keep_agreement_current(app.state.session_factory)
        with unit_of_work(app.state.session_factory) as session:
            project = session.get(Project, project_id)
            assert project.agreement_updated_at == last
            project.agreement_updated_at = last - timedelta(minutes=11)
        keep_agreement_current(app.state.session_factory)
        with app.state.session_factory() as session:
            assert session.get(Project, project_id).agreement_updated_at > last


@pytest.mark.slow  # a crowd of a few thousand answers
def test_a_crowd_builds_the_forest_the_library_builds_offline(app, client, auth, study, blobs):
    """Raters answering honestly through the scheduler grow the same forest the library
    builds offline with the same answers; the worker folds them in."""
    project_id, slug, keys = study
    X, y = blobs
    configure(client, auth, project_id, random_share=0.1, attention_rate=0.05, answers_per_rater=0)
    build = start_build(client, auth, project_id, n_trees=3, leaf_size=1, random_state=7)
    worker = Worker(app.state.session_factory)
    raters = [join(client, slug, participant=f"crowd{i}") for i in range(5)]
    states = [state for _, state in raters]
    for _round in range(400):
        for index, (rater, _) in enumerate(raters):
            comparison = states[index]["comparison"]
            choice = oracle_choice(X, keys, comparison)
            states[index] = answer(client, slug, rater, comparison["query_id"], choice).json()
        sweep(app.state.session_factory)  # what an idle worker does every few seconds
        worker.run(until_idle=True)
        status = client.get(f"{API}/projects/{project_id}/builds/{build['id']}", headers=auth)
        if status.json()["status"] == "complete":
            break
    assert status.json()["status"] == "complete", status.json()["progress"]
    with app.state.session_factory() as session:
        from app.builds import service
        from app.models import Build

        forest = service.forest(session.get(Build, build["id"]))
    train = np.arange(48)
    offline = CompRF(n_trees=3, random_state=7).fit(train, y[:48].astype(str), FeatureOracle(X))
    test_oracle = FeatureOracle(X)
    ours = forest.predict(np.arange(48, 60), test_oracle)
    theirs = offline.predict(np.arange(48, 60), test_oracle)
    assert np.array_equal(ours, theirs)


def _slot_of(app, assignment_id):
    with app.state.session_factory() as session:
        return session.get(Assignment, assignment_id).slot_id


def _item_ids(app, project_id):
    from app.models import Item

    with app.state.session_factory() as session:
        return dict(session.query(Item.key, Item.id).filter(Item.project_id == project_id).all())


def test_choosing_the_next_query_walks_the_open_slot_index(app, client, auth, study):
    """The lease is found through the partial indexes of open slots, not by scanning
    the queue: the query states their predicate literally (a bound parameter would not
    match it on PostgreSQL)."""
    from sqlalchemy import text

    from app.scheduling.statements import LEASE

    project_id, slug, _ = study
    start_build(client, auth, project_id, n_trees=5, random_state=0)
    with app.state.session_factory() as session:
        postgres = session.get_bind().dialect.name == "postgresql"
        statement = LEASE[postgres].statement.compile(
            dialect=session.get_bind().dialect, compile_kwargs={"literal_binds": False}
        )
        params = {"project": project_id, "rater": 1, "now": utcnow(), "expires": utcnow()}
        explain = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
        if postgres:
            session.execute(text("ANALYZE query_slots"))
            session.execute(text("SET enable_seqscan = off"))  # tiny tables favour scans
        values = statement.construct_params(params)
        if statement.positiontup:  # SQLite's driver takes them in order
            values = tuple(values[name] for name in statement.positiontup)
        plan = session.connection().exec_driver_sql(explain + str(statement), values)
        lines = " ".join(str(row) for row in plan)
    # One of the partial indexes over open slots serves it (their predicate matched),
    # ix_query_slots_open in priority order once the queue is big enough to matter.
    assert "ix_query_slots_" in lines and "Seq Scan on query_slots" not in lines, lines


class TestAnswerFunction:
    """On PostgreSQL the usual answer is one call of closer_answer() (migration 0005);
    what raters and researchers see must be what the Python scheduler gives."""

    @pytest.fixture(autouse=True)
    def postgres_only(self, app):
        if app.state.answer_function is None:
            pytest.skip("SQLite answers through the Python scheduler only")

    def test_a_query_drawn_with_an_item_deleted_meanwhile_is_withdrawn(
        self, app, client, auth, project
    ):
        """A process draws random queries from item ids it read a few seconds ago. An
        item deleted in between may come up in the answer function's draw: the query is
        withdrawn and the rater gets the next one, never a comparison that cannot be
        shown."""
        import itertools

        from sqlalchemy import func

        from app.raters.service import studies
        from app.scheduling.study_items import item_ids

        pid = project["id"]
        keys = ["a", "b", "c", "d", "e"]
        rows = "key\n" + "\n".join(keys)
        assert (
            client.post(
                f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", rows)}
            ).status_code
            == 201
        )
        configure(
            client,
            auth,
            pid,
            random_share=1.0,
            attention_rate=0,
            answers_per_rater=0,
        )
        slug = open_link(client, auth, pid)["public_slug"]
        joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": "r"}).json()
        rater = {"X-Rater-Token": joined["rater_token"]}
        with unit_of_work(app.state.session_factory) as session:
            ids = dict(session.query(Item.key, Item.id).filter(Item.project_id == pid).all())
            rater_id = session.query(Rater.id).filter(Rater.project_id == pid).scalar()
            # Every query without "d" seen but one, which the rater has on screen.
            others = [ids[k] for k in keys if k != "d"]
            queries = [
                (anchor, *sorted(pair))
                for anchor in others
                for pair in itertools.combinations([i for i in others if i != anchor], 2)
            ]
            now = utcnow()
            for number, (anchor, lo, hi) in enumerate(queries):
                session.add(
                    Assignment(
                        project_id=pid,
                        rater_id=rater_id,
                        purpose=int(Purpose.random),
                        anchor_id=anchor,
                        lo_id=lo,
                        hi_id=hi,
                        left_is_lo=True,
                        served_at=now,
                        expires_at=now + timedelta(hours=1),
                        answered_at=None if number == len(queries) - 1 else now,
                        upcoming_purpose=int(Purpose.random),  # drawn at the answer
                    )
                )
            session.flush()
            held = session.query(func.max(Assignment.id)).scalar()
            item_ids().get(session, studies().cached(slug))  # this process's ids, with "d"
        deleted = client.delete(f"{API}/projects/{pid}/items/d", headers=auth)
        assert deleted.status_code == 200, deleted.text

        app.state.scheduler_random = random.Random(20261126)
        state = answer(client, slug, rater, held, "left")
        assert state.status_code == 200, state.text
        shown = state.json()["comparison"]  # every random one seen: an attention check
        assert "d" not in {shown[side]["key"] for side in ("anchor", "left", "right")}
        with app.state.session_factory() as session:
            served = session.query(Assignment.id).filter(Assignment.rater_id == rater_id).all()
            naming_d = (
                session.query(Assignment)
                .filter(
                    (Assignment.anchor_id == ids["d"])
                    | (Assignment.lo_id == ids["d"])
                    | (Assignment.hi_id == ids["d"])
                )
                .count()
            )
        assert naming_d == 0
        # The function drew one with "d" (the next id), withdrawn; then the check.
        assert sorted(i for (i,) in served)[-2:] == [held, held + 2]

    def test_answers_take_one_call_and_store_what_the_rater_chose(
        self, app, client, auth, study, blobs, monkeypatch
    ):
        from app.rating import api

        full_path = []
        answer_fully = api._answer
        monkeypatch.setattr(
            api, "_answer", lambda *args: full_path.append(args[1].query_id) or answer_fully(*args)
        )
        project_id, slug, keys = study
        X, _ = blobs
        # Repeated random questions (the noise ceiling's) take the full path: none here.
        configure(
            client,
            auth,
            project_id,
            random_share=0.3,
            attention_rate=0.1,
            answers_per_rater=0,
            repeat_share=0,
        )
        start_build(client, auth, project_id, n_trees=2, answers_per_query=2, random_state=0)
        rater, state = join(client, slug)
        function = app.state.answer_function
        pool = function.pool
        card_reads = []
        read_cards = function.card_rows
        monkeypatch.setattr(
            function, "card_rows", lambda *args: card_reads.append(args) or read_cards(*args)
        )
        calls_before = pool.get_stats().get("requests_num", 0)
        shown = {}
        rng = np.random.default_rng(0)
        for number in range(60):
            comparison = state["comparison"]
            choice = "left" if rng.random() < 0.5 else "right"
            if number % 4 == 0:
                choice = oracle_choice(X, keys, comparison)
            shown[comparison["query_id"]] = (comparison, choice)
            response = answer(client, slug, rater, comparison["query_id"], choice)
            assert response.status_code == 200, response.text
            state = response.json()
            assert state["answered"] == number + 1 and state["replayed"] is False
        # One call each; attention checks, handed back by the call, took the full path.
        # Items this process had not shown yet are read on the same pool, not in a thread.
        assert pool.get_stats()["requests_num"] - calls_before == 60 + len(card_reads)

        ids = _item_ids(app, project_id)
        with app.state.session_factory() as session:
            served = {a.id: a for a in session.query(Assignment)}
            rater_row = session.query(Rater).one()
            answered_slots = session.query(QuerySlot).filter_by(state=SlotState.answered).count()
            step_jobs = session.query(Job).filter_by(kind="comprf_build_step").count()
        stored = {row.query_id: row for row in triplets(app, project_id)}
        checks = [qid for qid in shown if served[qid].purpose == Purpose.attention]
        assert checks and len(stored) == 60 - len(checks)
        assert full_path == checks
        for query_id, (comparison, choice) in shown.items():
            assert served[query_id].answered_at is not None
            if query_id in checks:
                continue
            chosen, other = ("left", "right") if choice == "left" else ("right", "left")
            row = stored[query_id]
            assert (row.anchor_id, row.closer_id, row.farther_id) == (
                ids[comparison["anchor"]["key"]],
                ids[comparison[chosen]["key"]],
                ids[comparison[other]["key"]],
            )
            assert row.rater_id == rater_row.id and row.source is TripletSource.rater
            assert row.adaptive == (served[query_id].purpose in ADAPTIVE_PURPOSES)
        assert {row.adaptive for row in stored.values()} == {True, False}  # build and random
        assert rater_row.answers == 60
        assert rater_row.attention_passed + rater_row.attention_failed == len(checks)
        queue_answers = sum(
            served[q].slot_id is not None and served[q].purpose in (Purpose.build, Purpose.majority)
            for q in shown
        )
        assert answered_slots == queue_answers > 0
        assert step_jobs >= 1  # the answers asked a worker for a build step
        assert len({(a.anchor_id, a.lo_id, a.hi_id) for a in served.values()}) == len(served)

    def test_a_retry_completion_and_cant_tell_behave_as_on_the_full_path(
        self, app, client, auth, study
    ):
        project_id, slug, _ = study
        configure(
            client,
            auth,
            project_id,
            random_share=0,
            attention_rate=0,
            answers_per_rater=4,
            allow_cant_tell=True,
        )
        start_build(client, auth, project_id, n_trees=1, random_state=0)
        rater, state = join(client, slug)
        first = state["comparison"]["query_id"]
        state = answer(client, slug, rater, first).json()
        second = state["comparison"]["query_id"]
        state = answer(client, slug, rater, second, "cant_tell").json()
        assert state["answered"] == 2 and len(triplets(app, project_id)) == 1
        with app.state.session_factory() as session:
            slot = session.get(QuerySlot, session.get(Assignment, second).slot_id)
            assert slot.state is SlotState.open and slot.lease_rater_id is None
        again = answer(client, slug, rater, second, "left").json()
        assert again["replayed"] is True and again["answered"] == 2
        state = answer(client, slug, rater, again["comparison"]["query_id"]).json()
        state = answer(client, slug, rater, state["comparison"]["query_id"]).json()
        assert state["answered"] == 4 and state["complete"] is True
        assert state["comparison"] is None and state["completion_code"]
        assert len(triplets(app, project_id)) == 3


def test_a_raters_answers_attention_checks_and_times_are_one_click_away(app, client, auth, study):
    """The rater's own page and GET .../raters/{id}/answers: each answer with what was
    asked, the choice and the time; attention checks with their result."""
    project_id, slug, keys = study
    configure(client, auth, project_id, attention_rate=0.5, random_share=0.5)
    rater, state = join(client, slug, participant="pat")
    chosen = []
    for turn in range(12):
        comparison = state["comparison"]
        anchor = comparison["anchor"]["key"]
        # Right on a check when told to, else the left candidate.
        side = "right" if comparison["right"]["key"] == anchor else "left"
        if comparison["left"]["key"] == anchor and turn % 3 == 0:
            side = "right"  # a wrong answer to a check, now and then
        state = answer(
            client, slug, rater, comparison["query_id"], side, response_time_ms=900 + 100 * turn
        ).json()
        chosen.append((comparison, side))
    listed = client.get(f"{API}/projects/{project_id}/raters", headers=auth).json()
    rater_id = listed[0]["id"]
    found = client.get(f"{API}/projects/{project_id}/raters/{rater_id}/answers", headers=auth)
    assert found.status_code == 200, found.text
    body = found.json()
    assert len(body["answers"]) == 12
    for (comparison, side), shown in zip(reversed(chosen), body["answers"], strict=True):
        assert shown["anchor"] == comparison["anchor"]["key"]
        assert (shown["left"], shown["right"]) == (
            comparison["left"]["key"],
            comparison["right"]["key"],
        )
        assert shown["chosen"] == comparison[side]["key"]
        if shown["purpose"] == "attention check":
            assert shown["passed"] is (shown["chosen"] == shown["anchor"])
        else:
            assert shown["passed"] is None
    checks = [a for a in body["answers"] if a["purpose"] == "attention check"]
    assert checks, "half the comparisons are checks"
    rater_row = client.get(f"{API}/projects/{project_id}/raters/{rater_id}", headers=auth).json()
    assert rater_row["attention_passed"] == sum(a["passed"] for a in checks)
    assert rater_row["attention_failed"] == sum(not a["passed"] for a in checks)
    times = body["response_times"]
    assert times["timed"] == 12 and times["median"] == pytest.approx(1.45)
    assert times["p25"] < times["median"] < times["p75"]

    page = client.get(f"/projects/{project_id}/raters/{rater_id}", headers=auth)
    assert page.status_code == 200
    assert page.text.count("<tr") == 13 and "attention check" in page.text
    raters_page = client.get(f"/projects/{project_id}/raters", headers=auth).text
    assert f'href="/projects/{project_id}/raters/{rater_id}"' in raters_page
    other = client.get(f"{API}/projects/{project_id}/raters/{rater_id + 999}/answers", headers=auth)
    assert other.status_code == 404


@pytest.mark.parametrize("spread", [1_000, 10**9])
def test_answers_to_one_query_are_counted_together_however_far_apart_the_item_ids(spread):
    """Agreement groups answers by query: packed into one key where the project's ids
    fit it, by their ranks where they are spread wider (ids from a long-lived database)."""
    from app.raters.service import _query_numbers

    rng = np.random.default_rng(1)
    anchor, lo, hi = (rng.integers(0, spread, 20_000) for _ in range(3))
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    for column in (anchor, lo, hi):
        column[:5_000] = column[5_000:10_000]  # a quarter of the answers repeat a query
    expected = np.unique(np.stack([anchor, lo, hi], axis=1), axis=0, return_inverse=True)[1]
    assert np.array_equal(_query_numbers(anchor, lo, hi), expected.ravel())


def test_a_process_reads_a_studys_items_again_only_once_they_changed(app, study, monkeypatch):
    """Random questions draw from each process's copy of the study's item ids; after it
    expires, the same count and newest id keep it (a re-read of 50,000 ids held a web
    process for most of a second), and a new item is read in."""
    from app.scheduling import study_items

    project_id, _, keys = study
    monkeypatch.setattr(study_items, "ITEM_CACHE_SECONDS", 0.0)  # always expired
    ids = study_items._ItemIds()
    with app.state.session_factory() as session:
        project = session.get(Project, project_id)
        first = ids.get(session, project)
        assert len(first) == len(keys)
        assert ids.get(session, project) is first
    with unit_of_work(app.state.session_factory) as session:
        session.add(Item(project_id=project_id, key="arrived-later"))
    with app.state.session_factory() as session:
        again = ids.get(session, session.get(Project, project_id))
    assert len(again) == len(first) + 1


def test_a_large_crowd_is_listed_a_page_at_a_time(client, auth, study):
    """GET .../raters with limit and offset: the raters in the order they joined, a page
    at a time, together the same as the whole list; a limit past 10,000 is refused."""
    project_id, slug, _ = study
    for participant in ("ann", "bob", "cy", "di", "ed"):
        join(client, slug, participant=participant)
    url = f"{API}/projects/{project_id}/raters"
    everyone = client.get(url, headers=auth).json()
    assert [r["external_id"] for r in everyone] == ["ann", "bob", "cy", "di", "ed"]
    pages = [
        client.get(url, params={"limit": 2, "offset": offset}, headers=auth).json()
        for offset in (0, 2, 4, 6)
    ]
    assert [len(page) for page in pages] == [2, 2, 1, 0]
    assert sum(pages, []) == everyone
    refused = client.get(url, params={"limit": 10_001}, headers=auth)
    assert refused.status_code == 422 and "limit" in refused.text


def test_each_comparison_names_the_items_of_the_one_likely_next(app, client, auth, study):
    """The state names the items of the comparison likely next (`upcoming`: drawn as the
    one on screen was served), so that a page loads them while the rater answers.
    Without a build every next comparison is the one named, a repeated question (the
    noise ceiling's) included, and a reload names the same; with a build's queue open,
    the queue's turns name none (a build's question is chosen at the answer) and the
    checks and random questions come as named."""
    project_id, slug, _ = study
    configure(
        client,
        auth,
        project_id,
        random_share=0.9,
        attention_rate=0.1,
        answers_per_rater=0,
        repeat_share=0.5,  # about one serving in two repeats a question
    )
    app.state.scheduler_random = random.Random(20261207)  # a repeat is never missed by chance

    def items(comparison) -> set[str]:
        return {comparison[side]["key"] for side in ("anchor", "left", "right")}

    rater, state = join(client, slug)
    for number in range(30):
        named = {item["key"] for item in state["upcoming"]}
        if number % 10 == 5:  # a reload: the same comparison, the same named next
            again = client.get(f"{API}/rate/{slug}/next", headers=rater).json()
            assert again["comparison"] == state["comparison"]
            assert again["upcoming"] == state["upcoming"]
        state = answer(client, slug, rater, state["comparison"]["query_id"], "left").json()
        assert named and items(state["comparison"]) == named
    with app.state.session_factory() as session:
        purposes = session.scalars(
            select(Assignment.purpose).where(Assignment.project_id == project_id)
        ).all()
    assert purposes.count(int(Purpose.repeat)) >= 5, purposes

    configure(client, auth, project_id, random_share=0.3, repeat_share=0)
    start_build(client, auth, project_id, n_trees=2, answers_per_query=2, random_state=0)
    # The comparison on screen named its next before the build opened the queue: that
    # one may be a build's question instead.
    state = answer(client, slug, rater, state["comparison"]["query_id"], "left").json()
    came_as_named = named_none = 0
    for _ in range(40):
        named = {item["key"] for item in state["upcoming"]}
        state = answer(client, slug, rater, state["comparison"]["query_id"], "left").json()
        if named:
            assert items(state["comparison"]) == named
            came_as_named += 1
        else:
            named_none += 1
    assert came_as_named >= 4 and named_none >= 15


def test_a_screen_study_names_the_items_of_its_next_screen(client, auth, study):
    """A rank study's state names the reference and items of the screen likely next,
    and that screen comes (no build: every turn is drawn ahead)."""
    project_id, slug, _ = study
    configure(
        client,
        auth,
        project_id,
        judgement="rank",
        shown=4,
        picks=2,
        random_share=0.3,
        attention_rate=0.2,
        answers_per_rater=0,
    )
    rater, state = join(client, slug)
    for _ in range(12):
        comparison = state["comparison"]
        named = {item["key"] for item in state["upcoming"]}
        picks = list(dict.fromkeys(item["key"] for item in comparison["items"]))[:2]
        sent = {"query_id": comparison["query_id"], "picks": picks}
        response = client.post(f"{API}/rate/{slug}/answers", headers=rater, json=sent)
        assert response.status_code == 200, response.text
        state = response.json()
        shown = state["comparison"]
        assert named == {shown["reference"]["key"], *(item["key"] for item in shown["items"])}

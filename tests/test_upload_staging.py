"""Issue 15, hole 8: a large triplet upload commits chunk by chunk so that raters' answers
get through on SQLite, yet nobody sees it before it is published, a rejected one leaves
nothing behind, and the worker removes what a crashed one left."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import delete, func, select

from app.core.db import unit_of_work
from app.models import Rater, Triplet, TripletSource, Upload, UploadKind
from app.models._types import utcnow
from app.triplets import bulk, tally
from app.triplets.bulk import TripletWriter
from app.triplets.jobs import remove_abandoned_uploads
from app.triplets.log import committed_bound
from app.triplets.service import _BATCH as CHUNK
from tests.support.links import open_link
from tests.support.uploads import upload

API = "/api/v1"
KEYS = [f"k{n}" for n in range(40)]


@pytest.fixture
def settings(settings):
    settings.max_upload_bytes = 64 * 1024 * 1024  # the large uploads below
    return settings


@pytest.fixture
def pid(client, auth, project):
    items = "key\n" + "\n".join(KEYS) + "\n"
    assert upload(client, auth, project["id"], "items", "items.csv", items).status_code == 201
    return project["id"]


def triplet_count(client, auth, pid):
    return client.get(f"{API}/projects/{pid}", headers=auth).json()["triplet_count"]


def rows(count: int, rater_every: int = 0) -> str:
    header = "anchor,closer,farther" + (",rater" if rater_every else "") + "\n"
    lines = []
    for i in range(count):
        line = f"{KEYS[i % 40]},{KEYS[(i + 1) % 40]},{KEYS[(i + 2) % 40]}"
        if rater_every:
            line += f",uploaded-{i // rater_every}"
        lines.append(line)
    return header + "\n".join(lines) + "\n"


def exported_rows(client, auth, pid) -> int:
    response = client.get(f"{API}/projects/{pid}/triplets/export?format=csv", headers=auth)
    return len(response.text.splitlines()) - 1


def test_a_rejected_upload_past_its_first_chunks_changes_nothing(client, auth, pid):
    """Three chunks are committed before the bad last row is read: the 422 takes them
    out again, with the raters they named, and the same Idempotency-Key then works."""
    good = rows(3 * CHUNK + 5, rater_every=CHUNK)
    bad = good + "k0,k1,no-such-item,uploaded-9\n"
    key = {"Idempotency-Key": "the-big-one"}
    rejected = upload(client, auth, pid, "triplets", "t.csv", bad, headers=key)
    assert rejected.status_code == 422, rejected.text
    expected = (
        f"t.csv, row {3 * CHUNK + 7}, column 'farther': unknown item 'no-such-item' "
        "(not in this project)"
    )
    assert [p["msg"] for p in rejected.json()["detail"]] == [expected]
    assert triplet_count(client, auth, pid) == 0
    assert exported_rows(client, auth, pid) == 0
    assert client.get(f"{API}/projects/{pid}/raters", headers=auth).json() == []
    accepted = upload(client, auth, pid, "triplets", "t.csv", good, headers=key)
    assert accepted.status_code == 201, accepted.text
    assert triplet_count(client, auth, pid) == 3 * CHUNK + 5
    raters = client.get(f"{API}/projects/{pid}/raters", headers=auth).json()
    assert sorted(r["external_id"] for r in raters) == [f"uploaded-{n}" for n in range(4)]


def _stage_chunk(sessions, pid, item_ids, count) -> int:
    """What an upload in progress has committed: one chunk of an unpublished upload."""
    with unit_of_work(sessions) as session:
        staged = Upload(project_id=pid, kind=UploadKind.triplets, filename="slow.csv")
        session.add(staged)
        session.flush()
        writer = TripletWriter(session, pid, upload=staged)
        a, c, f = (writer.encode(i) for i in item_ids[:3])
        now = writer.encode(utcnow())
        row = (writer.encode(pid), a, c, f, writer.encode("upload"), writer.encode(staged.id), now)
        writer.write([row] * count, commit=True)
        return staged.id


def _item_ids(sessions, pid) -> list[int]:
    from app.models import Item

    with sessions() as session:
        return list(session.scalars(select(Item.id).where(Item.project_id == pid)))


def _answer(sessions, pid, item_ids) -> None:
    """An answer arriving while the upload runs (appended as the answer path does)."""
    from sqlalchemy import insert

    from app.triplets.log import hold_append_lock

    with unit_of_work(sessions) as session:
        hold_append_lock(session, pid)
        session.execute(
            insert(Triplet),
            [
                {
                    "project_id": pid,
                    "anchor_id": item_ids[3],
                    "closer_id": item_ids[4],
                    "farther_id": item_ids[5],
                    "source": TripletSource.rater,
                }
            ],
        )


def test_an_upload_in_progress_is_read_by_nobody_until_it_is_published(app, client, auth, pid):
    sessions = app.state.session_factory
    item_ids = _item_ids(sessions, pid)
    _answer(sessions, pid, item_ids)
    upload_id = _stage_chunk(sessions, pid, item_ids, 500)
    _answer(sessions, pid, item_ids)  # after the upload's first rows
    assert triplet_count(client, auth, pid) == 2
    assert exported_rows(client, auth, pid) == 2
    with sessions() as session:
        bound = committed_bound(session, pid)
        first = session.get(Upload, upload_id).first_triplet_id
        # Builds and fits read in id order up to the bound: it stays below the upload,
        # so the later answer is read after the upload's rows, not skipped.
        assert bound == first - 1
    with unit_of_work(sessions) as session:
        session.get(Upload, upload_id).pending = False
    assert triplet_count(client, auth, pid) == 502
    assert exported_rows(client, auth, pid) == 502
    with sessions() as session:
        newest = session.scalar(select(func.max(Triplet.id)).where(Triplet.project_id == pid))
        assert committed_bound(session, pid) == newest


def test_the_worker_removes_what_a_crashed_upload_left(app, client, auth, pid):
    sessions = app.state.session_factory
    item_ids = _item_ids(sessions, pid)
    upload_id = _stage_chunk(sessions, pid, item_ids, 700)
    _answer(sessions, pid, item_ids)
    remove_abandoned_uploads(sessions)  # still fresh: another process may be writing it
    with sessions() as session:
        assert session.get(Upload, upload_id) is not None
    with unit_of_work(sessions) as session:
        session.get(Upload, upload_id).touched_at = utcnow() - timedelta(hours=1)
    remove_abandoned_uploads(sessions)
    with sessions() as session:
        assert session.get(Upload, upload_id) is None
        left = session.scalar(select(func.count()).where(Triplet.project_id == pid))
        assert left == 1  # the answer stays
        assert session.scalar(select(func.count()).select_from(Rater)) == 0
    assert triplet_count(client, auth, pid) == 1


def test_workers_racing_to_remove_a_crashed_upload_publish_none_of_it(
    app, client, auth, pid, monkeypatch
):
    """Issue 32, hole 0: every worker looks for abandoned uploads each minute. Two that
    discarded the same one at once each saw a batch come back short (the other had taken
    rows), took that for the end and deleted the upload, which published the rest: on
    PostgreSQL 1.5 M half-imported rows became answers, and tallies counted rows that
    were deleted a moment later. Now one worker claims it and the others pass."""
    monkeypatch.setattr(bulk, "DISCARD_BATCH", 100)  # many batches, many chances to race
    sessions = app.state.session_factory
    item_ids = _item_ids(sessions, pid)
    _answer(sessions, pid, item_ids)
    crashed = [_stage_chunk(sessions, pid, item_ids, 3_000) for _ in range(2)]
    with unit_of_work(sessions) as session:
        for upload_id in crashed:
            session.get(Upload, upload_id).touched_at = utcnow() - timedelta(hours=1)
    workers = 6
    start = threading.Barrier(workers)
    failures = []

    def worker():
        start.wait()
        try:
            remove_abandoned_uploads(sessions)
            with unit_of_work(sessions) as session:
                tally.advance(session, pid)  # a tally run straight after, as the worker's
        except Exception as error:
            failures.append(error)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Upload)) == 1  # the items'
        left = session.scalar(select(func.count()).where(Triplet.project_id == pid))
    assert left == 1  # the answer, and not one row of the crashed uploads
    with unit_of_work(sessions) as session:
        tally.advance(session, pid)
        assert tally.answer_count(session, pid) == 1
    assert triplet_count(client, auth, pid) == 1
    assert exported_rows(client, auth, pid) == 1
    assert failures == []


def test_a_discard_that_dies_is_finished_by_a_later_worker(app, client, auth, pid, monkeypatch):
    """A claimant that stops mid-way leaves the upload pending (its rows unpublished);
    once its claim is stale another worker finishes the job."""
    monkeypatch.setattr(bulk, "DISCARD_BATCH", 100)
    sessions = app.state.session_factory
    item_ids = _item_ids(sessions, pid)
    upload_id = _stage_chunk(sessions, pid, item_ids, 1_000)
    with unit_of_work(sessions) as session:
        session.get(Upload, upload_id).touched_at = utcnow() - timedelta(hours=1)
    with sessions() as session:
        assert bulk.claim_abandoned_upload(session, upload_id)
        assert not bulk.claim_abandoned_upload(session, upload_id)  # one claimant only
        session.execute(
            delete(Triplet).where(
                Triplet.id.in_(select(Triplet.id).where(Triplet.upload_id == upload_id).limit(400))
            )
        )
        session.commit()  # ... and the claimant's process died here
    remove_abandoned_uploads(sessions)  # its claim is fresh: nobody else touches it
    with sessions() as session:
        assert session.get(Upload, upload_id).pending
    assert triplet_count(client, auth, pid) == 0
    with unit_of_work(sessions) as session:
        session.get(Upload, upload_id).touched_at = utcnow() - timedelta(hours=1)
    remove_abandoned_uploads(sessions)
    with sessions() as session:
        assert session.get(Upload, upload_id) is None
        assert session.scalar(select(func.count()).where(Triplet.project_id == pid)) == 0


def test_answers_get_through_while_a_large_upload_runs(client, auth, pid, monkeypatch):
    """Before, one transaction held SQLite's write lock for the whole upload: an answer
    waited for its end (106 s for 10M rows) or failed. Now each waits for a chunk at
    most: with the upload held between its chunks, answers are stored, and the upload
    then ends whole. On PostgreSQL, writers never waited for each other; it must hold
    there too."""
    rating = client.patch(
        f"{API}/projects/{pid}/rating", json={"answers_per_rater": 10_000}, headers=auth
    )
    slug = open_link(client, auth, pid)["public_slug"]
    assert rating.status_code == 200
    joined = client.post(f"{API}/rate/{slug}/raters", json={}).json()
    token = {"X-Rater-Token": joined["rater_token"]}
    between_chunks, go_on = threading.Event(), threading.Event()
    commit_chunk = TripletWriter._commit_chunk

    def held_after_its_first_chunk(writer):
        commit_chunk(writer)
        if not between_chunks.is_set():
            between_chunks.set()
            assert go_on.wait(60), "the test never let the upload go on"

    monkeypatch.setattr(TripletWriter, "_commit_chunk", held_after_its_first_chunk)
    result = {}

    def big_upload():
        result["response"] = upload(client, auth, pid, "triplets", "big.csv", rows(3 * CHUNK))

    uploader = threading.Thread(target=big_upload)
    uploader.start()
    try:
        assert between_chunks.wait(60), "the upload never committed a chunk"
        for _ in range(5):
            state = client.get(f"{API}/rate/{slug}/next", headers=token).json()
            body = {"query_id": state["comparison"]["query_id"], "choice": "left"}
            answered = client.post(f"{API}/rate/{slug}/answers", headers=token, json=body)
            assert answered.status_code == 200, answered.text
        assert uploader.is_alive()  # the answers came in while it held its second chunk
    finally:
        go_on.set()
        uploader.join(60)
    assert not uploader.is_alive()
    assert result["response"].status_code == 201, result["response"].text
    # Every upload row, and the answers (attention checks store no triplet).
    assert 3 * CHUNK < triplet_count(client, auth, pid) <= 3 * CHUNK + 5

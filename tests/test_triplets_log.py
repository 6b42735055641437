"""The triplets log read by id on PostgreSQL: a reader never moves past an answer that a
slower transaction is still writing, never makes a writer wait, and finds a bound while
answers stream in without a pause."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import insert, text

from app.core import migrations
from app.core.db import make_engine, make_session_factory, unit_of_work
from app.models import Project, Researcher, Triplet, TripletSource
from app.triplets.log import answer_columns, committed_bound, hold_append_lock


def _project_and_row(sessions, source: TripletSource) -> tuple[int, dict]:
    """A new project's id, and a triplet row of it to insert."""
    with unit_of_work(sessions) as session:
        owner = Researcher(name="r")
        session.add(owner)
        session.flush()
        project = Project(owner_id=owner.id, name="p")
        session.add(project)
        session.flush()
        project_id = project.id
    row = {"project_id": project_id, "anchor_id": 1, "closer_id": 2, "farther_id": 3}
    return project_id, {**row, "source": source}


def test_a_write_in_flight_holds_the_readers_bound_back(make_database_url):
    url = make_database_url("postgresql", "log")
    migrations.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    try:
        project_id, row = _project_and_row(sessions, TripletSource.upload)
        slow = sessions()
        hold_append_lock(slow, project_id)
        slow.execute(insert(Triplet), [row])  # takes an id, not committed yet
        with unit_of_work(sessions) as quick:
            hold_append_lock(quick, project_id)  # writers never wait for each other
            quick.execute(insert(Triplet), [row])  # a higher id, committed first
        with sessions() as reader:
            # A reader queued behind the slow one's lock would fail here, not wait on.
            reader.execute(text("SET LOCAL lock_timeout = '30s'"))
            assert committed_bound(reader, project_id) is None  # not past the slow one
        slow.commit()
        slow.close()
        with sessions() as reader:
            assert committed_bound(reader, project_id) == 2
    finally:
        engine.dispose()


def test_a_reader_finds_a_bound_while_writers_always_hold_the_log(make_database_url):
    """Four writers append answers back to back, each holding the log a few milliseconds,
    so that some writer always holds it: the reader still reads a bound each time (it
    had found none for minutes, and a build waited), and it takes no lock that a writer
    could wait for."""
    url = make_database_url("postgresql", "log_stream")
    migrations.upgrade(url)
    engine = make_engine(url, pool_size=8)
    sessions = make_session_factory(engine)
    stop = threading.Event()
    try:
        project_id, row = _project_and_row(sessions, TripletSource.rater)

        def writer() -> None:
            while not stop.is_set():
                with unit_of_work(sessions) as session:
                    hold_append_lock(session, project_id)
                    session.execute(insert(Triplet), [row])
                    time.sleep(0.004)  # the rest of the answer's transaction

        writers = [threading.Thread(target=writer) for _ in range(4)]
        for thread in writers:
            thread.start()
        time.sleep(0.2)
        bounds, held = [], []
        for _ in range(10):
            with sessions() as reader:
                bounds.append(committed_bound(reader, project_id))
                held.append(reader.scalar(_LOCKS_HELD))
            time.sleep(0.02)
    finally:
        stop.set()
        for thread in writers:
            thread.join()
        engine.dispose()
    assert None not in bounds, bounds
    assert bounds == sorted(bounds) and bounds[-1] > bounds[0]
    assert held == [0] * 10  # the reader holds no lock on the log: no writer waits for it


_LOCKS_HELD = text(
    "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"
)


def _waiting_reader(monkeypatch):
    """An event set once a reader of the log waits for a writer (its first pause)."""
    from app.triplets import log

    waiting = threading.Event()

    class _Clock:
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            waiting.set()
            time.sleep(seconds)

    monkeypatch.setattr(log, "time", _Clock)
    return waiting


def _log_on_postgres(make_database_url, name):
    url = make_database_url("postgresql", name)
    migrations.upgrade(url)
    engine = make_engine(url, pool_size=8)
    return engine, make_session_factory(engine)


def _bound_in_thread(sessions, project_id) -> tuple[threading.Thread, list]:
    found: list = []

    def read() -> None:
        with sessions() as reader:
            found.append(committed_bound(reader, project_id))

    thread = threading.Thread(target=read)
    thread.start()
    return thread, found


def test_a_reader_waiting_for_a_slow_write_holds_no_answer_up(make_database_url, monkeypatch):
    """While a reader waits for a slower transaction, answers still take the log at once
    (a reader that queued for the log exclusively held every answer behind it back), and
    the reader gets its bound as soon as the slow transaction commits."""
    from sqlalchemy import text

    from app.triplets import log

    monkeypatch.setattr(log, "WAIT_MS", 20_000)  # however slow this machine is now
    waiting = _waiting_reader(monkeypatch)
    engine, sessions = _log_on_postgres(make_database_url, "log_nowait")
    try:
        project_id, row = _project_and_row(sessions, TripletSource.upload)
        slow = sessions()
        hold_append_lock(slow, project_id)
        slow.execute(insert(Triplet), [row])
        with unit_of_work(sessions) as quick:
            hold_append_lock(quick, project_id)
            quick.execute(insert(Triplet), [row])
        reading, found = _bound_in_thread(sessions, project_id)
        assert waiting.wait(30), "the reader never waited for the slow transaction"
        with unit_of_work(sessions) as answer:
            answer.execute(text("SET LOCAL lock_timeout = '5ms'"))
            hold_append_lock(answer, project_id)  # would time out behind a queued reader
            answer.execute(insert(Triplet), [row])
        assert reading.is_alive() and found == []
        slow.commit()
        slow.close()
        reading.join(30)
        assert found == [2]  # not the answer after it: that one was not waited for
    finally:
        engine.dispose()


def test_an_upload_whose_chunk_commits_while_a_reader_waits_is_not_skipped(
    make_database_url, monkeypatch
):
    """An upload's first chunk, still in flight, holds ids below an answer committed
    after it. The reader waits for the chunk, and then finds the upload pending: its
    bound stays below the upload's rows, which it would otherwise pass for good."""
    from app.models import Upload, UploadKind
    from app.triplets import log

    monkeypatch.setattr(log, "WAIT_MS", 20_000)
    waiting = _waiting_reader(monkeypatch)
    engine, sessions = _log_on_postgres(make_database_url, "log_upload")
    try:
        project_id, row = _project_and_row(sessions, TripletSource.upload)
        with unit_of_work(sessions) as earlier:
            earlier.execute(insert(Triplet), [row])
        chunk = sessions()
        hold_append_lock(chunk, project_id)
        floor = log.newest_id(chunk, project_id)
        upload = Upload(project_id=project_id, kind=UploadKind.triplets)
        chunk.add(upload)
        chunk.flush()
        chunk.execute(insert(Triplet), [{**row, "upload_id": upload.id}] * 3)
        upload.pending, upload.first_triplet_id = True, floor + 1
        chunk.flush()
        with unit_of_work(sessions) as answer:
            hold_append_lock(answer, project_id)
            answer.execute(insert(Triplet), [{**row, "source": TripletSource.rater}])
        reading, found = _bound_in_thread(sessions, project_id)
        assert waiting.wait(30), "the reader never waited for the upload's chunk"
        chunk.commit()
        chunk.close()
        reading.join(30)
        assert found == [floor]
    finally:
        engine.dispose()


def test_a_reader_in_the_transaction_that_appended_does_not_wait_for_itself(
    make_database_url,
):
    """A routing step appends its questions' answers and reads the log in one transaction."""
    engine, sessions = _log_on_postgres(make_database_url, "log_self")
    try:
        project_id, row = _project_and_row(sessions, TripletSource.oracle)
        with unit_of_work(sessions) as step:
            hold_append_lock(step, project_id)
            step.execute(insert(Triplet), [row, row])
            # Waiting for itself, it would give up after WAIT_MS with no bound (None).
            assert committed_bound(step, project_id) == 2
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_answer_columns_read_what_the_orm_reads(make_database_url, backend, monkeypatch):
    """The driver-level reader fits use gives the rows an ORM query gives: in id order, up
    to the cut-off, only the project's own, the test split apart, excluded raters out;
    read in windows of ids (small here, to read many), rows the database keeps out of id
    order (updated on PostgreSQL: the new versions sit at the table's end) in order."""
    import numpy as np
    from sqlalchemy import select, text, update

    from app.triplets import log

    monkeypatch.setattr(log, "_WINDOW", 700)

    url = make_database_url(backend, "columns")
    migrations.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    rng = np.random.default_rng(0)
    try:
        with unit_of_work(sessions) as session:
            owner = Researcher(name="r")
            session.add(owner)
            session.flush()
            projects = [Project(owner_id=owner.id, name=name) for name in ("a", "b")]
            session.add_all(projects)
            session.flush()
            ids = [project.id for project in projects]
            rows = [
                {
                    "project_id": ids[int(rng.integers(2))],
                    "anchor_id": int(rng.integers(1, 2**40)),
                    "closer_id": int(rng.integers(1, 1000)),
                    "farther_id": int(rng.integers(1, 1000)),
                    "source": TripletSource.rater,
                    "rater_id": None if rng.random() < 0.3 else int(rng.integers(1, 50)),
                    "is_test": bool(rng.random() < 0.1),
                }
                for _ in range(5000)
            ]
            session.execute(insert(Triplet), rows)
        with unit_of_work(sessions) as session:
            session.execute(
                update(Triplet).where(Triplet.id % 3 == 0).values(response_time_ms=1000)
            )
        columns = (Triplet.id, Triplet.anchor_id, Triplet.closer_id, Triplet.farther_id)
        with sessions() as session:
            if backend == "postgresql":  # read the table in its own order, not an index's
                session.execute(text("SET LOCAL enable_indexscan = off"))
                session.execute(text("SET LOCAL enable_bitmapscan = off"))
            everything = session.execute(select(Triplet.id).order_by(Triplet.id)).all()
            cutoff = everything[3000].id
            for project_id in ids:
                for test_split, excluded in ((False, ()), (True, ()), (False, (3, 7, 11))):
                    query = select(*columns).where(
                        Triplet.project_id == project_id,
                        Triplet.id <= cutoff,
                        Triplet.is_test.is_(test_split),
                    )
                    if excluded:
                        query = query.where(
                            Triplet.rater_id.is_(None) | Triplet.rater_id.not_in(excluded)
                        )
                    expected = session.execute(query.order_by(Triplet.id)).all()
                    found = answer_columns(
                        session,
                        project_id,
                        cutoff,
                        test_split=test_split,
                        excluded_raters=excluded,
                    )
                    assert len(expected) > 50
                    names = ("id", "anchor_id", "closer_id", "farther_id")
                    got = list(zip(*(found[name].tolist() for name in names), strict=True))
                    assert got == [tuple(row) for row in expected]
                    assert all(column.dtype == np.int64 for column in found.values())
            assert all(len(c) == 0 for c in answer_columns(session, ids[0], 0).values())
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_answers_about_the_projects_items_map_to_positions(make_database_url, backend):
    """What a fit gets: positions of known items, in id order, the test split apart; an
    answer naming an item deleted since (below or above the project's ids) is left out."""
    import numpy as np
    from sqlalchemy import select

    from app.models import Item
    from app.training.runs import _answers

    url = make_database_url(backend, "positions")
    migrations.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    rng = np.random.default_rng(1)
    try:
        project_id, _ = _project_and_row(sessions, TripletSource.upload)
        with unit_of_work(sessions) as session:
            items = [Item(project_id=project_id, key=f"k{i}") for i in range(50)]
            session.add_all(items)
            session.flush()
            ids = np.array(sorted(item.id for item in items))
            gone = [int(ids[0]) - 1, int(ids[-1]) + 7]  # items deleted since
            chosen = ids[rng.integers(0, 50, (3000, 3))]
            chosen[::97, 1] = gone[0]
            chosen[5::101, 2] = gone[1]
            test = rng.random(3000) < 0.1
            session.execute(
                insert(Triplet),
                [
                    {
                        "project_id": project_id,
                        "anchor_id": int(a),
                        "closer_id": int(c),
                        "farther_id": int(f),
                        "source": TripletSource.upload,
                        "is_test": bool(t),
                    }
                    for (a, c, f), t in zip(chosen, test, strict=True)
                ],
            )
        with sessions() as session:
            stored = np.array(
                session.execute(
                    select(Triplet.id, Triplet.anchor_id, Triplet.closer_id, Triplet.farther_id)
                    .where(Triplet.project_id == project_id)
                    .order_by(Triplet.id)
                ).all()
            )
            answer_ids, answers, held = _answers(session, project_id, int(stored[-1, 0]), ids)
        known = np.isin(stored[:, 1:], ids).all(axis=1)
        assert (~known).sum() > 40
        expected = np.searchsorted(ids, stored[:, 1:])
        assert np.array_equal(answer_ids, stored[known & ~test, 0])
        assert np.array_equal(answers, expected[known & ~test])
        assert np.array_equal(held, expected[known & test])
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_read_of_every_published_answer_leaves_a_pending_uploads_rows_out(
    make_database_url, backend
):
    """Raters' agreement reads every answer through `published_columns`: rows of an
    upload still pending (or crashed half-way) are not answers yet."""
    from app.models import Upload, UploadKind
    from app.triplets.log import published_columns

    url = make_database_url(backend, "published")
    migrations.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    try:
        project_id, row = _project_and_row(sessions, TripletSource.upload)
        with unit_of_work(sessions) as session:
            done = Upload(project_id=project_id, kind=UploadKind.triplets)
            pending = Upload(project_id=project_id, kind=UploadKind.triplets, pending=True)
            session.add_all([done, pending])
            session.flush()
            session.execute(
                insert(Triplet),
                [
                    {**row, "upload_id": done.id},
                    {**row, "upload_id": pending.id, "anchor_id": 4},
                    {**row, "rater_id": None, "anchor_id": 5},
                ],
            )
        with sessions() as session:
            ids, anchors, raters = published_columns(
                session, project_id, ("id", "anchor_id", "coalesce(rater_id, -1)")
            )
        assert anchors.tolist() == [1, 5] and raters.tolist() == [-1, -1]
        assert ids.tolist() == sorted(ids.tolist())
    finally:
        engine.dispose()

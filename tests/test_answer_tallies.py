"""The hourly answer tallies give the same counts as counting the answers, however the
worker's rounds fall: before, between and after them, with an upload in progress, and
with two workers at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from app.core.db import unit_of_work
from app.models import AnswerTally, Item, Project, Triplet, TripletSource, Upload, UploadKind
from app.projects.service import delete_project
from app.triplets import tally
from app.triplets.log import published


def _items(session, project_id: int) -> list[int]:
    items = [Item(project_id=project_id, key=f"i{n}") for n in range(4)]
    session.add_all(items)
    session.flush()
    return [item.id for item in items]


def _answers(session, project_id, ids, stamps, source=TripletSource.rater, upload=None):
    session.add_all(
        Triplet(
            project_id=project_id,
            anchor_id=ids[0],
            closer_id=ids[1],
            farther_id=ids[2],
            source=source,
            created_at=stamp,
            upload_id=upload,
        )
        for stamp in stamps
    )
    session.flush()


def _brute(session, project_id, first_hour, hours, source):
    counts = [0] * hours
    for stamp in session.scalars(
        select(Triplet.created_at).where(
            Triplet.project_id == project_id, Triplet.source == source, published(project_id)
        )
    ):
        slot = int((stamp - first_hour) / timedelta(hours=1))
        if 0 <= slot < hours:
            counts[slot] += 1
    total = session.scalar(
        select(func.count()).where(Triplet.project_id == project_id, published(project_id))
    )
    return total, counts


def test_tallies_count_what_counting_counts_at_every_step(app, project):
    sessions = app.state.session_factory
    pid = project["id"]
    now = datetime.now(UTC).replace(minute=30)
    first_hour = (now - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    with unit_of_work(sessions) as session:
        ids = _items(session, pid)
        _answers(
            session,
            pid,
            ids,
            [now - timedelta(hours=h, minutes=m) for h in range(4) for m in (1, 7)],
        )
        _answers(session, pid, ids, [now] * 3, source=TripletSource.upload)

    def check():
        with unit_of_work(sessions) as session:
            total, hourly = _brute(session, pid, first_hour, 6, TripletSource.rater)
            assert tally.answer_count(session, pid) == total
            assert (
                tally.answers_per_hour(session, pid, first_hour, 6, TripletSource.rater) == hourly
            )

    check()  # nothing tallied yet: all counted live
    with unit_of_work(sessions) as session:
        assert tally.advance(session, pid) == 11
    check()
    with unit_of_work(sessions) as session:
        assert tally.advance(session, pid) == 0  # nothing new
        _answers(session, pid, ids, [now, now - timedelta(hours=2)])
    check()  # two after the cursor, counted live
    # An upload in progress is counted by nobody, tallied by nobody, until published.
    with unit_of_work(sessions) as session:
        upload = Upload(project_id=pid, kind=UploadKind.triplets, pending=True)
        session.add(upload)
        session.flush()
        floor = session.scalar(select(func.max(Triplet.id))) + 1
        upload.first_triplet_id = floor
        _answers(session, pid, ids, [now] * 5, upload=upload.id)
        _answers(session, pid, ids, [now])  # an answer during the upload
        upload_id = upload.id
    with unit_of_work(sessions) as session:
        assert tally.advance(session, pid) == 2  # up to the upload only
    check()
    with unit_of_work(sessions) as session:
        session.get(Upload, upload_id).pending = False
    check()
    with unit_of_work(sessions) as session:
        assert tally.advance(session, pid) == 6
    check()
    with unit_of_work(sessions) as session:
        assert tally.answer_count(session, pid) == 8 + 3 + 2 + 5 + 1


def test_two_workers_never_tally_an_answer_twice(app, project, monkeypatch):
    sessions = app.state.session_factory
    pid = project["id"]
    with unit_of_work(sessions) as session:
        ids = _items(session, pid)
        _answers(session, pid, ids, [datetime.now(UTC)] * 7)
    first, second = sessions(), sessions()
    try:
        done = [tally.advance(first, pid)]
        first.commit()
        # The second read the cursor before the first moved it: its claim finds the
        # cursor moved, and it tallies nothing.
        monkeypatch.setattr(tally, "_cursor", lambda session, project_id: 0)
        done.append(tally.advance(second, pid))
        second.commit()
        monkeypatch.undo()
    finally:
        first.close()
        second.close()
    assert sorted(done) == [0, 7]
    with unit_of_work(sessions) as session:
        assert session.scalar(select(func.sum(AnswerTally.answers))) == 7
        assert tally.answer_count(session, pid) == 7
        delete_project(session=session, store=app.state.images, project=session.get(Project, pid))
    with unit_of_work(sessions) as session:
        assert session.scalar(select(func.count()).select_from(AnswerTally)) == 0

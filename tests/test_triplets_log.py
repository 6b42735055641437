"""The triplets log read by id on PostgreSQL: a reader never moves past an answer that a
slower transaction is still writing, and never makes writers wait."""

from __future__ import annotations

import time

from sqlalchemy import insert

from app.core import migrations
from app.core.db import make_engine, make_session_factory, unit_of_work
from app.models import Project, Researcher, Triplet, TripletSource
from app.triplets.log import committed_bound, hold_append_lock


def test_a_write_in_flight_holds_the_readers_bound_back(make_database_url):
    url = make_database_url("postgresql", "log")
    migrations.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    try:
        with unit_of_work(sessions) as session:
            owner = Researcher(name="r")
            session.add(owner)
            session.flush()
            project = Project(owner_id=owner.id, name="p")
            session.add(project)
            session.flush()
            project_id = project.id
        row = {
            "project_id": project_id,
            "anchor_id": 1,
            "closer_id": 2,
            "farther_id": 3,
            "source": TripletSource.upload,
        }
        slow = sessions()
        hold_append_lock(slow, project_id)
        slow.execute(insert(Triplet), [row])  # takes an id, not committed yet
        with unit_of_work(sessions) as quick:
            hold_append_lock(quick, project_id)  # writers never wait for each other
            quick.execute(insert(Triplet), [row])  # a higher id, committed first
        with sessions() as reader:
            started = time.monotonic()
            assert committed_bound(reader, project_id) is None  # not past the slow one
            assert time.monotonic() - started < 2  # and it did not queue behind it
        slow.commit()
        slow.close()
        with sessions() as reader:
            assert committed_bound(reader, project_id) == 2
    finally:
        engine.dispose()

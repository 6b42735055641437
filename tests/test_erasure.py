"""A participant's data request, on both databases (issue 55): their records as a JSON
file, and their erasure by platform id: nothing of theirs is left in any table, the
erasure is logged without who it was, models fit again without their answers, builds
under way start over, a place they were paid for stays taken, and only the whole
account (or an admin token) may erase."""

from __future__ import annotations

import random

import numpy as np
from sqlalchemy import select, text

from app.builds.jobs import sweep
from app.core.db import Base, unit_of_work
from app.models import Build
from app.worker.loop import Worker
from tests.support.rating import answer, blob_study, configure, join, start_build

API = "/api/v1"
ERASED = "PRO-7f3a9c-erase"  # distinctive: searched for in every table afterwards
KEPT = "PRO-keep-1"


def _study(client, auth, project_id):
    chance = random.Random(5)
    X = np.array([(chance.random(), chance.random()) for _ in range(30)])
    y = (X[:, 0] > 0.5).astype(int)
    _, slug, keys = blob_study(client, auth, project_id, X, y)
    configure(client, auth, project_id, answers_per_rater=4, attention_rate=0, quota=3)
    # Earlier answers, uploaded with their rater, for the models to learn from.
    rows = ["anchor,closer,farther,rater"] + [
        ",".join([*chance.sample(keys, 3), "archive"]) for _ in range(300)
    ]
    client.post(
        f"{API}/projects/{project_id}/triplets",
        headers=auth,
        files={"file": ("earlier.csv", "\n".join(rows))},
    ).raise_for_status()
    return slug


def _answer_all(client, slug, participant: str):
    rater, state = join(
        client, slug, PROLIFIC_PID=participant, STUDY_ID="S1", SESSION_ID=f"session-{participant}"
    )
    while state["comparison"] is not None:
        state = answer(
            client, slug, rater, state["comparison"]["query_id"], response_time_ms=1500
        ).json()
    assert state["complete"] is True, state
    return rater


def run_worker_until_idle(app) -> None:
    sweep(app.state.session_factory)
    Worker(app.state.session_factory).run(until_idle=True)


def _rows_naming(app, needle: str) -> list[str]:
    """Every table's rows whose text holds `needle`."""
    found = []
    with unit_of_work(app.state.session_factory) as session:
        for table in Base.metadata.sorted_tables:
            for row in session.execute(select(table)).all():
                if needle in repr(tuple(row)):
                    found.append(f"{table.name}: {tuple(row)}")
        versions = session.execute(text("SELECT * FROM alembic_version")).all()
        assert versions  # (the real schema, migrated)
    return found


def test_a_participant_gets_their_records_and_is_erased_without_a_trace(app, client, auth, project):
    project_id = project["id"]
    slug = _study(client, auth, project_id)
    erased_rater = _answer_all(client, slug, ERASED)
    _answer_all(client, slug, KEPT)
    model = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={"name": "map", "kind": "tete", "params": {"max_iter": 50}},
    )
    assert model.status_code == 201, model.text
    model_id = model.json()["id"]
    run_worker_until_idle(app)
    served = client.get(f"{API}/projects/{project_id}/models/{model_id}", headers=auth).json()
    first = served["serving"]
    assert first["answers_count"] + first["heldout_count"] == 308
    build = start_build(client, auth, project_id, n_trees=1, random_state=0)

    records = client.get(f"{API}/projects/{project_id}/participants/{ERASED}/records", headers=auth)
    assert records.status_code == 200, records.text
    assert "attachment" in records.headers["content-disposition"]
    held = records.json()
    assert held["participant"]["participant"] == ERASED
    assert held["participant"]["platform_ids"]["SESSION_ID"] == f"session-{ERASED}"
    assert held["participant"]["outcome"] == "completed"
    assert len(held["screens"]) == 4 and len(held["answers"]) == 4
    assert all(answer["anchor"].startswith("b") for answer in held["answers"])
    assert all(screen["response_time_ms"] == 1500 for screen in held["screens"])
    participants = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert sum(p["outcome"] == "completed" for p in participants) == 2

    missing = client.delete(f"{API}/projects/{project_id}/participants/nobody", headers=auth)
    assert missing.status_code == 404
    assert "no participant 'nobody'" in missing.json()["detail"]

    erased = client.delete(f"{API}/projects/{project_id}/participants/{ERASED}", headers=auth)
    assert erased.status_code == 200, erased.text
    outcome = erased.json()
    assert (outcome["answers"], outcome["outcome"], outcome["place_kept"]) == (4, "completed", True)
    assert (outcome["builds_replayed"], outcome["models_refitting"]) == (1, 1)
    assert _rows_naming(app, ERASED) == []

    # Gone from every list and export; their browser's session no longer answers.
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert [p["participant_id"] for p in listed] == ["archive", KEPT]
    csv_text = client.get(f"{API}/projects/{project_id}/participants/export", headers=auth).text
    assert ERASED not in csv_text and KEPT in csv_text
    assert client.get(f"{API}/rate/{slug}/next", headers=erased_rater).status_code == 401
    again = client.get(f"{API}/projects/{project_id}/participants/{ERASED}/records", headers=auth)
    assert again.status_code == 404
    assert (
        client.delete(
            f"{API}/projects/{project_id}/participants/{ERASED}", headers=auth
        ).status_code
        == 404
    )

    # The log says when and how much, never who.
    log = client.get(f"{API}/projects/{project_id}/participants/erasures", headers=auth)
    assert log.status_code == 200
    (entry,) = log.json()
    assert (entry["answers"], entry["held_place"], entry["outcome"]) == (4, True, "completed")
    assert ERASED not in log.text

    # Their paid place stays taken: two of three, as before the erasure.
    page = client.get(f"/projects/{project_id}/participants", headers=auth).text
    assert "2 of 3" in page and "No participant has been erased" not in page

    # The model fits again on what is left; the build starts over without them.
    run_worker_until_idle(app)
    refit = client.get(f"{API}/projects/{project_id}/models/{model_id}", headers=auth).json()
    assert refit["serving"]["number"] == 2, refit["latest"]
    assert refit["serving"]["answers_count"] + refit["serving"]["heldout_count"] == 304
    with unit_of_work(app.state.session_factory) as session:
        assert session.get(Build, build["id"]).version > 1

    # The same id joining again is a newcomer (with the place left).
    rater, state = join(client, slug, PROLIFIC_PID=ERASED)
    assert state["comparison"] is not None


def test_only_the_whole_account_erases_and_a_read_token_downloads_records(
    app, client, auth, project
):
    from app.auth.service import create_token

    project_id = project["id"]
    slug = _study(client, auth, project_id)
    _answer_all(client, slug, ERASED)
    tokens = {}
    with unit_of_work(app.state.session_factory) as session:
        for scope in ("predict", "read", "write", "admin"):
            tokens[scope] = {
                "Authorization": "Bearer "
                + create_token(session=session, researcher_name="alice", scope=scope)
            }
    records = f"{API}/projects/{project_id}/participants/{ERASED}/records"
    assert client.get(records, headers=tokens["predict"]).status_code == 403
    assert client.get(records, headers=tokens["read"]).status_code == 200
    url = f"{API}/projects/{project_id}/participants/{ERASED}"
    for scope in ("predict", "read", "write"):
        refused = client.delete(url, headers=tokens[scope])
        assert refused.status_code == 403, (scope, refused.text)
        assert "erasing a participant's data needs a 'admin' token" in refused.json()["detail"]
    assert client.get(records, headers=auth).status_code == 200  # nothing went
    assert client.delete(url, headers=tokens["admin"]).status_code == 200
    assert client.get(records, headers=auth).status_code == 404

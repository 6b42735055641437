"""A fit's end, whatever happens to it: cancelled (at once, and it never serves), too late
to cancel (said so), its worker stopped (handed back and started over), its worker killed
(taken over, or failed once every attempt died). In each case the next train starts a
new fit: no version is left "training" for ever."""

from __future__ import annotations

import threading
from datetime import timedelta

import httpx
import pytest

from app.core.db import make_engine, make_session_factory
from app.learn import FeatureOracle, random_triplets
from app.models import Job, JobStatus, ModelVersion
from app.training import jobs, kinds
from app.training.jobs import refit_check
from app.worker import queue
from app.worker.loop import JobContext, Worker
from tests.support.models import (
    API,
    create_model,
    get_model,
    model_blobs,
    upload_blob_items,
    upload_triplets,
)
from tests.support.models import blob_project as blob_project_of
from tests.support.service import ServiceProcesses
from tests.support.waiting import wait_for

# A t-ETE fit that runs for minutes unless stopped: no early stop, 100,000 steps.
SLOW = {"max_iter": 100_000, "tol": 0, "n_iter_no_change": None, "t": 2, "cv": 2}


class Killed(BaseException):
    """What a SIGKILL does to a fit: it stops mid-step, and nothing after runs."""


@pytest.fixture
def blobs():
    return model_blobs()


@pytest.fixture
def blob_project(client, auth, project, blobs):
    return blob_project_of(client, auth, project["id"], blobs)


def _job(sessions, job_id: int) -> Job:
    with sessions() as session:
        return session.get(Job, job_id)


def _version(sessions, model_id: int, number: int) -> ModelVersion:
    """The version's row, artifact (a deferred column) loaded."""
    with sessions() as session:
        version = session.query(ModelVersion).filter_by(model_id=model_id, number=number).one()
        version.artifact  # noqa: B018 (loaded while the session is open)
        return version


def _fitting(sessions, version_id_of, seconds: float = 60.0) -> None:
    """Until the fit has computed at least one reported step."""

    def computing():
        version = version_id_of()
        job = _job(sessions, version.job_id)
        return version.status.value == "training" and job.progress > 0.05

    wait_for(computing, seconds, "the fit to compute its first steps")


def _in_thread(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def test_a_cancel_stops_a_running_fit_at_once_and_it_never_serves(app, client, auth, blob_project):
    project_id, _ = blob_project
    sessions = app.state.session_factory
    model = create_model(client, auth, project_id, name="slow", kind="tete", params=SLOW)
    worker = Worker(sessions, poll_seconds=0.05)
    thread = _in_thread(worker)
    try:
        _fitting(sessions, lambda: _version(sessions, model["id"], 1))
        cancelled = client.post(
            f"{API}/projects/{project_id}/models/{model['id']}/cancel", headers=auth
        )
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "cancelled", cancelled.json()
        assert cancelled.json()["message"] == "cancelled while training"
        # The worker stops computing at its next step and takes the next job.
        job_id = cancelled.json()["job_id"]
        wait_for(
            lambda: _job(sessions, job_id).status is JobStatus.cancelled, 10, "the job to stop"
        )
        latest = get_model(client, auth, project_id, model["id"])
        assert latest["serving"] is None and latest["latest"]["status"] == "cancelled"
        assert _version(sessions, model["id"], 1).artifact is None

        again = client.post(f"{API}/projects/{project_id}/models/{model['id']}/train", headers=auth)
        assert again.status_code == 202 and again.json()["number"] == 2
        _fitting(sessions, lambda: _version(sessions, model["id"], 2))
        client.post(f"{API}/projects/{project_id}/models/{model['id']}/cancel", headers=auth)
    finally:
        worker.stop()
        thread.join(30)


def test_a_cancel_that_meets_the_fits_last_step_wins_and_the_fit_never_serves(
    app, client, auth, blob_project, monkeypatch
):
    """The cancel lands after the fitter computed and before the model is stored."""
    project_id, _ = blob_project
    model = create_model(client, auth, project_id, name="t", kind="tete", params={"max_iter": 30})
    answers = {}
    learner = kinds.of("tete")
    real = learner.fit

    def fit_then_cancel(*args):
        outcome = real(*args)
        answers["cancel"] = client.post(
            f"{API}/projects/{project_id}/models/{model['id']}/cancel", headers=auth
        )
        return outcome

    monkeypatch.setattr(learner, "fit", fit_then_cancel)
    Worker(app.state.session_factory).run(until_idle=True)
    assert answers["cancel"].status_code == 200
    assert answers["cancel"].json()["status"] == "cancelled"
    body = get_model(client, auth, project_id, model["id"])
    assert body["serving"] is None and body["latest"]["status"] == "cancelled"
    job = _job(app.state.session_factory, body["latest"]["job_id"])
    assert job.status is JobStatus.cancelled


def test_a_fit_serves_only_with_its_job_already_succeeded(
    app, client, auth, blob_project, monkeypatch
):
    """A client that sees the version serving and then reads its job sees it succeeded,
    however long the worker takes to get to the job's bookkeeping (a busy machine)."""
    project_id, _ = blob_project
    sessions = app.state.session_factory
    model = create_model(client, auth, project_id, name="t", kind="tete", params={"max_iter": 30})
    release = threading.Event()
    recording = Worker._record_outcome

    def late_bookkeeping(worker, *args):
        release.wait(30)
        recording(worker, *args)

    monkeypatch.setattr(Worker, "_record_outcome", late_bookkeeping)
    worker = Worker(sessions)
    thread = threading.Thread(target=worker.run, kwargs={"until_idle": True}, daemon=True)
    thread.start()
    try:
        serving = wait_for(
            lambda: get_model(client, auth, project_id, model["id"])["serving"],
            30,
            "the fit to serve",
        )
        job = _job(sessions, serving["job_id"])
        assert job.status is JobStatus.succeeded and job.progress == 1.0
        assert job.result["version"] == serving["number"] == 1
    finally:
        release.set()
        thread.join(30)
    assert _job(sessions, serving["job_id"]).status is JobStatus.succeeded


def test_a_cancel_that_comes_too_late_says_how_the_fit_ended(app, client, auth, blob_project):
    project_id, _ = blob_project
    fitted = create_model(client, auth, project_id, name="t", kind="tete", params={"max_iter": 30})
    Worker(app.state.session_factory).run(until_idle=True)
    late = client.post(f"{API}/projects/{project_id}/models/{fitted['id']}/cancel", headers=auth)
    assert late.status_code == 409
    assert "too late to cancel" in late.json()["detail"]
    assert "version 1, already ended ready" in late.json()["detail"]

    idle = create_model(client, auth, project_id, name="idle", kind="tete", train=False)
    never = client.post(f"{API}/projects/{project_id}/models/{idle['id']}/cancel", headers=auth)
    assert never.status_code == 409 and "never trained" in never.json()["detail"]


def _die_mid_fit(sessions, worker_id: str) -> None:
    """A worker claims the train job, starts the fit and is killed at its first report."""
    with sessions() as session:
        job = queue.claim_next(
            session=session, worker_id=worker_id, stale_after=timedelta(seconds=0)
        )
    assert job is not None and job.kind == jobs.TRAIN

    def killed(*_):
        raise Killed()

    context = JobContext(
        job.id, job.kind, job.project_id, dict(job.params), job.attempts, sessions, killed
    )
    with pytest.raises(Killed):
        jobs.train(context)


def test_a_fit_whose_server_died_is_cancelled_at_once_and_the_next_train_starts_anew(
    app, client, auth, blob_project
):
    """The server stopped (killed) mid-fit; after the restart the researcher cancels."""
    project_id, _ = blob_project
    sessions = app.state.session_factory
    model = create_model(client, auth, project_id, name="t", kind="tete", params={"max_iter": 30})
    _die_mid_fit(sessions, "killed-server")
    assert get_model(client, auth, project_id, model["id"])["latest"]["status"] == "training"

    cancelled = client.post(
        f"{API}/projects/{project_id}/models/{model['id']}/cancel", headers=auth
    )
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert (
        cancelled.json()["progress"] == 0
        and cancelled.json()["message"] == "cancelled while training"
    )
    again = client.post(f"{API}/projects/{project_id}/models/{model['id']}/train", headers=auth)
    assert again.status_code == 202 and again.json()["number"] == 2

    # The restarted worker takes the dead one's job over (its heartbeat is stale), sees
    # the cancel and ends it, then fits the new version.
    assert Worker(sessions, stale_after_seconds=0.0).run(until_idle=True) == 2
    assert _job(sessions, cancelled.json()["job_id"]).status is JobStatus.cancelled
    body = get_model(client, auth, project_id, model["id"])
    assert body["serving"]["number"] == 2
    assert _version(sessions, model["id"], 1).status.value == "cancelled"


def test_a_fit_whose_every_attempt_died_fails_and_the_next_train_starts_anew(
    app, client, auth, blob_project
):
    project_id, _ = blob_project
    sessions = app.state.session_factory
    model = create_model(client, auth, project_id, name="t", kind="tete", params={"max_iter": 30})
    for attempt in range(3):  # the job's three attempts, each killed mid-fit
        _die_mid_fit(sessions, f"killed-{attempt}")
    with sessions() as session:  # the next worker finds it stale once more: it gives up
        assert (
            queue.claim_next(session=session, worker_id="next", stale_after=timedelta(seconds=0))
            is None
        )
    refit_check(sessions)  # every worker's upkeep settles the version within seconds
    latest = get_model(client, auth, project_id, model["id"])["latest"]
    assert latest["status"] == "failed", latest
    assert "worker stopped answering on each of 3 attempts" in latest["message"]

    again = client.post(f"{API}/projects/{project_id}/models/{model['id']}/train", headers=auth)
    assert again.status_code == 202 and again.json()["number"] == 2
    Worker(sessions).run(until_idle=True)
    assert get_model(client, auth, project_id, model["id"])["serving"]["number"] == 2


def test_a_stopped_worker_hands_its_fit_back_and_the_next_worker_starts_it_over(
    app, client, auth, blob_project
):
    project_id, _ = blob_project
    sessions = app.state.session_factory
    model = create_model(client, auth, project_id, name="slow", kind="tete", params=SLOW)
    first = Worker(sessions, poll_seconds=0.05)
    thread = _in_thread(first)
    _fitting(sessions, lambda: _version(sessions, model["id"], 1))
    first.stop()  # a fit reports every step: it stops within a second, not 20 s on
    assert first.stopped.wait(10), "the worker did not stop within 10 s of its stop"
    thread.join(10)

    version = _version(sessions, model["id"], 1)
    job = _job(sessions, version.job_id)
    assert version.status.value == "queued" and "interrupted by a stop" in version.message
    assert job.status is JobStatus.queued and job.attempts == 0 and job.locked_by is None

    second = Worker(sessions, poll_seconds=0.05)
    thread = _in_thread(second)
    try:
        _fitting(sessions, lambda: _version(sessions, model["id"], 1))
        assert _job(sessions, job.id).attempts == 1
        cancelled = client.post(
            f"{API}/projects/{project_id}/models/{model['id']}/cancel", headers=auth
        )
        assert cancelled.json()["status"] == "cancelled"
    finally:
        second.stop()
        thread.join(30)


@pytest.mark.slow
def test_a_server_stopped_mid_fit_hands_it_back_and_the_restart_fits_it(
    database_url,
    new_token,
    tmp_path,
    blobs,
):
    """`scripts/run` stopped (SIGTERM) mid-fit: the process exits at once, the fit is
    queued again, and the restarted service takes it up. The embedded worker on SQLite
    (the default), `closer worker` on PostgreSQL (a deployment); the hand-back itself
    runs on both databases above."""
    embedded = database_url.startswith("sqlite")
    token = new_token()["Authorization"]
    service = ServiceProcesses(database_url, tmp_path / "data", web_processes=1, workers=0)
    if embedded:
        service.env["CLOSER_WORKER_IN_PROCESS"] = "true"
    else:
        service.worker_args = [[]]
    service.start()
    try:
        http = httpx.Client(base_url=service.url, headers={"Authorization": token}, timeout=60)
        project_id = http.post(f"{API}/projects", json={"name": "stop"}).json()["id"]
        X, _, keys = blobs
        upload_blob_items(http, {}, project_id, blobs)
        triplets = random_triplets(len(X), 3000, FeatureOracle(X), random_state=0)
        upload_triplets(http, {}, project_id, triplets, keys)
        model = create_model(http, {}, project_id, name="slow", kind="tete", params=SLOW)
        path = f"{API}/projects/{project_id}/models/{model['id']}"

        def fitting_now():
            latest = http.get(path).json()["latest"]
            return latest["status"] == "training" and latest["progress"] > 0.05

        wait_for(fitting_now, 90, "the fit to compute its first steps")
        stopping = service.workers[0] if service.workers else service.web
        stopping.terminate()
        stopping.wait(20)  # raises if it is still fitting (the fit alone takes ~20 s)
        engine = make_engine(database_url)
        try:
            sessions = make_session_factory(engine)
            version = _version(sessions, model["id"], 1)
            job = _job(sessions, version.job_id)
            assert version.status.value == "queued", version.message
            assert job.status is JobStatus.queued and job.attempts == 0
        finally:
            engine.dispose()

        if embedded:
            service.restarts += 1
            service.start_web()
        else:
            service.workers.clear()
            service.start_workers()
        wait_for(fitting_now, 90, "the restarted service to take the fit up")
        cancelled = http.post(f"{path}/cancel")
        assert cancelled.json()["status"] == "cancelled"
        again = http.post(f"{path}/train")
        assert again.status_code == 202 and again.json()["number"] == 2
        http.post(f"{path}/cancel")
    finally:
        service.stop()

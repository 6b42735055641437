"""A project's webhooks (issue 55) against a receiver on this machine: each event is
posted once it happens, signed as Standard Webhooks defines (the receiver's library
verifies it), retried with backoff while the receiver fails, given up after the last
wait, sent again with the same webhook-id when a worker died holding it, and never for
events before the webhook was made. Bad input is refused by name and makes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook as Verifier

from app.core.config import Mode
from app.webhooks import delivery, service
from tests.support.links import open_link
from tests.support.screens import answer_screen, next_screen, set_rating
from tests.support.uploads import upload
from tests.support.waiting import wait_for

API = "/api/v1"


class Receiver:
    """An HTTP server that keeps what it is sent, and answers 500 `failing` times first."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.failing = 0
        self.hold_first = 0.0  # seconds the first post waits for its answer
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if len(receiver.received) == 1:
                    time.sleep(receiver.hold_first)
                failed = receiver.failing > 0
                receiver.failing -= 1
                self.send_response(500 if failed else 204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/closer"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, secret: str) -> list[dict]:
        """Each delivery's payload, its signature verified as a receiver would."""
        return [Verifier(secret).verify(body, headers) for headers, body in self.received]


@pytest.fixture
def receiver():
    made = Receiver()
    yield made
    made.server.shutdown()


def _study(client, auth, pid: int) -> str:
    items = "key,features\n" + "".join(f"x{i},{i} {i % 3}\n" for i in range(8))
    assert upload(client, auth, pid, "items", "items.csv", items).status_code == 201
    assert set_rating(client, auth, pid, answers_per_rater=2, attention_rate=0).status_code == 200
    return open_link(client, auth, pid)["public_slug"]


def _complete(client, slug: str, participant: str) -> None:
    joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": participant})
    assert joined.status_code == 201, joined.text
    token = {"X-Rater-Token": joined.json()["rater_token"]}
    for _ in range(2):
        screen = next_screen(client, slug, token)
        answered = answer_screen(client, slug, token, screen["query_id"], choice="left")
        assert answered.status_code == 200, answered.text


def _run(app, schedule=(0.0, 0.0)) -> int:
    """One round of the worker's upkeep: find the events, send what is due."""
    sessions = app.state.session_factory
    with sessions.begin() as session:
        service.find_events(session)
    return delivery.deliver_due(sessions, schedule)


def _hook(client, auth, pid: int, url: str, events: list[str]) -> dict:
    made = client.post(
        f"{API}/projects/{pid}/webhooks", json={"url": url, "events": events}, headers=auth
    )
    assert made.status_code == 201, made.text
    return made.json()


def test_an_event_is_posted_signed_once_and_only_after_the_webhook_was_made(
    app, client, auth, project, receiver
):
    pid = project["id"]
    slug = _study(client, auth, pid)
    _complete(client, slug, "BEFORE-1")  # before the webhook: not sent
    hook = _hook(client, auth, pid, receiver.url, ["participant.completed", "study.full"])
    assert hook["secret"].startswith("whsec_")
    assert "secret" not in client.get(f"{API}/projects/{pid}/webhooks", headers=auth).json()[0]
    _complete(client, slug, "PROLIFIC-5f3a")
    assert _run(app) == 1
    assert _run(app) == 0  # found again: written once, sent once
    (event,) = receiver.events(hook["secret"])
    assert event["type"] == "participant.completed"
    assert event["data"]["participant"] == "PROLIFIC-5f3a" and event["data"]["project_id"] == pid
    headers = receiver.received[0][0]
    assert headers["webhook-id"].startswith("msg_") and headers["webhook-timestamp"].isdigit()
    assert headers["webhook-signature"].startswith("v1,")
    # A forged body fails the receiver's check.
    with pytest.raises(Exception, match="(?i)signature"):
        Verifier(hook["secret"]).verify(receiver.received[0][1] + b" ", headers)

    # A quota reached: the study is full.
    quota = client.patch(f"{API}/projects/{pid}/rating", json={"quota": 2}, headers=auth)
    assert quota.status_code == 200, quota.text
    assert _run(app) == 1
    full = receiver.events(hook["secret"])[-1]
    assert full["type"] == "study.full" and full["data"]["quota"] == 2
    (log,) = [
        row
        for row in client.get(
            f"{API}/projects/{pid}/webhooks/{hook['id']}/deliveries", headers=auth
        ).json()
        if row["event"] == "participant.completed"
    ]
    assert log["attempts"] == 1 and log["last_status"] == 204 and log["delivered_at"]
    assert log["message_id"] == headers["webhook-id"]


def test_a_failing_receiver_gets_retries_with_the_same_id_then_is_given_up(
    app, client, auth, project, receiver
):
    pid = project["id"]
    slug = _study(client, auth, pid)
    hook = _hook(client, auth, pid, receiver.url, ["participant.completed"])
    receiver.failing = 2
    _complete(client, slug, "p-1")
    assert [_run(app) for _ in range(3)] == [0, 0, 1]
    ids = {headers["webhook-id"] for headers, _ in receiver.received}
    assert len(receiver.received) == 3 and len(ids) == 1
    (log,) = client.get(
        f"{API}/projects/{pid}/webhooks/{hook['id']}/deliveries", headers=auth
    ).json()
    assert log["attempts"] == 3 and log["last_status"] == 204 and log["failed_at"] is None

    # Failing for good: tried once and once more (one wait in the schedule), then given up.
    receiver.failing = 100
    _complete(client, slug, "p-2")
    for _ in range(4):
        _run(app, schedule=(0.0,))
    newest = client.get(
        f"{API}/projects/{pid}/webhooks/{hook['id']}/deliveries", headers=auth
    ).json()[0]
    assert newest["attempts"] == 2 and newest["failed_at"] and newest["next_attempt_at"] is None
    assert newest["last_status"] == 500 and "HTTP 500" in newest["last_error"]
    assert len(receiver.received) == 5

    # A waiting retry is not sent before its time.
    _complete(client, slug, "p-3")
    _run(app, schedule=(3600.0,))
    assert _run(app, schedule=(3600.0,)) == 0 and len(receiver.received) == 6


def test_a_delivery_held_by_a_dead_worker_is_sent_when_its_lease_runs_out(
    app, client, auth, project, receiver
):
    pid = project["id"]
    slug = _study(client, auth, pid)
    hook = _hook(client, auth, pid, receiver.url, ["participant.completed"])
    _complete(client, slug, "p-1")
    sessions = app.state.session_factory
    with sessions.begin() as session:
        service.find_events(session)
    assert len(delivery._claimed(sessions, 0.5)) == 1  # ... and the worker died here
    assert delivery.deliver_due(sessions, (0.0,), 0.5) == 0  # held: nobody else sends it
    time.sleep(0.6)
    assert delivery.deliver_due(sessions, (0.0,), 0.5) == 1
    (log,) = client.get(
        f"{API}/projects/{pid}/webhooks/{hook['id']}/deliveries", headers=auth
    ).json()
    assert log["attempts"] == 2 and log["delivered_at"]
    (event,) = receiver.events(hook["secret"])
    assert event["data"]["participant"] == "p-1"

    # Deleted, a webhook is sent nothing more.
    assert (
        client.delete(f"{API}/projects/{pid}/webhooks/{hook['id']}", headers=auth).status_code
        == 204
    )
    _complete(client, slug, "p-2")
    assert _run(app) == 0 and len(receiver.received) == 1


def test_a_finished_build_and_a_fitted_model_are_posted(app, client, auth, project, receiver):
    from sklearn.datasets import make_blobs

    from app.webhooks import jobs
    from app.worker.loop import Worker
    from tests.support.builds import finished_build
    from tests.support.models import create_model

    pid = project["id"]
    hook = _hook(client, auth, pid, receiver.url, ["build.completed", "model.ready"])
    X, y = make_blobs(n_samples=60, centers=3, cluster_std=1.0, random_state=2)
    _, build_id, _ = finished_build(app, client, auth, pid, X, y)
    model = create_model(client, auth, pid, name="map", kind="tete", params={"n_components": 2})
    Worker(app.state.session_factory).run(until_idle=True)
    _run(app)
    # The worker's upkeep beside the fit may have sent the build's event from its sender
    # thread already (a slow fit on a loaded machine lasts past the upkeep's first turn).
    sender = jobs._sending.get("thread")
    if sender is not None:
        sender.join(30)
    assert _run(app) == 0
    sent = receiver.events(hook["secret"])
    assert sorted(event["type"] for event in sent) == ["build.completed", "model.ready"]
    events = {event["type"]: event["data"] for event in sent}
    assert events["build.completed"]["build_id"] == build_id
    ready = events["model.ready"]
    assert ready["model_id"] == model["id"] and ready["version"] == 1 and ready["kind"] == "tete"
    assert ready["answers"] > 0 and "heldout_triplet_error" in ready["metrics"]


def test_in_production_a_webhook_reaches_no_address_inside_the_network(
    app, client, auth, project, receiver
):
    """A token that may make webhooks must not make the worker probe the server's own
    network (a cloud's metadata service, a database's port): refused when the address
    is given, not sent where a name resolves inside, and the log never holds a page."""
    pid = project["id"]
    slug = _study(client, auth, pid)
    app.state.settings = app.state.settings.model_copy(update={"mode": Mode.production})
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.7:5432/",
        "http://[::1]/",
    ):
        refused = client.post(
            f"{API}/projects/{pid}/webhooks",
            json={"url": url, "events": ["participant.completed"]},
            headers=auth,
        )
        assert refused.status_code == 422, refused.text
        assert "an address inside this network" in refused.json()["detail"]
    named = receiver.url.replace("127.0.0.1", "localhost")
    hook = _hook(client, auth, pid, named, ["participant.completed"])
    _complete(client, slug, "p-1")
    sessions = app.state.session_factory
    with sessions.begin() as session:
        service.find_events(session)
    assert delivery.deliver_due(sessions, (3600.0,), reach_private=False) == 0
    (row,) = client.get(
        f"{API}/projects/{pid}/webhooks/{hook['id']}/deliveries", headers=auth
    ).json()
    assert row["last_error"].startswith("not sent: localhost is ")
    assert "an address inside this network" in row["last_error"]
    assert receiver.received == []


def test_a_slow_receiver_never_holds_up_the_workers_upkeep(app, client, auth, project, receiver):
    """The upkeep that finds events returns at once; the post waits in a thread of its
    own (the same upkeep thread runs the answers' proposals and a fit's heartbeat)."""
    from app.webhooks import jobs

    pid = project["id"]
    slug = _study(client, auth, pid)
    _hook(client, auth, pid, receiver.url, ["participant.completed"])
    receiver.hold_first = 3.0
    _complete(client, slug, "p-slow")
    started = time.monotonic()
    jobs.send_webhooks(app.state.session_factory)
    assert time.monotonic() - started < 1.0
    jobs.send_webhooks(app.state.session_factory)  # one sender at a time: nothing more
    wait_for(lambda: len(receiver.received) == 1, 10, "the post")
    jobs._sending["thread"].join(10)
    assert len(receiver.received) == 1


@pytest.mark.slow  # worker processes of their own
def test_a_worker_killed_while_posting_loses_no_delivery(
    app, client, auth, project, receiver, settings, tmp_path
):
    """A `closer worker` SIGKILLed while its post waits for the receiver: the next
    worker sends the same message again once the lease runs out, and it is taken."""
    pid = project["id"]
    slug = _study(client, auth, pid)
    hook = _hook(client, auth, pid, receiver.url, ["participant.completed"])
    receiver.hold_first = 30.0
    _complete(client, slug, "PROLIFIC-kill")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CLOSER_")},
        "DATABASE_URL": settings.resolved_database_url,
        "CLOSER_DATA_DIR": str(tmp_path),
        "CLOSER_WEBHOOK_LEASE_SECONDS": "3",
        "CLOSER_WORKER_COMPILE_KERNELS": "false",
        "CLOSER_WORKER_POLL_SECONDS": "0.2",
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }
    command = [sys.executable, "-m", "app.cli", "worker"]
    first = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(receiver.received) == 1, 60, "the first post")
        first.kill()  # mid-post: the receiver has not answered
        first.wait(10)
    finally:
        first.kill()
    second = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        log = f"{API}/projects/{pid}/webhooks/{hook['id']}/deliveries"
        wait_for(
            lambda: client.get(log, headers=auth).json()[0]["delivered_at"] is not None,
            60,
            "the delivery, sent again",
        )
    finally:
        second.terminate()
        second.wait(20)
    (row,) = client.get(log, headers=auth).json()
    assert row["attempts"] == 2 and row["last_status"] == 204
    assert len(receiver.received) == 2
    assert receiver.received[0][0]["webhook-id"] == receiver.received[1][0]["webhook-id"]
    assert all(
        event["data"]["participant"] == "PROLIFIC-kill" for event in receiver.events(hook["secret"])
    )


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"url": "ftp://example.org/x", "events": ["model.ready"]}, "url: 'ftp://example.org/x'"),
        ({"url": "http://example.org", "events": ["model.done"]}, "events: 'model.done'"),
        ({"url": "http://example.org", "events": []}, "events"),
        (
            {"url": "http://example.org", "events": ["model.ready"], "secret": "hunter2"},
            "secret: give 'whsec_'",
        ),
    ],
)
def test_a_bad_webhook_is_refused_by_name_and_makes_nothing(client, auth, project, body, named):
    pid = project["id"]
    made = client.post(f"{API}/projects/{pid}/webhooks", json=body, headers=auth)
    assert made.status_code == 422, made.text
    assert named in json.dumps(made.json())
    assert client.get(f"{API}/projects/{pid}/webhooks", headers=auth).json() == []

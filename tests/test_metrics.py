"""GET /metrics (issue 55), on both databases, in one process: off without the setting,
closed to anyone without the metrics token, and counting the answers taken (by path)
with their latency, the fits and how long they took, and the jobs queued. Every process
of a service adding up is tested in tests/test_training_e2e.py (two web processes, two
workers, one of them killed mid-fit)."""

from __future__ import annotations

from app.worker.loop import Worker
from tests.support.links import open_link
from tests.support.metrics import parsed, total
from tests.support.rating import answer, configure, join

API = "/api/v1"
TOKEN = "scrape-token-for-tests"


def samples(client) -> dict[tuple, float]:
    scraped = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert scraped.status_code == 200, scraped.text
    assert scraped.headers["content-type"].startswith("text/plain")
    return parsed(scraped.text)


def test_metrics_are_off_without_the_setting_and_closed_without_the_token(app, client):
    off = client.get("/metrics")
    assert off.status_code == 404 and "CLOSER_METRICS_TOKEN" in off.json()["detail"]
    app.state.settings.metrics_token = TOKEN
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer not-it"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"


def test_a_scrape_counts_answers_their_latency_fits_and_the_queue(app, client, auth, project):
    app.state.settings.metrics_token = TOKEN
    pid = project["id"]
    keys = [f"k{i}" for i in range(12)]
    rows = "key,features\n" + "".join(f"{key},{i} {i % 3}\n" for i, key in enumerate(keys))
    client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", rows)}
    ).raise_for_status()
    configure(client, auth, pid, answers_per_rater=10, attention_rate=0)
    slug = open_link(client, auth, pid)["public_slug"]
    before = samples(client)

    rater, state = join(client, slug, participant="counted")
    for _ in range(3):
        state = answer(client, slug, rater, state["comparison"]["query_id"]).json()
    after = samples(client)
    taken = total(after, "closer_answers_total") - total(before, "closer_answers_total")
    timed = total(after, "closer_answer_seconds_count") - total(
        before, "closer_answer_seconds_count"
    )
    assert taken == timed == 3
    buckets = [key for key in after if key[0] == "closer_answer_seconds_bucket"]
    assert buckets, "the latency histogram has its buckets"

    uploaded = ["anchor,closer,farther"] + [
        f"{keys[i % 12]},{keys[(i + 1) % 12]},{keys[(i + 5) % 12]}" for i in range(200)
    ]
    client.post(
        f"{API}/projects/{pid}/triplets",
        headers=auth,
        files={"file": ("t.csv", "\n".join(uploaded))},
    ).raise_for_status()
    made = client.post(
        f"{API}/projects/{pid}/models",
        headers=auth,
        json={"name": "map", "kind": "tete", "params": {"max_iter": 30}},
    )
    assert made.status_code == 201, made.text
    queued = samples(client)
    assert queued[("closer_queue_depth", (("kind", "train_model"),))] == 1
    fits_before = queued.get(("closer_fit_seconds_count", ()), 0)
    Worker(app.state.session_factory).run(until_idle=True)
    fitted = samples(client)
    assert fitted[("closer_fit_seconds_count", ())] == fits_before + 1
    assert fitted[("closer_fits_running", ())] == 0
    assert ("closer_queue_depth", (("kind", "train_model"),)) not in fitted

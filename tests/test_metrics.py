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


def test_a_workers_own_port_serves_its_counts_to_the_token_alone():
    """A worker in a container of its own (docker-compose's `worker` and `trainer`) serves
    its counts on its own port, as the web does: the metrics token or a 401, nothing but
    GET /metrics, its fits counted, and a client that never speaks drops off before a
    scrape behind it times out."""
    import socket
    import time

    import httpx

    from app.core import metrics
    from app.monitoring.worker_endpoint import WorkerMetricsEndpoint

    silence = 0.5
    endpoint = WorkerMetricsEndpoint("127.0.0.1", 0, TOKEN, client_seconds=silence)
    url = f"http://127.0.0.1:{endpoint.port}"
    try:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{url}/metrics").status_code == 401
        wrong = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer not-it"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        basic = httpx.get(f"{url}/metrics", auth=("prometheus", TOKEN))
        assert basic.status_code == 401
        assert httpx.get(f"{url}/api/v1/health", headers=bearer).status_code == 404

        before = parsed(httpx.get(f"{url}/metrics", headers=bearer).text)
        with metrics.fitting():
            during = parsed(httpx.get(f"{url}/metrics", headers=bearer).text)
        after = httpx.get(f"{url}/metrics", headers=bearer)
        assert after.status_code == 200
        assert after.headers["content-type"].startswith("text/plain")
        after_samples = parsed(after.text)
        assert during[("closer_fits_running", ())] == before[("closer_fits_running", ())] + 1
        assert after_samples[("closer_fits_running", ())] == before[("closer_fits_running", ())]
        assert (
            after_samples[("closer_fit_seconds_count", ())]
            == before[("closer_fit_seconds_count", ())] + 1
        )
        assert not any(name == "closer_queue_depth" for name, _ in after_samples), (
            "the queue is the database's: the web reports it, once"
        )

        with socket.create_connection(("127.0.0.1", endpoint.port)):
            started = time.monotonic()
            late = httpx.get(f"{url}/metrics", headers=bearer, timeout=silence + 5)
            assert late.status_code == 200
            assert time.monotonic() - started < silence + 2
    finally:
        endpoint.close()


def test_docker_composes_prometheus_scrapes_the_web_and_every_worker_container():
    """The files a lab deploys agree: every `closer worker` service of docker-compose.yml
    serves its counts on the port Prometheus's config looks for it on, by its service name
    (so each scaled-up container is found), with the token compose hands Prometheus."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parent.parent
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    services = compose["services"]
    workers = {
        name
        for name, service in services.items()
        if service.get("command", [])[:2] == ["closer", "worker"]
    }
    assert workers == {"worker", "trainer"}
    for name in workers:
        port = services[name]["environment"]["CLOSER_WORKER_METRICS_PORT"]
        assert services[name]["environment"]["CLOSER_METRICS_TOKEN"].startswith(
            "${CLOSER_METRICS_TOKEN"
        )
    prometheus = services["prometheus"]
    assert prometheus["profiles"] == ["monitoring"]
    mounted = {
        target: source
        for source, target, *_ in (volume.split(":") for volume in prometheus["volumes"])
    }
    config_file = root / mounted["/etc/prometheus/prometheus.yml"].removeprefix("./")
    (token,) = prometheus["configs"]
    assert compose["configs"][token["source"]] == {"environment": "CLOSER_METRICS_TOKEN"}

    jobs = {
        job["job_name"]: job for job in yaml.safe_load(config_file.read_text())["scrape_configs"]
    }
    for job in jobs.values():
        assert job["authorization"]["credentials_file"] == token["target"]
    web_port = services["web"]["command"][services["web"]["command"].index("--port") + 1]
    assert jobs["closer-web"]["static_configs"] == [{"targets": [f"web:{web_port}"]}]
    (found,) = jobs["closer-workers"]["dns_sd_configs"]
    assert set(found["names"]) == workers and found["type"] == "A"
    assert str(found["port"]) == port

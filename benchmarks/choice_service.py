"""The choice model through the service (issue 57): ask → ready at THINGS' size, on a
planted study, against the library's fit of the same judgements in the same run.

The planted study is benchmarks/choice_model.py's: 1,854 items on a sparse non-negative
49-dimensional embedding, odd-one-out judgements drawn from SPoSE's softmax (scaled so
the planted model predicts about two thirds), and 100,000 fresh ones held out. The
judgements go up as a lab's judgement file (`format,item1,item2,item3,pick1`, not
timed: its upload time is printed). The service runs as deployed (`closer serve` and a
`closer worker` process on a PostgreSQL server of its own; `--database sqlite`: the
embedded default, the worker in the web process). "Ask → ready" is from the POST that
creates a choice model with default parameters until the worker stamps its version
ready; the worker's own clock splits it into reading, fitting and storing. Its peak
memory is the worker process's high-water mark (VmHWM). The peer is
`ChoiceEmbedding(random_state=0).fit` on the same judgements as arrays, in a process of
its own, before the ask. Both embeddings are scored on the fresh judgements.

    .venv/bin/python benchmarks/choice_service.py [--judgements 1460000] [--items 1854]
        [--dims 49] [--database postgresql]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select

from app.auth.service import create_token
from app.core import migrations
from app.core.db import unit_of_work
from app.learn import ChoiceEmbedding, odd_one_out_choices
from app.models import ModelVersion, VersionStatus
from benchmarks._memory import peak_rss_mib
from benchmarks.choice_model import judgements, pair_scores, planted, scaled_for
from benchmarks.fit_latency import _sessions, _wait_for_kernels, _wait_until_listening
from tests.support.postgres import start_postgres
from tests.support.service import ServiceProcesses

API = "/api/v1"


def library_fit(shown: np.ndarray, odd: np.ndarray, items: int) -> tuple[np.ndarray, float, float]:
    """The peer, in its own process: (embedding, seconds, peak MiB)."""
    began = time.perf_counter()
    model = ChoiceEmbedding(random_state=0).fit(odd_one_out_choices(shown, odd), n_items=items)
    return model.embedding_, time.perf_counter() - began, peak_rss_mib()


def accuracy(E: np.ndarray, shown: np.ndarray, odd: np.ndarray) -> float:
    """The share of fresh judgements whose odd one the embedding finds likeliest."""
    predicted = shown[np.arange(len(shown)), pair_scores(E, shown).argmax(axis=1)]
    return float(np.mean(predicted == odd))


def worker_peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def through_the_service(url: str, data_dir: Path, items: int, shown, odd) -> dict:
    embedded = url.startswith("sqlite")
    migrations.upgrade(url)
    service = ServiceProcesses(
        url,
        data_dir,
        web_processes=1,
        workers=0 if embedded else 1,
        log_dir=data_dir / "logs",
        compile_kernels=True,
    )
    service.env.update(
        {
            "CLOSER_WORKER_IN_PROCESS": "true" if embedded else "false",
            "CLOSER_RATE_LIMITS": "false",
        }
    )
    sessions = _sessions(url)
    try:
        service.start_web()
        service.start_workers()
        if not embedded:
            _wait_until_listening(url)
        _wait_for_kernels(service.log_dir)
        with unit_of_work(sessions) as session:
            token = create_token(session=session, researcher_name="bench")
        client = httpx.Client(
            base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=3600
        )
        project = client.post(f"{API}/projects", json={"name": "things"}).json()["id"]
        keys = "key\n" + "".join(f"t{i}\n" for i in range(items))
        client.post(f"{API}/projects/{project}/items", files={"file": ("items.csv", keys)})
        rows = "".join(
            f"odd_one_out,t{a},t{b},t{c},t{o}\n"
            for (a, b, c), o in zip(shown.tolist(), odd.tolist(), strict=True)
        )
        began = time.perf_counter()
        stored = client.post(
            f"{API}/projects/{project}/judgements",
            files={"file": ("things.csv", "format,item1,item2,item3,pick1\n" + rows)},
        )
        assert stored.status_code == 201, stored.text[:500]
        upload_seconds = time.perf_counter() - began
        print(f"  uploaded {len(odd):,} judgements in {upload_seconds:.0f} s", file=sys.stderr)

        asked = datetime.now(UTC)
        model = client.post(
            f"{API}/projects/{project}/models",
            json={"name": "things", "kind": "choice", "auto_refit": False},
        ).json()
        while True:
            with sessions() as session:
                status = session.scalar(
                    select(ModelVersion.status).where(ModelVersion.model_id == model["id"])
                )
            if status == VersionStatus.ready:
                break
            assert status in (VersionStatus.queued, VersionStatus.training), status
            time.sleep(1.0)
        with sessions() as session:
            fitted_at = session.scalar(
                select(ModelVersion.fitted_at).where(ModelVersion.model_id == model["id"])
            )
        fitter = service.web if embedded else service.workers[0]
        peak = worker_peak_mib(fitter.pid)
        state = client.get(f"{API}/projects/{project}/models/{model['id']}").json()["serving"]
        served = client.get(f"{API}/projects/{project}/models/{model['id']}/embedding").json()
        order = np.argsort([int(key[1:]) for key in served["keys"]])
        return {
            "ask_to_ready": (fitted_at - asked).total_seconds(),
            "upload": upload_seconds,
            "peak_mib": peak,
            "metrics": state["metrics"],
            "message": state["message"],
            "embedding": np.array(served["coordinates"])[order],
        }
    finally:
        sessions.kw["bind"].dispose()
        service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1854)
    parser.add_argument("--dims", type=int, default=49)
    parser.add_argument("--judgements", type=int, default=1_460_000)
    parser.add_argument("--held-out", type=int, default=100_000)
    parser.add_argument("--ceiling", type=float, default=0.67)
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    scale = scaled_for(args.ceiling, args.items, args.dims, args.seed)
    rng = np.random.default_rng(args.seed)
    X = planted(args.items, args.dims, scale, rng)
    shown, odd, _ = judgements(X, args.judgements, rng)
    test_shown, test_odd, ceiling = judgements(X, args.held_out, rng)
    print(
        f"{args.items} items, {args.dims} planted dimensions, {args.judgements:,} "
        f"odd-one-out judgements, {args.held_out:,} fresh ones scored",
        file=sys.stderr,
    )
    with ProcessPoolExecutor(1) as pool:
        library, library_seconds, library_peak = pool.submit(
            library_fit, shown, odd, args.items
        ).result()
    print(f"  library: {library_seconds:.0f} s", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="closer-choice-") as folder:
        data_dir = Path(folder)
        if args.database == "sqlite":
            found = through_the_service(
                f"sqlite:///{data_dir / 'closer.db'}", data_dir, args.items, shown, odd
            )
        else:
            server = start_postgres()
            try:
                found = through_the_service(
                    server.create_database("things"), data_dir, args.items, shown, odd
                )
            finally:
                server.stop()

    metrics = found["metrics"]
    print()
    print(f"{'':>30} {'fresh acc':>10} {'seconds':>8} {'peak MiB':>9} {'dims':>5}")
    print(f"{'planted model (ceiling)':>30} {ceiling:>10.4f} {'':>8} {'':>9} {args.dims:>5}")
    rows = [
        ("library ChoiceEmbedding", library, library_seconds, library_peak),
        (
            f"service, ask → ready ({args.database})",
            found["embedding"],
            found["ask_to_ready"],
            found["peak_mib"],
        ),
    ]
    for name, E, seconds, peak in rows:
        print(
            f"{name:>30} {accuracy(E, test_shown, test_odd):>10.4f} {seconds:>8.0f} "
            f"{peak:>9.0f} {E.shape[1]:>5}"
        )
    print(
        f"service/library time: {found['ask_to_ready'] / library_seconds:.2f}; the worker's "
        f"clock: {metrics['seconds']}; held-out screens: "
        f"{metrics.get('heldout_choice_accuracy', float('nan')):.4f} on "
        f"{metrics.get('heldout_choices', 0):,}"
    )
    print(f"its message: {found['message']}")


if __name__ == "__main__":
    main()

"""The adaptive loop against a crowd's pace (issue 33): does a study that answers fast get
the labels a paced one gets?

One project per arm on PostgreSQL (`closer serve` with 2 web processes, one `closer
worker`): 300 of scikit-learn's digits with features, the last 60 unlabelled, a
TripletBoost model with defaults (it refits by itself as the answers grow, and the
worker queues the samplers' proposals from each fit). Twenty simulated raters answer
without pause between rounds until 20,000 answers, wrong on 10 % of triplets uniformly
at random, at a think time that sets the pace: `paced` (0.2 s: about 85 answers/s),
`fast` (0.03 s: about 400/s on this machine; 0 gives as many as it serves, 500-700/s),
or `fresh` (a negative think time: rounds of 1,000 answers, each once the refit the
last one called for is done and proposals made from it, as an infinitely fast worker
would serve).
While they answer, the open proposals are counted every 0.2 s.

Reported per arm: the answers' rate and p50/p99 latency; the answers by purpose and the
share of answers that fell back to uniform questions (random beyond the project's 10 %
share: the queue had no proposal to give); the time the queue stood empty; the served
TripletBoost labels of the 60 hidden digits when the 20,000th answer landed (and how
many answers that version had seen), once the refits those answers called for are done,
and after a last fit asked by hand (as a researcher would before reading the labels);
the cores' worth of CPU the workers, the web processes and the whole machine used while
the crowd answered.

    .venv/bin/python benchmarks/adaptive_pace.py [--answers 20000] [--seeds 0,1,2]
        [--paces fresh:-1,paced:0.2,fast:0.03] [--without-model fast [--beside-idle-fits]]

`--without-model fast` runs the `fast` arms' crowd first on the same digits with no
model (uniform questions, no refits, no proposals) and compares the answers' p99 with
and without the adaptive loop, seed by seed. `--beside-idle-fits` adds the same crowd on
a study with no model beside a process outside the service that fits TripletBoost
without pause at the lowest CPU priority: what the fits' computation costs the answers
on this machine with nothing of the service around it (no reads, versions or proposals).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from labelling_crowd import (  # noqa: E402
    N_ITEMS,
    N_UNLABELLED,
    answers_by_purpose,
    digits_project,
    digits_service,
)
from labelling_crowd import settled as fits_settled  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from app.models import Purpose, QuerySlot  # noqa: E402
from app.scheduling.statements import IS_OPEN  # noqa: E402
from app.simulate import run_crowd  # noqa: E402
from app.training.jobs import REFIT_CHECK_SECONDS  # noqa: E402
from tests.support.crowd import wait_for  # noqa: E402

API = "/api/v1"
RATERS = 20
RANDOM_SHARE = 0.1  # the project's default
WORKERS = {  # `closer worker` options, one list per worker
    "one": None,
    "split": [["--skip-kinds", "train_model"], ["--kinds", "train_model", "--background"]],
    "idle": [["--background"]],
}
FRESH_ROUND = 1000  # answers between the `fresh` pace's waits for the refit


class QueueWatch:
    """Counts the project's open proposals every `every` seconds in a thread."""

    def __init__(self, sessions, project: int, every: float = 0.2) -> None:
        self.sessions, self.project, self.every = sessions, project, every
        self.counts: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self.sessions() as session:
                self.counts.append(
                    session.scalar(
                        select(func.count()).where(
                            QuerySlot.project_id == self.project,
                            QuerySlot.priority == int(Purpose.proposal),
                            IS_OPEN,
                        )
                    )
                )
            self._stop.wait(self.every)

    def __enter__(self) -> QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def empty_share(self) -> float:
        """Of the time after the first proposals were queued, the share with none open."""
        counts = np.array(self.counts)
        started = np.flatnonzero(counts > 0)
        if not len(started):
            return 1.0
        return float(np.mean(counts[started[0] :] == 0))


def _group_cpu_seconds(group: int) -> float:
    """CPU seconds (user and system) spent so far by the live processes of a process
    group: a `closer` process and its children (uvicorn's web processes, numba's
    threads are in their process)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[2]) == group:  # pgrp; fields from state (the third field) on
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float]:
    """(busy, all) CPU seconds of the machine so far, from /proc/stat."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), sum(ticks) / os.sysconf("SC_CLK_TCK")


class CpuShare:
    """Cores' worth of CPU used while it is open: by the workers, by the web processes, and
    by the whole machine (PostgreSQL and the crowd included)."""

    def __init__(self, service) -> None:
        self.groups = {"web": [service.web.pid], "workers": [w.pid for w in service.workers]}

    def _read(self) -> dict[str, float]:
        found = {name: sum(map(_group_cpu_seconds, pids)) for name, pids in self.groups.items()}
        found["machine"] = _machine_busy()[0]
        found["clock"] = time.monotonic()
        return found

    def __enter__(self) -> CpuShare:
        self.start = self._read()
        return self

    def __exit__(self, *exc) -> None:
        end = self._read()
        seconds = end["clock"] - self.start["clock"]
        self.cores = {
            name: (end[name] - self.start[name]) / seconds for name in ("web", "workers", "machine")
        }

    def __str__(self) -> str:
        return ", ".join(f"{name} {cores:.2f}" for name, cores in self.cores.items())


def crowd_answers(service, token, project: int, think: float, seed: int, budget: int):
    return asyncio.run(
        run_crowd(
            url=service.url,
            project_id=project,
            token=token,
            raters=RATERS,
            think_time=think,
            noise=0.1,
            noise_model="uniform",
            answers_each=budget // RATERS,
            seed=seed,
        )
    )


def fit_at_idle_priority(ready, stop, seed: int) -> None:
    """TripletBoost fits with defaults on 20,000 random triplets of the digits, one after
    another until `stop` is set, at the lowest CPU priority and with BLAS on one thread,
    as `closer worker --background` runs them: the fits' computation with none of the
    service around it (no database, no new versions, no proposals). `ready` is set once
    the process is at that priority with its answers made."""
    from sklearn.datasets import load_digits

    from app.learn import FeatureOracle, TripletBoost
    from app.worker.loop import run_on_spare_cpu

    run_on_spare_cpu()
    features, labels = load_digits(return_X_y=True)
    features, labels = features[:N_ITEMS], labels[:N_ITEMS]
    rng = np.random.default_rng(seed)
    labelled = np.arange(N_ITEMS - N_UNLABELLED)
    queries = rng.integers(0, N_ITEMS, (25_000, 3))
    distinct = (queries[:, 0] != queries[:, 1]) & (queries[:, 0] != queries[:, 2])
    queries = queries[distinct & (queries[:, 1] != queries[:, 2])][:20_000]
    triplets = FeatureOracle(features).answer(queries)
    ready.set()
    while not stop.is_set():
        TripletBoost(random_state=int(rng.integers(2**31))).fit(
            triplets, labelled, labels[labelled]
        )


@contextmanager
def idle_fits(seed: int):
    """A process fitting at the lowest CPU priority (`fit_at_idle_priority`) while open.
    It is open once the process fits: its start (imports at the normal priority) is not
    the crowd's to pay."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    fitter = context.Process(target=fit_at_idle_priority, args=(ready, stop, seed), daemon=True)
    fitter.start()
    try:
        if not ready.wait(120):
            raise RuntimeError("the idle-priority fitter did not start within 120 s")
        yield
    finally:
        stop.set()
        fitter.join(60)


def run_without_model(
    service, http, token, pace: str, think: float, seed: int, budget: int, beside_fits=False
):
    """The same crowd on the same digits with no model: uniform questions, no refits and
    no proposals. Its latency is the answer path's without the adaptive loop; with
    `beside_fits`, beside fits at the lowest priority that are not the service's."""
    name = f"plain-{pace}-{seed}" + ("-beside-fits" if beside_fits else "")
    digits = digits_project(http, name, seed)
    with idle_fits(seed) if beside_fits else nullcontext(), CpuShare(service) as cpu:
        summary = crowd_answers(service, token, digits.id, think, seed, budget).summary()
    return {k: summary[k] for k in ("answers_per_second", "p50_ms", "p99_ms")} | {"cpu": cpu}


def in_fresh_rounds(service, http, token, sessions, project, model_id, seed, budget):
    """The `fresh` pace: rounds of FRESH_ROUND answers, each once the refits the last one
    called for are done and proposals made from them (as an infinitely fast worker would
    serve): the labels the adaptive loop reaches when it never falls behind."""
    reports = []
    for number in range(budget // FRESH_ROUND):
        reports.append(
            crowd_answers(service, token, project, 0.0, seed * 1000 + number, FRESH_ROUND)
        )
        time.sleep(REFIT_CHECK_SECONDS + 1)  # the worker's refit check sees the round
        wait_for(
            lambda: fits_settled(http, project, {"boost": model_id}, sessions, proposing=True),
            300,
            f"fresh: the refit and proposals after round {number + 1}",
        )
    merged = reports[0]
    for report in reports[1:]:
        merged.latencies += report.latencies
        merged.seconds += report.seconds
        merged.answers += report.answers
    return merged


def run_arm(service, http, token, sessions, pace: str, think: float, seed: int, budget: int):
    digits = digits_project(http, f"pace-{pace}-{seed}", seed)
    project, asked, truth = digits.id, digits.asked, digits.truth
    model = http.post(
        f"{API}/projects/{project}/models", json={"name": "boost", "kind": "tripletboost"}
    )
    model.raise_for_status()
    model_id = model.json()["id"]

    def served() -> tuple[float, int]:
        """The serving version's accuracy over the hidden digits, and its answers."""
        response = http.post(
            f"{API}/projects/{project}/models/{model_id}/predict", json={"items": asked}
        )
        if response.status_code == 409:  # no version ready yet
            return 0.0, 0
        body = response.json()
        labels = np.array([row["label"] for row in body["predictions"]], dtype=object)
        versions = http.get(f"{API}/projects/{project}/models/{model_id}/versions").json()
        used = next(v for v in versions if v["number"] == body["version"])
        return float(np.mean(labels == truth)), used["answers_count"] + used["heldout_count"]

    def settled() -> bool:  # no fit queued or running
        return fits_settled(http, project, {"boost": model_id}, sessions, proposing=False)

    with QueueWatch(sessions, project) as watch, CpuShare(service) as cpu:
        if think >= 0:
            report = crowd_answers(service, token, project, think, seed, budget)
        else:
            report = in_fresh_rounds(
                service, http, token, sessions, project, model_id, seed, budget
            )
    at_end = served()
    # The refits those answers called for (the worker checks every few seconds).
    time.sleep(6)
    wait_for(settled, 600, f"{pace}: the refits")
    settled_served = served()
    # A last fit on every answer, as a researcher would ask before reading the labels.
    http.post(f"{API}/projects/{project}/models/{model_id}/train").raise_for_status()
    wait_for(settled, 600, f"{pace}: the last fit")
    last_fit = served()
    purposes = answers_by_purpose(sessions, project)
    total = sum(purposes.values())
    summary = report.summary()
    return {
        "rate": summary["answers_per_second"],
        "p50": summary["p50_ms"],
        "p99": summary["p99_ms"],
        "answers": total,
        "proposal": purposes.get("proposal", 0) / total,
        "random": purposes.get("random", 0) / total,
        "fallback": max(purposes.get("random", 0) / total - RANDOM_SHARE, 0.0),
        "empty": watch.empty_share(),
        "at_end": at_end,
        "settled": settled_served,
        "last_fit": last_fit,
        "cpu": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=20_000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--paces", default="paced:0.2,fast:0.03", help="name:think seconds, ...")
    parser.add_argument(
        "--without-model",
        default="",
        help="paces (names, comma-separated) whose arms the same crowd first answers on a"
        " study with no model: the answer path's latency without the adaptive loop",
    )
    parser.add_argument(
        "--workers",
        choices=sorted(WORKERS),
        default="one",
        help="one: a worker for everything; split: fits in a worker of their own at the"
        " lowest CPU priority (`closer worker --kinds train_model --background`, as"
        " docker-compose.yml runs them), the rest in another; idle: one worker, all of it"
        " at the lowest CPU priority",
    )
    parser.add_argument(
        "--beside-idle-fits",
        action="store_true",
        help="with --without-model: the same crowd also answers a study with no model"
        " beside a process that fits TripletBoost on the digits without pause at the"
        " lowest CPU priority, outside the service: what the fits' computation alone"
        " costs the answers on this machine",
    )
    args = parser.parse_args()
    paces = [(name, float(think)) for name, think in (p.split(":") for p in args.paces.split(","))]
    peered = set(filter(None, args.without_model.split(",")))

    rows, plain, beside = [], {}, {}
    with digits_service("pace", WORKERS[args.workers]) as (service, http, token, sessions):
        if peered:
            # The first crowd after the service starts is the slowest (connections, caches):
            # not measured, so that neither arm of the first seed pays for it.
            run_without_model(service, http, token, "warm-up", 0.03, 99, 2000)
        for seed in (int(s) for s in args.seeds.split(",")):
            for pace, think in paces:
                if pace in peered:
                    alone = run_without_model(service, http, token, pace, think, seed, args.answers)
                    plain[seed, pace] = alone
                    print(
                        f"seed {seed} {pace} without a model: {alone['answers_per_second']:.0f}"
                        f" answers/s, p50 {alone['p50_ms']:.0f} ms, p99 {alone['p99_ms']:.0f} ms;"
                        f" cores used: {alone['cpu']}",
                        flush=True,
                    )
                    if args.beside_idle_fits:
                        found = run_without_model(
                            service, http, token, pace, think, seed, args.answers, True
                        )
                        beside[seed, pace] = found
                        print(
                            f"seed {seed} {pace} without a model, beside idle fits:"
                            f" {found['answers_per_second']:.0f} answers/s, p50"
                            f" {found['p50_ms']:.0f} ms, p99 {found['p99_ms']:.0f} ms; cores"
                            f" used: {found['cpu']}",
                            flush=True,
                        )
                found = run_arm(service, http, token, sessions, pace, think, seed, args.answers)
                rows.append((seed, pace, found))
                print(
                    f"seed {seed} {pace}: {found['rate']:.0f} answers/s, served"
                    f" {found['at_end'][0]:.2f} (seen {found['at_end'][1]:,}) -> settled"
                    f" {found['settled'][0]:.2f} (seen {found['settled'][1]:,}), last fit"
                    f" {found['last_fit'][0]:.2f}, fallback"
                    f" {found['fallback']:.1%}, queue empty {found['empty']:.0%}; cores used:"
                    f" {found['cpu']}",
                    flush=True,
                )

    print()
    print(
        f"Labelling {N_UNLABELLED} of {N_ITEMS} digits over HTTP (PostgreSQL, 2 web processes,"
        f" 1 worker), {RATERS} raters, {args.answers:,} answers, 10 % flipped uniformly;"
        " TripletBoost with defaults refitting by itself"
    )
    print(
        "| seed | pace | answers/s | p50 / p99 ms | proposals | random (of which fell back)"
        " | queue empty | served at the last answer (answers seen) | after its refits"
        " | after a last fit by hand |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for seed, pace, f in rows:
        print(
            f"| {seed} | {pace} | {f['rate']:.0f} | {f['p50']:.0f} / {f['p99']:.0f}"
            f" | {f['proposal']:.1%} | {f['random']:.1%} ({f['fallback']:.1%})"
            f" | {f['empty']:.0%} | {f['at_end'][0]:.2f} ({f['at_end'][1]:,})"
            f" | {f['settled'][0]:.2f} ({f['settled'][1]:,}) | {f['last_fit'][0]:.2f} |"
        )
    for pace, _ in paces:
        at_end = [f["at_end"][0] for _, p, f in rows if p == pace]
        after = [f["settled"][0] for _, p, f in rows if p == pace]
        last = [f["last_fit"][0] for _, p, f in rows if p == pace]
        print(
            f"mean {pace}: served at the last answer {np.mean(at_end):.3f}, after its refits"
            f" {np.mean(after):.3f}, after a last fit {np.mean(last):.3f}"
        )
    first = paces[0][0]
    for pace, _ in paces[1:]:
        gaps = [
            f["at_end"][0] - g["at_end"][0]
            for seed, p, f in rows
            if p == pace
            for other, q, g in rows
            if q == first and other == seed
        ]
        print(
            f"{pace} - {first}, served at the last answer, seed by seed: "
            + ", ".join(f"{gap:+.2f}" for gap in gaps)
            + f"; mean {np.mean(gaps):+.3f} (target >= -0.03)"
        )
    if plain:
        print()
        print("The answer path's p99 with the adaptive loop against the same crowd without it")
        print("| pace | seed | answers/s with / without | p99 ms with / without | ratio |")
        print("| --- | --- | --- | --- | --- |")
        for pace, _ in paces:
            ratios = []
            for seed, p, f in rows:
                if p != pace or (seed, pace) not in plain:
                    continue
                alone = plain[seed, pace]
                ratios.append(f["p99"] / alone["p99_ms"])
                print(
                    f"| {pace} | {seed} | {f['rate']:.0f} / {alone['answers_per_second']:.0f}"
                    f" | {f['p99']:.0f} / {alone['p99_ms']:.0f} | {ratios[-1]:.2f}x |"
                )
            if ratios:
                print(f"{pace}: median p99 ratio {np.median(ratios):.2f}x, {len(ratios)} seeds")
    if beside:
        print()
        print(
            "The same crowd with no model beside fits at the lowest priority outside the"
            " service, against it alone"
        )
        print("| pace | seed | answers/s beside / alone | p99 ms beside / alone | ratio |")
        print("| --- | --- | --- | --- | --- |")
        ratios = []
        for (seed, pace), found in beside.items():
            alone = plain[seed, pace]
            ratios.append(found["p99_ms"] / alone["p99_ms"])
            print(
                f"| {pace} | {seed} | {found['answers_per_second']:.0f} /"
                f" {alone['answers_per_second']:.0f} | {found['p99_ms']:.0f} /"
                f" {alone['p99_ms']:.0f} | {ratios[-1]:.2f}x |"
            )
        print(f"median p99 ratio beside idle fits {np.median(ratios):.2f}x, {len(ratios)} runs")


if __name__ == "__main__":
    main()

"""The answer path of two versions of Closer in one run: answers a second, p50 and p99 at
300 raters with a think time, on PostgreSQL, a base commit against the working tree.

Each version runs as deployed (`closer serve --workers 2` and a `closer worker`) from its
own checkout (the base in a git worktree beside this one) on a PostgreSQL server of its
own (the two services' connection pools would not fit in one server's 100), with the same
digits study and 20-tree CompRF build waiting for answers. Both are up for the whole run; their crowds take turns (A B B A, B A A B, ...),
so a slow minute of this machine falls on both. A crowd is `closer simulate`'s engine
over HTTP, the same client for both.

p99 at 300 raters is set by a few stalls (a checkpoint, a build step) that catch many
raters at once, so one crowd's p99 spreads by several times from run to run: the figures
here pool every answer of a version's rounds, with a bootstrap interval over rounds for
the ratio of pooled p99s, beside the median of the rounds' own figures.

    .venv/bin/python benchmarks/answer_path_versions.py --base 4e07e54 [--rounds 8]
        [--seconds 30] [--raters 300] [--warm-up 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.simulate import run_crowd  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402
from tests.support.service import ServiceProcesses, digits_study  # noqa: E402


def cpu_times() -> list[int]:
    """The machine's CPU time so far by kind (/proc/stat's first line; empty elsewhere)."""
    try:
        with open("/proc/stat") as stat:
            return [int(value) for value in stat.readline().split()[1:]]
    except OSError:
        return []


def stolen_share(before: list[int], after: list[int]) -> float:
    """The share of CPU time a virtual machine's host took for others in between (steal,
    the eighth column): a round that lost much of it measures the host, not Closer."""
    if len(before) < 8 or len(after) < 8:
        return 0.0
    spent = [a - b for a, b in zip(after, before, strict=False)]
    return spent[7] / max(1, sum(spent[:8]))


def checkout(rev: str) -> Path:
    """The base commit's tree, as a git worktree beside this checkout (made once)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = Path(tempfile.gettempdir()) / f"closer-base-{sha}"
    if not tree.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), sha],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
    return tree


def closer(tree: Path, url: str, *args: str) -> str:
    """A `closer` command of that tree's code on the database at `url`."""
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CLOSER_")},
        "DATABASE_URL": url,
        "PYTHONPATH": str(tree),
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=tree,
        env=environment,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


class Version:
    """One version's service, study and the answers its crowds timed."""

    def __init__(self, name: str, tree: Path, folder: Path, items: int, trees: int):
        self.name = name
        self.server = start_postgres()
        self.database = f"answer_path_{name}"
        url = self.server.create_database(self.database)
        closer(tree, url, "migrate")
        self.token = closer(tree, url, "create-token", "--name", "bench")
        self.service = ServiceProcesses(url, folder / name, web_processes=2, workers=1, root=tree)
        self.service.start()
        self.project, _ = digits_study(self.service.url, self.token, items, trees)
        self.rounds: list[dict] = []

    def crowd(self, raters: int, think: float, seconds: float, seed: int) -> dict:
        report = asyncio.run(
            run_crowd(
                url=self.service.url,
                project_id=self.project,
                token=self.token,
                raters=raters,
                noise=0.1,
                think_time=think,
                seconds=seconds,
                seed=seed,
            )
        )
        if report.server_errors:
            raise RuntimeError(f"{self.name}: server errors {dict(report.server_errors)}")
        return {
            "latencies_ms": np.array(report.latencies) * 1000,
            "per_second": report.answers / report.seconds,
        }


def pooled_p99(rounds: list[dict]) -> float:
    return float(np.percentile(np.concatenate([r["latencies_ms"] for r in rounds]), 99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=8, help="crowds per version")
    parser.add_argument("--seconds", type=float, default=30.0, help="one crowd's length")
    parser.add_argument("--raters", type=int, default=300)
    parser.add_argument("--think-time", type=float, default=1.0)
    parser.add_argument("--warm-up", type=float, default=20.0, help="unmeasured first crowd")
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--trees", type=int, default=20, help="the build's trees (0: no build)")
    args = parser.parse_args()

    base_tree = checkout(args.base)
    folder = Path(tempfile.mkdtemp(prefix="closer-answer-path-"))
    versions: list[Version] = []
    try:
        for name, tree in (("base", base_tree), ("head", REPO)):
            versions.append(Version(name, tree, folder, args.items, args.trees))
        for version in versions:
            version.crowd(args.raters, args.think_time, args.warm_up, seed=0)
        for number in range(args.rounds):
            order = versions if number % 4 in (0, 3) else versions[::-1]
            for version in order:
                before = cpu_times()
                measured = version.crowd(args.raters, args.think_time, args.seconds, number + 1)
                stolen = stolen_share(before, cpu_times())
                version.rounds.append(measured)
                ms = measured["latencies_ms"]
                print(
                    f"  round {number + 1} {version.name}: {measured['per_second']:.1f}/s, "
                    f"p50 {np.percentile(ms, 50):.1f} ms, p99 {np.percentile(ms, 99):.1f} ms, "
                    f"CPU stolen by the host {100 * stolen:.0f} %"
                    + ("  <- the machine was not ours: run again" if stolen > 0.1 else ""),
                    file=sys.stderr,
                )
    finally:
        for version in versions:
            version.service.stop()
            version.server.stop()

    base, head = versions
    print()
    print(
        f"answer + next query, PostgreSQL, 2 web processes + 1 worker each, {args.raters} "
        f"raters, think {args.think_time:g} s, {args.rounds} rounds of {args.seconds:g} s "
        f"each, base {args.base} vs the working tree, in turn"
    )
    print(f"{'':>24} {'base':>10} {'head':>10} {'head/base':>10}")
    rows = [
        ("answers/s, median round", lambda v: np.median([r["per_second"] for r in v.rounds])),
        ("answers/s, all rounds", lambda v: np.mean([r["per_second"] for r in v.rounds])),
        (
            "p50 ms, pooled",
            lambda v: np.percentile(np.concatenate([r["latencies_ms"] for r in v.rounds]), 50),
        ),
        ("p99 ms, pooled", lambda v: pooled_p99(v.rounds)),
        (
            "p99 ms, median round",
            lambda v: np.median([np.percentile(r["latencies_ms"], 99) for r in v.rounds]),
        ),
    ]
    for label, figure in rows:
        a, b = float(figure(base)), float(figure(head))
        print(f"{label:>24} {a:>10.1f} {b:>10.1f} {b / a:>10.3f}")
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(2000):
        picked = rng.integers(0, args.rounds, args.rounds)
        ratios.append(
            pooled_p99([head.rounds[i] for i in picked])
            / pooled_p99([base.rounds[i] for i in picked])
        )
    low, high = np.percentile(ratios, [5, 95])
    print(f"pooled p99 head/base: 90 % bootstrap interval over rounds {low:.3f} .. {high:.3f}")


if __name__ == "__main__":
    main()

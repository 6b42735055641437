"""What asking actively saved, measured inside the study (issue 57): a study's arms that
ask differently (one only at random: its `random_share` 1; the others as the study asks,
the samplers' and CompRF's questions first) are compared through one model's kind and
parameters.

The worker refits the model on the first answers of each arm, at a few counts up to all
of them (halving: `POINTS`), and measures every fit on the same held-out answers: a
share of the answers asked at random, of any arm, whole screens, fitted by none of the
fits. The random arm's curve gives the answers random questions need to reach the active
arm's error at its count, with a bootstrap interval over the held-out screens
(app/learn/gain.py).

What the comparison cannot separate, said here and in the README: the samplers chose the
active arm's questions from models fitted on every answer, the random arm's included; a
model of the active arm alone sees only its own.

Computed once per ready version (a job of its own, on the worker that fits): GET …/gain
asks for it where none was, and answers with its progress until it is done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.errors import ServiceError
from app.designs.arms import own_or_study
from app.learn.gain import Needed, active_gain, error_interval
from app.models import Job, JobStatus, LearnedModel, ModelVersion, Project
from app.scheduling.thresholds import excluded_rater_ids
from app.training import kinds, runs
from app.training.fitted import Fitted, required_part
from app.training.fitting import Progress, Snapshot, answer_losses, heldout_split
from app.training.service import newest_ready
from app.triplets.log import answer_columns
from app.worker import queue

GAIN_JOB = "active_gain"
# The held-out answers: this share of those asked at random, at most MOST_HELDOUT.
HELDOUT_SHARE = 0.2
MOST_HELDOUT = 20_000
# Fits per arm: its answers, half of them, a quarter, … (those a fit can learn from).
POINTS = 5
RESAMPLES = 1000
LEVEL = 0.95
RANDOM, ACTIVE = "random", "active"
# A gain job looked for among a project's newest ones.
RECENT_JOBS = 50


def asking(project: Project) -> dict[str, str]:
    """Each arm's way of asking: "random" where every question it asks (checks aside)
    is drawn at random (its random share is 1), else "active"."""
    return {
        arm["name"]: RANDOM if own_or_study(project, arm, "random_share") >= 1 else ACTIVE
        for arm in project.arms or []
    }


def why_not(project: Project, model: LearnedModel) -> str | None:
    """Why this model's gain cannot be measured in this study (None: it can). A kind
    that measures none is refused by the route (a 400)."""
    if model.arm is not None:
        return (
            f"this model learns from the arm {model.arm!r} alone; the gain compares arms: "
            "measure it on a model of the whole study"
        )
    ways = asking(project)
    if RANDOM not in ways.values():
        return (
            "no arm asks only at random: give one arm a random_share of 1 (the baseline) "
            "and let another ask as the study does"
        )
    if ACTIVE not in ways.values():
        return "every arm asks only at random: there is no active arm to compare"
    return None


class CannotMeasure(Exception):
    """The study cannot give this model's gain (the job fails saying why)."""


def require_measured_kind(model: LearnedModel) -> None:
    learner = kinds.of(model.kind)
    if learner.active_gain_measure is None:
        measured = kinds.in_words([each for each in kinds.every() if each.active_gain_measure])
        raise ServiceError(
            f"a {learner.label} model has no error to compare arms by; the active gain is "
            f"measured with {measured} models"
        )


# -- the route's side -----------------------------------------------------------------------


def gain_state(session: Session, project: Project, model: LearnedModel) -> dict[str, Any]:
    """What GET …/gain answers: the newest gain measured, and whether it is the newest
    ready version's; asking for that one where it is not and none is being measured (one
    measure at a time per model: a model that refits as answers come is measured again
    once the last measure is done, not at every refit)."""
    require_measured_kind(model)
    state: dict[str, Any] = {"model_id": model.id, "version": None, "arms": []}
    why = why_not(project, model)
    version = newest_ready(session, model.id)
    if why is None and version is None:
        why = "the model has no ready version yet: the gain is measured once one is"
    if why is not None or version is None:
        return {**state, "status": "unavailable", "why": why}
    jobs = _jobs_of(session, project, model)
    if _measure_due(jobs, version):
        # Two first asks at once queue it once (PostgreSQL; SQLite writes one at a time).
        session.execute(
            select(LearnedModel.id).where(LearnedModel.id == model.id).with_for_update()
        )
        jobs = _jobs_of(session, project, model)
        if _measure_due(jobs, version):
            queued = queue.enqueue(
                session=session,
                kind=GAIN_JOB,
                project_id=project.id,
                params={"model_id": model.id, "version_id": version.id},
                max_attempts=2,
            )
            jobs = [queued, *jobs]
    running = next((job for job in jobs if job.status not in queue.FINISHED), None)
    done = next((job for job in jobs if job.status is JobStatus.succeeded and job.result), None)
    if running is not None:
        state["progress"] = running.progress
        state["message"] = running.message
    if done is not None and done.result is not None:
        measured = session.get(ModelVersion, done.params.get("version_id"))
        return {
            **state,
            **done.result,
            "status": "ready",
            "version": None if measured is None else measured.number,
            "current": measured is not None and measured.id == version.id,
        }
    if running is not None:
        status = "computing" if running.status is JobStatus.running else "queued"
        return {**state, "status": status, "version": version.number}
    failed = jobs[0] if jobs else None
    return {
        **state,
        "status": "failed",
        "version": version.number,
        "why": failed.message if failed is not None else "the measure failed",
    }


def page_gains(
    session: Session, project: Project, models: list[LearnedModel]
) -> dict[int, dict[str, Any]]:
    """The Models page's gains: for each model whose kind measures one, where the study
    compares asking (an arm at random, an arm active) and the model learns from all arms."""
    gains = {
        model.id: gain_state(session, project, model)
        for model in models
        if kinds.of(model.kind).active_gain_measure and why_not(project, model) is None
    }
    for gain in gains.values():  # the chart's lines: an arm's error against its answers
        gain["series"] = [
            {
                "name": f"{arm['name']} (asked {'at random' if arm['asking'] == RANDOM else 'actively'})",
                "points": [[point["answers"], point["error"]] for point in arm["curve"]],
            }
            for arm in gain["arms"]
            if arm["curve"]
        ]
    return gains


def _measure_due(jobs: list[Job], version: ModelVersion) -> bool:
    """Whether the version is to be measured now: none is being measured, and it never
    was (one that failed is not tried again until a newer version)."""
    return all(job.status in queue.FINISHED for job in jobs) and not any(
        job.params.get("version_id") == version.id for job in jobs
    )


def _jobs_of(session: Session, project: Project, model: LearnedModel) -> list[Job]:
    """The model's gain measures among the project's recent ones, newest first."""
    recent = session.scalars(
        select(Job)
        .where(Job.project_id == project.id, Job.kind == GAIN_JOB)
        .order_by(Job.id.desc())
        .limit(RECENT_JOBS)
    )
    return [job for job in recent if job.params.get("model_id") == model.id]


# -- the worker's side ----------------------------------------------------------------------


def counts_to_fit(answers: int, fewest: int) -> list[int]:
    """The first-answer counts an arm is fitted on: all, half, a quarter, … (POINTS of
    them), none below `fewest`."""
    found = {answers // (1 << halving) for halving in range(POINTS)}
    return sorted(count for count in found if count >= fewest)


@dataclass(frozen=True)
class _Yardstick:
    """What every fit is measured on: `losses(fitted)` gives one loss per unit measured,
    `groups` the bootstrap's unit of each (a screen, an item); `held` marks the answers
    no fit may read."""

    held: np.ndarray
    groups: np.ndarray
    losses: Callable[[Fitted], np.ndarray]


def _answers_held_out(snap: Snapshot, arm_of: np.ndarray, seed: int) -> _Yardstick:
    """Held-out answers: a share of those asked at random, of any arm, whole screens."""
    groups = snap.answer_groups()
    unbiased = arm_of >= 0
    if snap.adaptive is not None:
        unbiased &= ~snap.adaptive
    eligible = int(unbiased.sum())
    share = min(HELDOUT_SHARE, MOST_HELDOUT / max(eligible, 1))
    _, held = heldout_split(len(snap.answers), share, seed, unbiased, groups)
    if not len(held):
        raise CannotMeasure(
            f"too few answers asked at random to hold any out ({eligible}): the gain needs "
            "answers no fit saw"
        )
    is_held = np.zeros(len(snap.answers), bool)
    is_held[held] = True
    answers = snap.answers[held]
    return _Yardstick(is_held, groups[held], lambda fitted: answer_losses(fitted, answers))


def _test_items(snap: Snapshot) -> _Yardstick:
    """The test split's labelled items: a fit's label for each, wrong where it gives none."""
    labelled = np.array([label is not None for label in snap.labels], bool)
    test = np.flatnonzero(snap.is_test & labelled)
    if not len(test):
        raise CannotMeasure(
            "the gain in labels is measured on the test split: give some labelled items the "
            "split 'test' (no fit learns their labels)"
        )
    truth = snap.labels[test].astype(str)

    def losses(fitted: Fitted) -> np.ndarray:
        given = required_part(fitted.predictions).labels[test]
        return np.array(
            [label is None or str(label) != want for label, want in zip(given, truth, strict=True)],
            float,
        )

    return _Yardstick(np.zeros(len(snap.answers), bool), test, losses)


def _needed(found: Needed) -> dict[str, Any]:
    bound = "more_than" if found.beyond else "at_most" if found.within else "exact"
    return {"answers": round(found.answers, 1), "bound": bound}


def _fit_progress(progress: Progress, done: int, total: int, fitting: str) -> Progress:
    def report(fraction: float, message: str) -> None:
        progress(0.02 + 0.96 * (done + fraction) / total, f"{fitting} ({message})")

    return report


def measure_gain(
    session: Session,
    model_id: int,
    version_id: int,
    progress: Progress,
    keep_choices: bool = True,
) -> dict[str, Any]:
    """The gain of the model's kind and parameters over the answers its version read
    (`keep_choices=False`: each fit chooses its 'auto' parameters again, on its own
    answers, as benchmarks/active_gain.py compares)."""
    began = time.perf_counter()
    model = session.get(LearnedModel, model_id)
    version = session.get(ModelVersion, version_id)
    if model is None or version is None:
        raise CannotMeasure(f"model {model_id} or its version was deleted")
    project = session.get_one(Project, model.project_id)
    why = why_not(project, model)
    if why is not None:
        raise CannotMeasure(why)
    learner = kinds.of(model.kind)
    # Every fit with what the version chose on all the answers (its dimension, loss,
    # sparsity): a subset choosing again on the few answers among its own asked at random
    # made the curves measure those choices as much as the questions asked.
    params = dict(version.params)
    fixed: dict[str, Any] = {}
    if keep_choices:
        params = learner.as_chosen(params, version.metrics or {})
        fixed = {name: value for name, value in params.items() if value != version.params.get(name)}
        # The gain holds its own answers out: a kind's held-out share would only thin
        # each fit, now that nothing is chosen on it.
        if "heldout_share" in params:
            params["heldout_share"] = 0.0
    seed = params.get("random_state", 0)
    progress(0.0, "reading the answers")
    cutoff = version.answers_cutoff
    snap = runs.snapshot(session, project, model, cutoff=cutoff, every_arm=True)
    ways = asking(project)
    names = list(ways)
    excluded = excluded_rater_ids(session, project.id)
    arm_of = np.full(len(snap.answers), -1)
    for number, name in enumerate(names):
        ids = answer_columns(session, project.id, snap.cutoff, excluded_raters=excluded, arm=name)[
            "id"
        ]
        arm_of[np.isin(snap.answer_ids, ids)] = number
    session.rollback()  # no transaction stays open through the fits

    measure = learner.active_gain_measure
    yardstick = (
        _answers_held_out(snap, arm_of, seed)
        if measure == "heldout_triplet_error"
        else _test_items(snap)
    )
    fewest = max(learner.answers_needed or 1, 20)
    arm_rows = [
        np.flatnonzero((arm_of == number) & ~yardstick.held) for number in range(len(names))
    ]
    # An active arm is compared where the random arm's curve reaches: at its own count, or
    # at the random arm's where it has more (the random arm gives answers to the held-out
    # set, and the arms' raters answer at their own pace).
    reach = max(
        (len(rows) for name, rows in zip(names, arm_rows, strict=True) if ways[name] == RANDOM),
        default=0,
    )
    plan = []
    for name, rows in zip(names, arm_rows, strict=True):
        counts = counts_to_fit(len(rows), fewest)
        if ways[name] == ACTIVE and fewest <= reach < len(rows):
            counts = sorted({*counts, reach})
        plan.append((name, rows, counts))
    total = sum(len(counts) for _, _, counts in plan) or 1
    measured: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    done = 0
    for name, rows, counts in plan:
        losses = np.empty((len(counts), len(yardstick.groups)))
        for point, count in enumerate(counts):
            report = _fit_progress(progress, done, total, f"arm {name}: its first {count} answers")
            outcome = learner.fit(snap.subset(rows[:count]), params, None, report)
            losses[point] = yardstick.losses(outcome.fitted)
            done += 1
        measured[name] = (np.array(counts, np.int64), losses)
    held_groups = yardstick.groups

    progress(0.98, "comparing the arms")
    arms_out = []
    baseline = next(
        (name for name in names if ways[name] == RANDOM and len(measured[name][0])), None
    )
    for name, rows, _ in plan:
        fitted_counts, losses = measured[name]
        curve = []
        if len(fitted_counts):
            low, high = error_interval(losses, held_groups, LEVEL, RESAMPLES, seed)
            curve = [
                {
                    "answers": int(count),
                    "error": float(loss.mean()),
                    "low": float(lo),
                    "high": float(hi),
                }
                for count, loss, lo, hi in zip(fitted_counts, losses, low, high, strict=True)
            ]
        gain = None
        compared = np.flatnonzero(fitted_counts <= reach)
        if ways[name] == ACTIVE and baseline is not None and len(compared):
            random_counts, random_losses = measured[baseline]
            at = int(compared[-1])
            found = active_gain(
                random_counts,
                random_losses,
                int(fitted_counts[at]),
                losses[at],
                held_groups,
                level=LEVEL,
                resamples=RESAMPLES,
                random_state=seed,
            )
            gain = {
                "against": baseline,
                "answers": found.answers,
                "error": found.error,
                "needed": _needed(found.needed),
                "low": _needed(found.low),
                "high": _needed(found.high),
                "ratio": round(found.ratio, 3),
            }
        arms_out.append(
            {
                "name": name,
                "asking": ways[name],
                "answers": int(len(rows)),
                "curve": curve,
                "gain": gain,
            }
        )
    why_none = None
    if baseline is None:
        why_none = (
            f"the random arm has fewer than {fewest} answers outside the held-out ones: "
            "no curve to compare with yet"
        )
    return {
        "measure": measure,
        "answers": int(len(snap.answers)),
        "cutoff": int(snap.cutoff),
        "heldout": int(len(held_groups)),
        "heldout_screens": int(len(np.unique(held_groups))),
        "level": LEVEL,
        "fixed": fixed,
        "arms": arms_out,
        "why": why_none,
        "seconds": round(time.perf_counter() - began, 1),
    }

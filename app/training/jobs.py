"""The worker's side of training: fit a model version; queue refits as answers grow."""

from __future__ import annotations

import time
from typing import Any

from app.core import metrics
from app.core.db import unit_of_work
from app.models import ModelVersion
from app.training import gain, runs, service
from app.worker.loop import (
    JobCancelled,
    JobContext,
    JobFailed,
    JobInterrupted,
    handler,
    periodic,
)

TRAIN = service.TRAIN_JOB
GAIN = gain.GAIN_JOB
REFIT_CHECK_SECONDS = 5.0


@handler(TRAIN)
def train(context: JobContext) -> dict[str, Any]:
    version_id = context.params["version_id"]
    throttled = _Throttle(context)
    with metrics.fitting(), context.sessions() as session:
        try:
            version = runs.fit_version(
                session,
                version_id,
                throttled,
                on_ready=lambda session, version: context.succeed_in(session, _result(version)),
            )
        except runs.FitProblem as exc:
            raise JobFailed(str(exc)) from exc
        except runs.FitCancelled as exc:
            raise JobCancelled() from exc
        except JobCancelled:
            runs.mark_cancelled(session, version_id)
            raise
        except JobInterrupted:
            runs.mark_interrupted(session, version_id)
            raise
        except Exception as exc:
            runs.mark_attempt_failed(
                session,
                version_id,
                f"{exc.__class__.__name__}: {exc}",
                final=context.attempt >= context.max_attempts,
            )
            raise
        return _result(version)


def _result(version: ModelVersion) -> dict[str, Any]:
    return {
        "model_id": version.model_id,
        "version": version.number,
        "answers": version.answers_count,
        "metrics": version.metrics,
    }


@handler(GAIN)
def measure_gain(context: JobContext) -> dict[str, Any]:
    """What asking actively saved, for a model's ready version (GET …/gain asks)."""
    with metrics.fitting(), context.sessions() as session:
        try:
            return gain.measure_gain(
                session,
                context.params["model_id"],
                context.params["version_id"],
                _Throttle(context),
            )
        except gain.CannotMeasure as exc:
            raise JobFailed(str(exc)) from exc


class _Throttle:
    """Progress goes to the database at most once a second (and cancellation is seen
    there); a fit reports after every step."""

    def __init__(self, context: JobContext, seconds: float = 1.0) -> None:
        self.context = context
        self.seconds = seconds
        self.last = -1e9

    def __call__(self, fraction: float, message: str) -> None:
        self.context.check_stopping()
        now = time.monotonic()
        if now - self.last >= self.seconds:
            self.last = now
            self.context.progress(fraction, message)


@periodic(REFIT_CHECK_SECONDS)
def refit_check(sessions) -> None:
    """Settle versions whose job ended without them (a fit whose workers kept dying);
    queue the refits that growing answers call for; mark CompRF models ready as their
    builds complete."""
    with unit_of_work(sessions) as session:
        service.settle_ended_fits(session)
        runs.refit_due(session)
        runs.follow_builds(session)

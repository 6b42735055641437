"""GET /metrics, for Prometheus: not public. It answers a scraper that sends the
service's metrics token (CLOSER_METRICS_TOKEN) as its bearer; without the setting it is
off (404), and a wrong or missing token is a 401, decided before the database is read."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.core import metrics
from app.core.errors import NotFound
from app.models import Job, JobStatus

router = APIRouter(tags=["monitoring"])


class QueueDepth:
    """The jobs waiting now, by kind, read from the database at each scrape."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def collect(self):
        depth = metrics.GaugeMetricFamily(
            "closer_queue_depth", "Jobs queued and not yet started, by kind", labels=["kind"]
        )
        with self._sessions() as session:
            for kind, count in session.execute(
                select(Job.kind, func.count())
                .where(Job.status == JobStatus.queued)
                .group_by(Job.kind)
            ).all():
                depth.add_metric([kind], count)
        yield depth


# Prometheus's endpoint, not the JSON API: left out of its schema (the README documents it).
@router.get("/metrics", response_class=Response, include_in_schema=False)
def scrape(request: Request) -> Response:
    """Answers taken and the answer path's latency, fits running and their durations
    (every process of the service added up), and the queue's depth."""
    expected = request.app.state.settings.metrics_token
    if not expected:
        raise NotFound("metrics are off: set CLOSER_METRICS_TOKEN to the scraper's token")
    if not metrics.bearer_matches(request.headers.get("authorization"), expected):
        raise HTTPException(
            401,
            "send the metrics token as 'Authorization: Bearer <token>'",
            {"WWW-Authenticate": "Bearer"},
        )
    body = metrics.exposition(QueueDepth(request.app.state.session_factory))
    return Response(body, media_type=metrics.CONTENT_TYPE)

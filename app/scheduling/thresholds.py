"""Who the scheduler still asks, and whose answers count: a rater's attention checks,
agreement with the majority and median time per answer against the project's
thresholds, and the researcher's decision over them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Project, Rater


def failed_attention(*, project: Project, rater: Rater) -> str | None:
    """How the rater fell below the project's attention-check threshold, or None."""
    checks = rater.attention_passed + rater.attention_failed
    if (
        project.min_attention_accuracy is not None
        and checks >= project.quality_min_answers
        and rater.attention_passed / checks < project.min_attention_accuracy
    ):
        return (
            f"passed {rater.attention_passed} of {checks} attention checks "
            f"(below {project.min_attention_accuracy:.0%})"
        )
    return None


def too_fast(*, project: Project, rater: Rater) -> str | None:
    """How the rater answered faster than the project's speeder threshold, or None."""
    if (
        project.min_median_response_ms is not None
        and rater.median_response_ms is not None
        and rater.timed_answers >= project.quality_min_answers
        and rater.median_response_ms < project.min_median_response_ms
    ):
        return (
            f"answered in a median {rater.median_response_ms:,.0f} ms over "
            f"{rater.timed_answers} answers (below {project.min_median_response_ms:,} ms)"
        )
    return None


def screens_out(*, project: Project, rater: Rater) -> bool:
    """Whether the rater's session ends now on failed attention checks: the project has a
    code for that, they fell below its threshold, and the researcher has not included
    them whatever the thresholds say."""
    return (
        project.screened_out_code is not None
        and rater.screened_out_at is None
        and rater.exclusion_override is not False
        and failed_attention(project=project, rater=rater) is not None
    )


def apply_thresholds(*, project: Project, rater: Rater) -> bool:
    """Decide the rater's exclusion from the project's thresholds (unless the researcher
    decided it); returns whether the decision in force changed."""
    before = rater.excluded
    reasons = []
    attention = failed_attention(project=project, rater=rater)
    if attention is not None:
        reasons.append(attention)
    if (
        project.min_majority_agreement is not None
        and rater.majority_agreement is not None
        and rater.majority_compared >= project.quality_min_answers
        and rater.majority_agreement < project.min_majority_agreement
    ):
        reasons.append(
            f"agreed with the majority on {rater.majority_agreement:.0%} of "
            f"{rater.majority_compared} queries (below {project.min_majority_agreement:.0%})"
        )
    speed = too_fast(project=project, rater=rater)
    if speed is not None:
        reasons.append(speed)
    if rater.exclusion_override is not None:
        rater.excluded = rater.exclusion_override
        rater.exclusion_reason = "set by the researcher"
    else:
        rater.excluded = bool(reasons)
        rater.exclusion_reason = "; ".join(reasons)
    return rater.excluded != before


def excluded_rater_ids(session: Session, project_id: int) -> list[int]:
    return list(
        session.scalars(
            select(Rater.id).where(Rater.project_id == project_id, Rater.excluded.is_(True))
        )
    )

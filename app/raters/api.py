"""Researchers' view of their raters: quality, and the decision to exclude or include."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response

from app.auth.access import Action
from app.auth.deps import Changing, ErasingParticipants, Identifying, Viewing
from app.core.deps import SessionDep
from app.core.fields import INT8_MAX, RowId
from app.core.routes import StrictJSONRoute
from app.models import Rater
from app.models.rater import shown_name
from app.projects.service import get_project
from app.raters import arms, detail, erasure, participants, quality
from app.raters import service as raters
from app.raters.schemas import (
    ArmPlacesOut,
    ErasureLogOut,
    ErasureOut,
    ParticipantOut,
    RaterAnswerOut,
    RaterAnswersOut,
    RaterDecision,
    RaterOut,
    ResponseTimesOut,
)

router = APIRouter(
    prefix="/projects/{project_id}/raters", tags=["raters"], route_class=StrictJSONRoute
)


@router.get("", response_model=list[RaterOut])
def list_raters(
    project_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: Viewing,
    limit: Annotated[
        int | None, Query(ge=1, le=10_000, description="At most this many (default: all)")
    ] = None,
    offset: Annotated[int, Query(ge=0, le=INT8_MAX, description="Skip this many first")] = 0,
):
    """The project's raters in the order they joined, with their answers, attention checks
    and agreement with the majority (the workers keep it within a minute of the answers;
    POST .../raters/quality computes it now). `limit` and `offset` page through a large
    crowd."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    found = raters.list_raters(session=session, project=project, limit=limit, offset=offset)
    return [as_seen(request, rater) for rater in found]


@router.post("/quality", response_model=list[RaterOut])
def refresh_quality(project_id: RowId, session: SessionDep, researcher: Changing):
    """Compute each rater's agreement with the majority now and apply the thresholds."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    quality.refresh(session=session, project=project)
    return raters.list_raters(session=session, project=project)


@router.get("/{rater_id:int}", response_model=RaterOut)
def get_rater(
    project_id: RowId, rater_id: RowId, request: Request, session: SessionDep, researcher: Viewing
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return as_seen(request, raters.get_rater(session=session, project=project, rater_id=rater_id))


def as_seen(request: Request, rater: Rater) -> RaterOut:
    """The rater as the caller may see them: a viewer not allowed the participants' ids
    sees a pseudonym (rater-<id>) and no platform ids."""
    shown = RaterOut.model_validate(rater)
    if request.state.caller.may(Action.identify):
        return shown
    return shown.model_copy(update={"external_id": shown_name(rater, False), "platform_ids": {}})


@router.get("/{rater_id:int}/answers", response_model=RaterAnswersOut)
def rater_answers(
    project_id: RowId,
    rater_id: RowId,
    session: SessionDep,
    researcher: Viewing,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
):
    """Every comparison the rater answered, newest first, attention checks with their
    result, and their response times beside the project's."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    rater = raters.get_rater(session=session, project=project, rater_id=rater_id)
    return RaterAnswersOut(
        response_times=ResponseTimesOut(
            **detail.response_times(session=session, rater=rater).__dict__
        ),
        answers=[
            RaterAnswerOut(**{**answer.__dict__, "format": answer.format.name})
            for answer in detail.answers(session=session, rater=rater, limit=limit)
        ],
    )


@router.patch("/{rater_id:int}", response_model=RaterOut)
def decide(
    project_id: RowId,
    rater_id: RowId,
    body: RaterDecision,
    session: SessionDep,
    researcher: Changing,
):
    """Exclude or include a rater's answers (kept either way, and reversible)."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    rater = raters.get_rater(session=session, project=project, rater_id=rater_id)
    quality.decide(session=session, project=project, rater=rater, excluded=body.excluded)
    return rater


participants_router = APIRouter(
    prefix="/projects/{project_id}/participants", tags=["raters"], route_class=StrictJSONRoute
)


@participants_router.get("/arms", response_model=list[ArmPlacesOut])
def arm_places(project_id: RowId, session: SessionDep, researcher: Viewing):
    """Each arm's places now (the study's order): what allocation balances."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return [
        ArmPlacesOut(
            name=arm.name,
            target=arm.target,
            open=arm.open,
            taken=arm.taken,
            completed=arm.completed,
            live=arm.live,
            takes_newcomers=arm.takes_newcomers,
        )
        for arm in arms.arm_places(session=session, project=project)
    ]


@participants_router.get("", response_model=list[ParticipantOut])
def list_participants(
    project_id: RowId,
    session: SessionDep,
    researcher: Identifying,
    outcome: Annotated[
        participants.Outcome | None,
        Query(description="Only those whose session ended so (default: everyone)"),
    ] = None,
    limit: Annotated[
        int | None, Query(ge=1, le=10_000, description="At most this many (default: all)")
    ] = None,
    offset: Annotated[int, Query(ge=0, le=INT8_MAX, description="Skip this many first")] = 0,
):
    """Who took part and how their session ended, with the code they were shown and
    whether their answers are excluded (and why): what a researcher approves payments
    from. In the order they joined."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    found = participants.participants(session=session, project=project)
    chosen = participants.of_outcome(found, outcome)
    shown = chosen[offset : None if limit is None else offset + limit]
    return [ParticipantOut.model_validate(p, from_attributes=True) for p in shown]


@participants_router.get(
    "/export",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}, "description": "The same list as CSV"}},
)
def export_participants(project_id: RowId, session: SessionDep, researcher: Identifying):
    """The participants as a CSV a spreadsheet opens as it should (UTF-8 with a byte-order
    mark, no cell read as a formula), for a recruiting platform's bulk approval."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    found = participants.participants(session=session, project=project)
    return Response(
        participants.participants_csv(found, participants.question_names(project)),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="participants-{project.id}.csv"'},
    )


@participants_router.get("/erasures", response_model=list[ErasureLogOut])
def list_erasures(project_id: RowId, session: SessionDep, researcher: Viewing):
    """The participants erased at their request, oldest first: when, by whom and how much
    went, never who."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return erasure.erasures(session=session, project=project)


@participants_router.get("/{participant:path}/records")
def participant_records(
    project_id: RowId, participant: str, session: SessionDep, researcher: Identifying
) -> JSONResponse:
    """Everything Closer holds about one participant (by the platform id the list shows),
    for their data request: ids, session, consent, questionnaire, every screen they
    answered with its items by key, and their practice. A JSON file to send them."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    found = erasure.records(session=session, project=project, participant=participant)
    return JSONResponse(
        jsonable_encoder(found),
        headers={
            "Content-Disposition": f'attachment; filename="participant-records-{project.id}.json"'
        },
    )


@participants_router.delete("/{participant:path}", response_model=ErasureOut)
def erase_participant(
    project_id: RowId, participant: str, session: SessionDep, researcher: ErasingParticipants
):
    """Erase one participant at their request (the platform id as the participants list
    shows it): their answers, the screens they answered, practice, consent, questionnaire
    and ids go; unfinished builds replay and fitted models fit again without them. The
    erasure is logged without who it was. Irreversible; a place they were paid for stays
    taken."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return erasure.erase(
        session=session, project=project, researcher=researcher, participant=participant
    )

"""The workspace's project pages: the list (the workspace's home), a form to create a
project, and a project's overview with its study link, a preview and the answer rate."""

from __future__ import annotations

import secrets
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse

from app.auth.access import Action
from app.auth.deps import (
    ChangingCallerPage,
    ChangingPage,
    CreatingProjectsPage,
    DeletingProjectsPage,
    ExportingPage,
    ViewingAllPage,
    ViewingPage,
)
from app.builds.service import list_builds
from app.core import i18n
from app.core.db import roll_back
from app.core.deps import SessionDep, SettingsDep, public_study_url
from app.core.errors import InvalidUpload, Problem, ServiceError
from app.core.fields import RowId
from app.core.forms import read_form, read_model_form
from app.core.pages import render as page
from app.core.pages import render_page_or_part
from app.core.routes import StrictJSONRoute
from app.formats import study_format
from app.models import LabelType, TripletSource
from app.projects import archive, path_forms, service, wording_forms
from app.projects.schemas import (
    NULLABLE_RATING_SETTINGS,
    LinkChange,
    ProjectCreate,
    ProjectUpdate,
    RatingSettings,
    RatingSettingsUpdate,
    rating_setting_sections,
    setting_display,
)
from app.rating import service as rating
from app.training.service import latest_version, list_models
from app.uploads.api import as_uploaded

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)


def _projects_page(
    request: Request,
    session,
    researcher,
    *,
    only: frozenset[int] | None = None,
    form: dict | None = None,
    errors: dict | None = None,
    archive_problems: list | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    return page(
        request,
        "projects/list.html",
        {
            "researcher": researcher,
            "summaries": service.list_summaries(session=session, researcher=researcher, only=only),
            "label_types": list(LabelType),
            "form": form or {},
            "errors": errors or {},
            "archive_problems": archive_problems,
            "deleted": request.query_params.get("deleted", "")[:200],
            "import_key": secrets.token_urlsafe(16),
        },
        status_code,
    )


@router.get("/", response_class=HTMLResponse, name="projects")
def projects_page(request: Request, session: SessionDep, caller: ViewingAllPage):
    """The researcher's projects (a browser signed in with a limited token: those)."""
    return _projects_page(request, session, caller.researcher, only=caller.project_ids)


@router.post("/projects", response_class=HTMLResponse, name="create_project_form")
async def create_project(request: Request, session: SessionDep, researcher: CreatingProjectsPage):
    submitted = await read_model_form(
        request, ProjectCreate, unstripped=ProjectCreate.model_fields, blank_is_missing=False
    )
    body, form = submitted.body, submitted.shown
    if body is None:
        return _projects_page(
            request, session, researcher, form=form, errors=submitted.errors, status_code=422
        )
    project = service.create_project(
        session=session,
        owner=researcher,
        name=body.name,
        description=body.description,
        label_type=body.label_type,
    )
    return RedirectResponse(
        request.url_for("project_page", project_id=project.id).path, status_code=303
    )


@router.get("/projects/{project_id}", response_class=HTMLResponse, name="project_page")
def project_page(project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage):
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    return _overview(request, session, researcher, project)


def _work_in_hand(session, project) -> dict:
    """The builds and models at a glance: the newest build (its number in the project)
    and each model's newest version."""
    builds = list_builds(session=session, project=project)
    models = [
        (model, latest_version(session, model.id))
        for model in list_models(session=session, project=project)
    ]
    return {
        "build": builds[-1] if builds else None,
        "build_number": len(builds),
        "models": models,
    }


def _overview(request, session, researcher, project, link_error=None, status_code=200):
    context = {
        "researcher": researcher,
        "project": project,
        "summary": service.summarize(session=session, project=project),
        "rate": service.answer_rate(session=session, project=project),
        "study_url": public_study_url(request, project.public_slug),
        "link_error": link_error,
        "work": _work_in_hand(session, project),
    }
    return render_page_or_part(
        request,
        "projects/overview.html",
        "projects/_overview_figures.html",
        context,
        status_code=status_code,
    )


@router.post("/projects/{project_id}/link", response_class=HTMLResponse, name="set_link_form")
async def set_link(
    project_id: RowId, request: Request, session: SessionDep, researcher: ChangingPage
):
    """Open, pause or close the study link (the same service as PUT …/link)."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    submitted = await read_model_form(request, LinkChange, blank_is_missing=False)
    if submitted.body is None:
        problem = "; ".join(str(message) for message in submitted.errors.values())
        return _overview(request, session, researcher, project, problem, 422)
    try:
        service.set_link(session=session, project=project, state=submitted.body.state)
    except ServiceError as refused:
        roll_back(session)
        project = service.get_project(session=session, researcher=researcher, project_id=project_id)
        return _overview(
            request, session, researcher, project, str(refused.detail), refused.status_code
        )
    return RedirectResponse(
        request.url_for("project_page", project_id=project.id).path + "#study-link",
        status_code=303,
    )


@router.get("/projects/{project_id}/preview", response_class=HTMLResponse, name="project_preview")
def project_preview(
    project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage
):
    """The rater page as raters see it; choosing shows another comparison, and nothing
    is recorded."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    query = request.query_params
    asked = query.get("judgement")
    if asked is not None:  # another format's screen, before switching to it
        numbers = {
            name: int(text) if (text := query.get(name, "")).isdigit() and len(text) < 4 else None
            for name in ("shown", "picks")
        }
        project = service.previewed_as(project, judgement=asked[:32], **numbers)
    language = query.get("language")
    if language in project.languages:  # the screen in one of the study's languages
        request.state.wording = i18n.wording_for(language, project.languages, project.texts)
    return page(
        request,
        "projects/preview.html",
        {
            "researcher": researcher,
            "project": project,
            "state": rating.preview(session=session, project=project),
            "slug": project.public_slug,
            "previewing_format": asked is not None,
        },
    )


# The settings form, in the order a researcher thinks of them: (field, label, input).
SETTINGS_SECTIONS = rating_setting_sections()


def _settings_page(
    request: Request,
    researcher,
    project,
    *,
    values: dict | None = None,
    errors: dict | None = None,
    saved: bool = False,
    about: dict | None = None,
    status_code: int = 200,
    confirm_switch: bool = False,
) -> HTMLResponse:
    current = RatingSettings.model_validate(project).model_dump()
    mark = (current["practice"] or {}).get("pass_at_least")
    current["practice"] = {
        "lines": path_forms.practice_lines(current["practice"]),
        "pass_at_least": "" if mark is None else mark,
    }
    return page(
        request,
        "projects/settings.html",
        {
            "researcher": researcher,
            "project": project,
            "tab": "settings",
            "sections": SETTINGS_SECTIONS,
            "help": {
                name: field.description for name, field in RatingSettings.model_fields.items()
            },
            "choices": {
                name: setting_display(name).get("x-choices") for name in RatingSettings.model_fields
            },
            "values": {**current, **(values or {})},
            "errors": errors or {},
            "saved": saved,
            # The project's own card (name, description) and its deletion: values shown
            # back, errors per field, and whether a change was saved.
            "about": {"name": project.name, "description": project.description, **(about or {})},
            "confirm_switch": confirm_switch,
            "languages_spoken": [(code, i18n.language_name(code)) for code in i18n.languages()],
            "texts_as_lines": wording_forms.texts_as_lines,
        },
        status_code,
    )


@router.get("/projects/{project_id}/settings", response_class=HTMLResponse, name="settings_page")
def settings_page(
    project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage
):
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    return _settings_page(request, researcher, project)


@router.post("/projects/{project_id}/settings", response_class=HTMLResponse)
async def save_settings(
    project_id: RowId, request: Request, session: SessionDep, caller: ChangingCallerPage
):
    researcher = caller.researcher
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    listed = [field for _, fields in SETTINGS_SECTIONS for field in fields]
    # An emptied optional field is "not set"; an emptied required one is refused by the
    # same schema as the API's.
    submitted = await read_model_form(
        request,
        RatingSettingsUpdate,
        fields=[
            name
            for name, _, kind in listed
            if kind not in ("consent", "questionnaire", "arms", "practice", "languages", "texts")
        ],
        checkboxes=[name for name, _, kind in listed if kind == "checkbox"],
        unstripped=[name for name, _, kind in listed if kind == "textarea"],
        nullable=NULLABLE_RATING_SETTINGS,
        blank_is_missing=False,
    )
    body, values, errors = submitted.body, submitted.shown, submitted.errors
    form = await request.form()
    consent, values["consent"], consent_error = path_forms.consent_from(form)
    questionnaire, values["questionnaire"], questionnaire_error = path_forms.questionnaire_from(
        form
    )
    study_arms, values["arms"], arms_error = path_forms.arms_from(form, project.arms)
    practice, values["practice"], practice_error = path_forms.practice_from(form)
    languages, typed_languages, languages_error = wording_forms.languages_from(form)
    texts, typed_texts, texts_error = wording_forms.texts_from(form)
    if "languages" in form:
        values["languages"] = typed_languages
    if "texts" in form:
        values["texts"] = typed_texts
    if languages_error:
        errors["languages"], body = languages_error, None
    if texts_error:
        errors["texts"], body = texts_error, None
    if arms_error:
        errors["arms"], body = arms_error, None
    if practice_error:
        errors["practice"], body = practice_error, None
    if consent_error:
        errors["consent"], body = consent_error, None
    if questionnaire_error:
        errors["questionnaire"], body = questionnaire_error, None
    switching = _unconfirmed_format_switch(session, project, body, form)
    if switching is not None:
        return _settings_page(
            request,
            researcher,
            project,
            values=values,
            errors={"judgement": switching},
            status_code=409,
            confirm_switch=True,
        )
    if body is not None:
        # The whole body under the API's schema: what a field's own reading let through
        # (a language twice, an over-long wording) is a message beside it, as any field's.
        body, invalid = read_form(
            RatingSettingsUpdate,
            {
                **body.model_dump(exclude_unset=True),
                "consent": consent,
                "questionnaire": questionnaire,
                "arms": study_arms,
                "practice": practice,
                # (a form without the fields leaves them as they are)
                **({"languages": languages} if "languages" in form else {}),
                **({"texts": texts} if "texts" in form else {}),
            },
        )
        errors.update(invalid)
    if body is None:
        return _settings_page(
            request, researcher, project, values=values, errors=errors, status_code=422
        )
    try:
        service.update_rating(
            session=session,
            project=project,
            changes=body.model_dump(exclude_unset=True),
            may_redirect_raters=caller.may(Action.redirect_raters),
        )
    except ServiceError as refused:
        roll_back(session)
        project = service.get_project(session=session, researcher=researcher, project_id=project_id)
        return _settings_page(
            request,
            researcher,
            project,
            values=values,
            errors={"form": str(refused.detail)},
            status_code=refused.status_code,
        )
    return _settings_page(request, researcher, project, saved=True)


def _unconfirmed_format_switch(session, project, body, form) -> str | None:
    """What switching the study's format would do, when it has answers and the form did
    not confirm the switch (None: nothing to confirm)."""
    if body is None or body.judgement is None or form.get("confirm_format_switch") == "yes":
        return None
    if body.judgement == project.judgement.name:
        return None
    answers = service.project_counts(session=session, project=project)["triplet_count"]
    if not answers:
        return None
    new = study_format(body.judgement)
    return (
        f"This study has {answers:,} answers from {project.judgement.name} screens. From their "
        f"next screen every rater gets {new.label or new.name} screens instead; the answers "
        "so far are kept. Preview the new screen, then tick the box below and save again."
    )


@router.post("/projects/{project_id}/about", response_class=HTMLResponse, name="about_form")
async def save_about(
    project_id: RowId, request: Request, session: SessionDep, researcher: ChangingPage
):
    """The project's name and description, as PATCH /projects/{id} changes them."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    submitted = await read_model_form(
        request,
        ProjectUpdate,
        fields=("name", "description"),
        unstripped=("description",),
        blank_is_missing=False,
    )
    if submitted.body is None:
        return _settings_page(
            request,
            researcher,
            project,
            about={**submitted.shown, "errors": submitted.errors},
            status_code=422,
        )
    service.rename(
        session=session, project=project, changes=submitted.body.model_dump(exclude_unset=True)
    )
    return _settings_page(request, researcher, project, about={"saved": True})


@router.post(
    "/projects/{project_id}/delete", response_class=HTMLResponse, name="delete_project_form"
)
async def delete_project_form(
    project_id: RowId, request: Request, session: SessionDep, researcher: DeletingProjectsPage
):
    """Deletes the project once its name is typed (what DELETE /projects/{id} does), then
    back to the projects list."""
    typed = str((await request.form()).get("confirm_name", ""))[:300]
    project = service.get_project(
        session=session, researcher=researcher, project_id=project_id, to_delete=True
    )
    if typed.strip() != project.name.strip():
        return _settings_page(
            request,
            researcher,
            project,
            about={"delete_error": f"type the project's name, {project.name!r}, to delete it"},
            status_code=422,
        )
    service.delete_project(session=session, store=request.app.state.images, project=project)
    gone = urlencode({"deleted": project.name})
    return RedirectResponse(request.url_for("projects").path + f"?{gone}", status_code=303)


@router.get("/projects/{project_id}/downloads", response_class=HTMLResponse, name="downloads_page")
def downloads_page(
    project_id: RowId, request: Request, session: SessionDep, researcher: ExportingPage
):
    """Links to the API's streamed exports: answers (filtered), items, and each model's
    embedding and predicted labels."""
    from app.builds.routing import newest_routing
    from app.training import kinds
    from app.training.service import list_models, newest_ready

    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    models = [
        (model, kinds.of(model.kind), newest_ready(session, model.id))
        for model in list_models(session=session, project=project)
    ]
    routed = {
        model.id: newest_routing(session, model.build_id, complete=True)
        for model, _, _ in models
        if model.build_id is not None
    }
    return page(
        request,
        "projects/downloads.html",
        {
            "researcher": researcher,
            "project": project,
            "tab": "downloads",
            "models": models,
            "routed": routed,
            "sources": [source.value for source in TripletSource],
        },
    )


@router.get("/projects/{project_id}/downloads/answers", name="download_answers")
def download_answers(
    project_id: RowId, request: Request, session: SessionDep, researcher: ExportingPage
):
    """The downloads form's answer filters, handed to the API's export without the ones
    left empty."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    wanted = {
        name: value
        for name in ("format", "source", "rater", "raters")
        if (value := request.query_params.get(name, "").strip())
    }
    target = f"/api/v1/projects/{project.id}/triplets/export"
    return RedirectResponse(target + (f"?{urlencode(wanted)}" if wanted else ""), status_code=303)


@router.post("/project-archives", response_class=HTMLResponse, name="import_project_form")
def import_project(
    file: UploadFile,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    researcher: CreatingProjectsPage,
    import_key: Annotated[str | None, Form(max_length=100)] = None,
):
    """A project from an archive downloaded from any Closer server (its overview page)."""
    try:
        project = archive.import_archive(
            session=session,
            settings=settings,
            store=request.app.state.images,
            owner=researcher,
            upload=as_uploaded(file),
            idempotency_key=import_key or None,
        ).project
    except InvalidUpload as rejected:
        roll_back(session)
        return _projects_page(
            request, session, researcher, archive_problems=rejected.problems, status_code=422
        )
    except ServiceError as refused:
        roll_back(session)
        problem = Problem(file=file.filename or "archive", message=str(refused.detail))
        return _projects_page(
            request, session, researcher, archive_problems=[problem], status_code=422
        )
    return RedirectResponse(
        request.url_for("project_page", project_id=project.id).path, status_code=303
    )

"""The ASGI application: `create_app()` wires settings, database, routers and pages."""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import ChoiceLoader, FileSystemLoader, FunctionLoader
from starlette.routing import BaseRoute

import app.jobs  # noqa: F401 (registers every job kind and the workers' upkeep)
from app import formats
from app.auth.access import Action, Caller
from app.auth.api import router as tokens_router
from app.auth.password_checks import PasswordChecks
from app.auth.service import check_stand_in, is_live_token, web_session_caller
from app.auth.views import router as auth_pages
from app.builds.api import router as builds_router
from app.builds.api import routings as routings_router
from app.builds.views import router as build_pages
from app.core import metrics
from app.core.caches import Caches, UseCaches
from app.core.config import Settings, get_settings
from app.core.cors import RaterOrigins
from app.core.db import make_engine, make_session_factory, unit_of_work
from app.core.deps import SESSION_COOKIE, SignInRequired, csrf_token
from app.core.errors import ERROR_RESPONSES, NotFound, ServiceError, install_error_handlers
from app.core.headers import SecurityHeaders
from app.core.i18n import ENGLISH
from app.core.limits import BodyLimits, ResearcherTokens, shorten_access_lines
from app.core.pages import path_for
from app.core.signing import RaterTokens, WorkspaceCookies
from app.core.templating import install_filters
from app.core.throttle import Throttle, ThrottleRaterRoutes
from app.items.api import router as items_router
from app.items.images import ImageStore
from app.items.views import router as item_pages
from app.members.api import joining as invitations_router
from app.members.api import router as members_router
from app.members.views import router as member_pages
from app.models import Rater
from app.models.rater import shown_name
from app.monitoring.api import router as metrics_router
from app.predictions.api import router as serving_router
from app.projects.api import archives as project_archives_router
from app.projects.api import router as projects_router
from app.projects.views import router as project_pages
from app.raters.api import participants_router
from app.raters.api import router as raters_router
from app.raters.views import router as rater_pages
from app.rating.api import router as rating_router
from app.rating.views import not_found_page
from app.rating.views import router as rating_pages
from app.scheduling.answer_function import AnswerFunction
from app.scheduling.draws import scheduler_random
from app.training.api import labelling_router
from app.training.api import router as models_router
from app.training.gain import GAIN_JOB
from app.training.service import TRAIN_JOB
from app.training.views import router as model_pages
from app.triplets.api import judgements_router
from app.triplets.api import router as triplets_router
from app.uploads.views import router as upload_pages
from app.webhooks.api import router as webhooks_router
from app.webhooks.views import router as webhook_pages
from app.worker.loop import Worker, make_kernels_ready, start_in_thread

ROOT = Path(__file__).resolve().parent.parent
API_PREFIX = "/api/v1"
TRAINING_KINDS = (TRAIN_JOB, GAIN_JOB)
SHUTDOWN_WAIT_SECONDS = 5.0  # how long a stop waits for the workers to hand back their jobs
# Front-end packages from npm (package.json), each served from /static/vendor/<name>.
VENDOR_PACKAGES = {
    "htmx": "htmx.org/dist",
    "echarts": "echarts/dist",
    "swagger-ui": "swagger-ui-dist",
    "redoc": "redoc/bundles",
}


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service over one database: its state, middleware, error pages and routes."""
    settings = settings or get_settings()
    settings.check_startable()
    engine = make_engine(
        settings.resolved_database_url,
        pool_size=settings.database_pool_size,
        max_overflow=settings.database_max_overflow,
        sqlite_busy_seconds=settings.sqlite_busy_seconds,
    )
    answer_function = None
    if engine.dialect.name == "postgresql" and settings.answer_function:
        answer_function = AnswerFunction(
            settings.resolved_database_url, size=settings.answer_pool_size
        )
    app = FastAPI(
        title="Closer",
        summary="Learn from human 'which is closer?' judgements.",
        version="0.1.0",
        lifespan=_lifespan,
        # /docs and /redoc are pages of our own (below): FastAPI's load Swagger UI and
        # ReDoc from a CDN, blank on a lab server without internet.
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json" if settings.api_docs else None,
    )
    app.state.settings = settings
    app.state.caches = Caches()
    app.state.engine = engine
    app.state.session_factory = make_session_factory(engine)
    app.state.answer_function = answer_function
    app.state.scheduler_random = scheduler_random(settings.scheduler_seed)
    app.state.images = ImageStore(settings.media_dir)
    app.state.rater_tokens = RaterTokens(settings.effective_secret_key)
    app.state.workspace_cookies = WorkspaceCookies(settings.effective_secret_key)
    _add_middleware(app, settings)
    templates = Jinja2Templates(
        directory=ROOT / "templates",
        context_processors=[
            lambda request: {
                "csrf": csrf_token(request),
                # Who the page is for, as the access rules see them (app/auth/deps.py).
                "caller": getattr(request.state, "caller", None),
                "rater_name": functools.partial(
                    _rater_name, getattr(request.state, "caller", None)
                ),
                # A rater page's language and the study's words (app/rating/views.py).
                "wording": getattr(request.state, "wording", ENGLISH),
            }
        ],
    )
    # A format kept outside templates/ brings its own (app/formats).
    templates.env.loader = ChoiceLoader(
        [FileSystemLoader(ROOT / "templates"), FunctionLoader(formats.template_source)]
    )
    install_filters(templates.env)
    templates.env.globals["path_for"] = path_for
    app.state.templates = templates
    _add_error_pages(app, templates)
    _add_routes(app, settings, templates)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI):
    """Open the answer function's pool and, in the embedded default, start the workers."""
    settings, answer_function = app.state.settings, app.state.answer_function
    if answer_function is not None:
        await answer_function.open()
    workers: list[Worker] = []
    if settings.runs_worker_in_process:
        # Two threads: a long training fit never holds up the build steps raters need.
        common = {
            "poll_seconds": settings.worker_poll_seconds,
            "heartbeat_seconds": settings.worker_heartbeat_seconds,
            "stale_after_seconds": settings.worker_stale_seconds,
        }
        workers = [
            Worker(
                app.state.session_factory,
                skip_kinds=TRAINING_KINDS,
                images=app.state.images,
                **common,
            ),
            Worker(app.state.session_factory, kinds=TRAINING_KINDS, upkeep=False, **common),
        ]
        for number, worker in enumerate(workers):
            start_in_thread(worker, name=f"closer-worker-{number}", caches=app.state.caches)
        if settings.worker_compile_kernels:
            make_kernels_ready(lambda line: print(line, file=sys.stderr, flush=True))
    if gc.get_freeze_count() == 0:
        # What startup loaded (numpy, scikit-learn, numba, SQLAlchemy: millions of
        # objects) lives as long as the process. Frozen, the collector no longer
        # walks it: a full collection paused every request for 150-300 ms before.
        gc.collect()
        gc.freeze()
    yield
    for worker in workers:
        worker.stop()
    for worker in workers:
        # A fit in hand reports within a second or so, then is handed back to the queue
        # for the next start; one that does not is taken over once its heartbeat is stale.
        await asyncio.to_thread(worker.stopped.wait, SHUTDOWN_WAIT_SECONDS)
    metrics.process_ended()
    if answer_function is not None:
        await answer_function.close()
    app.state.engine.dispose()


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    """Body limits, the raters' rate limits, security headers, the app's caches."""

    def verify_token(token: str) -> bool:
        with unit_of_work(app.state.session_factory) as session:
            cookie = token.removeprefix(SESSION_COOKIE + "=")
            if cookie != token:
                key = app.state.workspace_cookies.session_key(cookie)
                return key is not None and web_session_caller(session=session, key=key) is not None
            return is_live_token(session=session, token=token)

    app.state.password_checks = PasswordChecks(
        settings.password_checks_at_once, stand_in_check=check_stand_in
    )
    shorten_access_lines()
    researcher_tokens = ResearcherTokens(verify_token, session_cookie=SESSION_COOKIE)
    app.state.throttle = Throttle(
        joins_per_address=settings.rate_limit_joins_per_address,
        joins_per_study=settings.rate_limit_joins_per_study,
        new_raters_per_study=settings.rate_limit_new_raters_per_study,
        reserved_for_platform_ids=settings.new_raters_reserved_for_platform_ids,
        answers_per_session=settings.rate_limit_answers_per_session,
        sign_ins_per_address=settings.rate_limit_sign_ins_per_address,
        is_researcher=researcher_tokens,
        enabled=settings.rate_limits,
    )
    app.add_middleware(
        BodyLimits,
        public_bytes=settings.max_public_body_bytes,
        json_bytes=settings.max_json_bytes,
        upload_bytes=settings.max_upload_bytes,
        researcher_tokens=researcher_tokens,
    )
    app.add_middleware(ThrottleRaterRoutes, throttle=app.state.throttle)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(UseCaches, caches=app.state.caches)
    if settings.rater_origin_list:
        # Outermost: a preflight is answered before the limits and body checks.
        app.add_middleware(RaterOrigins, origins=settings.rater_origin_list)
    install_error_handlers(app)


def _add_error_pages(app: FastAPI, templates: Jinja2Templates) -> None:
    """A refusal is JSON for API clients and a page for browsers (raters get theirs)."""

    def wants_page(request: Request) -> bool:
        return not request.url.path.startswith(API_PREFIX) and "text/html" in request.headers.get(
            "accept", ""
        )

    def error_page(request: Request, exc: ServiceError) -> HTMLResponse:
        return templates.TemplateResponse(
            request,
            "error.html",
            {"message": exc.detail, "status": exc.status_code},
            status_code=exc.status_code,
        )

    @app.exception_handler(NotFound)
    def _not_found(request: Request, exc: NotFound):
        # A rater who opens a wrong link reads a page, not JSON; so does a researcher.
        if wants_page(request):
            if request.url.path.startswith("/r/"):
                return not_found_page(request, exc)
            return error_page(request, exc)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

    @app.exception_handler(SignInRequired)
    def _sign_in_first(request: Request, exc: SignInRequired):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        login = "/login" if target == "/" else "/login?" + urlencode({"next": target})
        if request.headers.get("HX-Request"):
            # htmx would swap a redirect's page into the part it refreshes: send the
            # whole browser instead.
            return HTMLResponse("", status_code=200, headers={"HX-Redirect": login})
        return RedirectResponse(login, status_code=303)

    @app.exception_handler(ServiceError)
    def _service_refused(request: Request, exc: ServiceError):
        # A form whose action the service refuses (cancel a finished build, say) shows
        # the reason on a page; an API client gets it as JSON.
        if wants_page(request) and not request.url.path.startswith("/r/"):
            return error_page(request, exc)
        return JSONResponse(
            {"detail": exc.detail},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )


def _rater_name(caller: Caller | None, rater: Rater) -> str:
    """A rater as this page's caller may see them: by platform id, or by pseudonym."""
    return shown_name(rater, caller is None or caller.may(Action.identify))


@functools.cache
def _closer_routes() -> tuple[BaseRoute, ...]:
    """The JSON API under /api/v1 and the pages, gathered once per process and shared by
    every app built in it. FastAPI analyses a route's parameters for each include (when
    included, or, from 0.16x, on the app's first request: ~0.15 s for ours); the routes
    an include made are kept, so a process that builds many apps (the tests: one a
    test) pays it once. Shared routes answer for any app: they read the app's state from
    the request, and no app overrides dependencies."""
    routes = APIRouter()
    # Routes match in order: the raters' answer route, the busiest by far, first.
    for router in (
        rating_router,
        projects_router,
        project_archives_router,
        items_router,
        triplets_router,
        judgements_router,
        builds_router,
        routings_router,
        models_router,
        labelling_router,
        serving_router,
        raters_router,
        participants_router,
        tokens_router,
        members_router,
        invitations_router,
        webhooks_router,
    ):
        routes.include_router(router, prefix=API_PREFIX, responses=ERROR_RESPONSES)

    routes.include_router(metrics_router, responses=ERROR_RESPONSES)

    @routes.get(f"{API_PREFIX}/health", tags=["service"], responses={503: ERROR_RESPONSES[503]})
    def health() -> dict[str, str]:
        return {"status": "ok"}

    for pages in (
        rating_pages,
        auth_pages,
        project_pages,
        upload_pages,
        rater_pages,
        build_pages,
        model_pages,
        item_pages,
        member_pages,
        webhook_pages,
    ):
        routes.include_router(pages)
    return tuple(routes.routes)


def _add_routes(app: FastAPI, settings: Settings, templates: Jinja2Templates) -> None:
    """The JSON API under /api/v1, the pages, the front-end packages and static files."""
    app.router.routes.extend(_closer_routes())
    # Mounted before /static, which would otherwise answer for them.
    for name, folder in VENDOR_PACKAGES.items():
        app.mount(
            f"/static/vendor/{name}",
            StaticFiles(directory=ROOT / "node_modules" / folder, check_dir=False),
            name=f"vendor-{name}",
        )
    app.mount("/static", StaticFiles(directory=ROOT / "static"), name="static")
    if settings.api_docs:
        _add_api_docs(app, templates)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        # Browsers ask for it on every site, whatever the page links to.
        return FileResponse(
            ROOT / "static" / "favicon.ico",
            media_type="image/vnd.microsoft.icon",
            headers={"Cache-Control": "public, max-age=86400"},
        )


def _add_api_docs(app: FastAPI, templates: Jinja2Templates) -> None:
    """Swagger UI at /docs and ReDoc at /redoc, from the npm packages served here."""
    context = {"openapi_url": app.openapi_url, "oauth2_redirect_url": "/docs/oauth2-redirect"}

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def swagger_ui(request: Request):
        return templates.TemplateResponse(request, "docs/swagger.html", context)

    @app.get("/docs/oauth2-redirect", response_class=HTMLResponse, include_in_schema=False)
    def swagger_ui_oauth2_redirect(request: Request):
        return templates.TemplateResponse(request, "docs/oauth2-redirect.html", context)

    @app.get("/redoc", response_class=HTMLResponse, include_in_schema=False)
    def redoc(request: Request):
        return templates.TemplateResponse(request, "docs/redoc.html", context)

"""The `closer` command."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from app.core import metrics_folder
from app.core.config import ConfigurationError, Mode, Settings, get_settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.monitoring.worker_endpoint import WorkerMetricsEndpoint

cli = typer.Typer(
    help="Closer: learn from human 'which is closer?' judgements.",
    no_args_is_help=True,
    add_completion=False,
)


@contextmanager
def _database(settings) -> Iterator[Session]:
    """One unit of work on the configured database (migrated first on the embedded
    default), for commands that change a few rows."""
    from app.core.db import make_engine, make_session_factory, unit_of_work

    _ensure_schema(settings)
    engine = make_engine(settings.resolved_database_url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            yield session
    finally:
        engine.dispose()


class NoiseModel(StrEnum):
    uniform = "uniform"
    human = "human"


def _fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


@cli.command()
def migrate(
    revision: Annotated[str, typer.Option(help="Target revision")] = "head",
    downgrade: Annotated[bool, typer.Option(help="Downgrade to REVISION instead")] = False,
) -> None:
    """Apply database migrations (DATABASE_URL, or the embedded SQLite file)."""
    from app.core import migrations

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    if downgrade:
        migrations.downgrade(url, revision)
    else:
        migrations.upgrade(url, revision)
    typer.echo(f"database at {revision}: {_safe_url(url)}", err=True)


@cli.command("create-token")
def create_token(
    name: Annotated[str, typer.Option(help="Researcher the token belongs to (created if new)")],
    admin: Annotated[bool, typer.Option(help="Let this researcher see every project")] = False,
    label: Annotated[str, typer.Option(help="A note to tell tokens apart")] = "",
    scope: Annotated[
        str,
        typer.Option(
            help="What it may do: predict (predictions, embeddings, distances, neighbours, "
            "models' status), read (predict, plus reading and downloading), write (read, "
            "plus uploads, builds, models, settings), admin (everything, tokens included)"
        ),
    ] = "admin",
    projects: Annotated[
        str,
        typer.Option(
            help="Project ids it may touch, comma-separated (default: all, later ones too)"
        ),
    ] = "",
    expires: Annotated[
        str,
        typer.Option(help="When it stops working: a date (end of that day, UTC) or an ISO time"),
    ] = "",
) -> None:
    """Print a new API token (only its hash is stored, so keep it)."""
    from app.auth.service import create_token as make_token
    from app.core.errors import ServiceError
    from app.models import TokenScope

    if scope not in TokenScope.__members__:
        _fail(f"--scope: '{scope[:20]}' is not one of {', '.join(TokenScope)}")
    project_ids = None
    if projects.strip():
        try:
            project_ids = [int(part) for part in projects.split(",") if part.strip()]
        except ValueError:
            _fail(f"--projects: '{projects[:60]}' is not a comma-separated list of project ids")
    try:
        with _database(get_settings()) as session:
            token = make_token(
                session=session,
                researcher_name=name,
                admin=admin,
                token_name=label,
                scope=TokenScope(scope),
                project_ids=project_ids,
                expires_at=_expiry(expires),
            )
    except ServiceError as error:
        _fail(str(error.detail))
    typer.echo(token)


def _expiry(text: str) -> datetime | None:
    """A date is the end of that day, UTC; a time without a zone is UTC."""
    from app.auth.service import end_of_day

    text = text.strip()
    if not text:
        return None
    try:
        if len(text) == 10:
            return end_of_day(date.fromisoformat(text))
        moment = datetime.fromisoformat(text)
    except ValueError:
        _fail(f"--expires: '{text[:40]}' is neither a date (2027-01-31) nor an ISO time")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@cli.command("create-researcher")
def create_researcher(
    email: Annotated[str, typer.Option(help="Signs in to the workspace with this address")],
    password: Annotated[
        str,
        typer.Option(
            prompt=True,
            hide_input=True,
            confirmation_prompt=True,
            envvar="CLOSER_RESEARCHER_PASSWORD",
            help="Asked for when not given (or set CLOSER_RESEARCHER_PASSWORD)",
        ),
    ],
    name: Annotated[
        str | None,
        typer.Option(help="An existing researcher (from create-token) to give this sign-in"),
    ] = None,
    admin: Annotated[bool, typer.Option(help="Let this researcher see every project")] = False,
) -> None:
    """Create a researcher who signs in to the workspace with an email and password (run
    it again for the same email to set a new password)."""
    from app.auth.service import set_researcher_password
    from app.core.errors import ServiceError

    settings = get_settings()
    try:
        with _database(settings) as session:
            researcher, created = set_researcher_password(
                session=session, email=email, password=password, name=name, admin=admin
            )
            summary = f"{researcher.email}{' (admin)' if researcher.is_admin else ''}"
    except ServiceError as error:
        _fail(str(error.detail))
    action = "created" if created else "new password for"
    typer.echo(f"{action} {summary}: sign in at {local_url(settings)}/login")


@cli.command("revoke-token")
def revoke_token(
    token: Annotated[
        str, typer.Argument(help="The token, or how it starts as the tokens page lists it")
    ],
) -> None:
    """Revoke an API token, and the tokens made with it: every web process refuses them
    from the next request on."""
    from app.auth.service import revoke_token as revoke
    from app.auth.service import tokens_by_prefix

    with _database(get_settings()) as session:
        found = tokens_by_prefix(session=session, prefix=token.removesuffix("…"))
        if len(found) != 1:
            _fail(
                f"{len(found)} tokens start with '{token[:20]}': give the whole token"
                if found
                else f"no token starts with '{token[:20]}'"
            )
        revoked = revoke(session=session, token=found[0])
        described = f"{found[0].prefix}… ({found[0].name or 'unnamed'})"
    made = revoked - 1 if revoked else 0
    also = f" and the {made} token{'' if made == 1 else 's'} made with it" if made else ""
    typer.echo(f"revoked {described}{also}")


@cli.command()
def demo(
    items: Annotated[int, typer.Option(help="Digits in the project", min=20, max=1797)] = 300,
) -> None:
    """Create the demo project once: handwritten digits as images with labels and pixel
    features, and a CompRF build started so raters have comparisons to answer."""
    from app.core.db import make_engine, make_session_factory, unit_of_work
    from app.demo.service import create_demo, describe
    from app.items.images import ImageStore

    settings = get_settings()
    _ensure_schema(settings)
    settings.media_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.resolved_database_url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            project, build, created = create_demo(
                session=session,
                settings=settings,
                store=ImageStore(settings.media_dir),
                n_items=items,
                n_test=max(items // 6, 2),
            )
            summary = (
                f"project {project.id} '{project.name}': {describe(build)}; rate at "
                f"{local_url(settings)}/r/{project.public_slug}"
            )
    finally:
        engine.dispose()
    typer.echo(("created " if created else "already there: ") + summary)


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface (CLOSER_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (CLOSER_PORT)")] = None,
    workers: Annotated[int, typer.Option(help="Web processes (PostgreSQL only)")] = 1,
) -> None:
    """Run the web service; on the embedded default, migrate first."""
    import uvicorn

    settings = get_settings()
    try:
        settings.check_startable()
    except ConfigurationError as exc:
        _fail(str(exc))
    if workers > 1 and settings.is_sqlite:
        _fail("several web processes need PostgreSQL (set DATABASE_URL)")
    _ensure_schema(settings)
    host = host or settings.host
    port = port or settings.port
    typer.echo(
        f"Closer listening on http://{host}:{port}  (API docs: http://{host}:{port}/docs; "
        f"database: {_safe_url(settings.resolved_database_url)})",
        err=True,
    )
    base_url = local_url(settings.model_copy(update={"host": host, "port": port}))
    for line in (_workspace_line(settings, base_url), _demo_line(settings, base_url)):
        if line:
            typer.echo(line, err=True)
    metrics_folder.prepare(settings.data_dir)
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level,
    )


@cli.command()
def worker(
    until_idle: Annotated[bool, typer.Option(help="Exit once no job is left")] = False,
    kinds: Annotated[
        str | None,
        typer.Option(help="Take only these job kinds (comma-separated), e.g. train_model"),
    ] = None,
    skip_kinds: Annotated[
        str | None, typer.Option(help="Never take these job kinds (comma-separated)")
    ] = None,
    nice: Annotated[
        int, typer.Option(help="Lower this process's CPU priority by this much (0..19)")
    ] = 0,
    background: Annotated[
        bool,
        typer.Option(
            help="Run jobs on CPU time nothing else wants (Linux SCHED_IDLE; elsewhere nice 19), "
            "the upkeep and the heartbeat at normal priority: for training workers beside web"
            " processes"
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve this worker's counts at GET /metrics on this port (on CLOSER_HOST, "
            "with CLOSER_METRICS_TOKEN) for Prometheus (CLOSER_WORKER_METRICS_PORT): a "
            "worker in a container or on a machine of its own",
        ),
    ] = None,
) -> None:
    """Run jobs from the database; start as many as you like, on any machines."""
    import gc
    import os
    import signal

    settings = get_settings()
    metrics_port = metrics_port or settings.worker_metrics_port
    if metrics_port is None:
        # On the machine of a `closer serve`, the web's scrape counts this worker too.
        metrics_folder.join(settings.data_dir)
    import app.jobs  # noqa: F401 (registers every job kind)
    from app.core import metrics
    from app.core.db import make_engine, make_session_factory
    from app.items.images import ImageStore
    from app.worker.loop import Worker, make_kernels_ready

    _ensure_schema(settings)
    endpoint = _worker_metrics_endpoint(settings, metrics_port)
    engine = make_engine(settings.resolved_database_url)
    if nice:
        os.nice(max(0, min(nice, 19)))
    runner = Worker(
        make_session_factory(engine),
        poll_seconds=settings.worker_poll_seconds,
        heartbeat_seconds=settings.worker_heartbeat_seconds,
        stale_after_seconds=settings.worker_stale_seconds,
        kinds=_kind_list(kinds),
        skip_kinds=_kind_list(skip_kinds) or (),
        images=ImageStore(settings.media_dir),
    )
    if background:
        runner.yield_cpu()
    # Finish the job in hand, then exit: a killed worker's job is retried elsewhere anyway.
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    signal.signal(signal.SIGINT, lambda *_: runner.stop())
    typer.echo(
        f"worker {runner.worker_id} on {_safe_url(settings.resolved_database_url)}", err=True
    )
    if settings.worker_compile_kernels and not until_idle:
        make_kernels_ready(lambda line: typer.echo(line, err=True))
    # What the imports loaded lives as long as the process: frozen, the collector no
    # longer walks it each time a fit's read makes a few hundred thousand objects.
    gc.collect()
    gc.freeze()
    try:
        done = runner.run(until_idle=until_idle)
    finally:
        if endpoint is not None:
            endpoint.close()
        engine.dispose()
        metrics.process_ended()
    typer.echo(f"worker {runner.worker_id} stopped after {done} jobs", err=True)


def _worker_metrics_endpoint(settings: Settings, port: int | None) -> WorkerMetricsEndpoint | None:
    """This worker's own GET /metrics, where a port is given and metrics are on."""
    if port is None:
        return None
    if not settings.metrics_token:
        typer.echo(
            f"metrics off: port {port} stays closed until CLOSER_METRICS_TOKEN is set",
            err=True,
        )
        return None
    from app.monitoring.worker_endpoint import WorkerMetricsEndpoint

    try:
        endpoint = WorkerMetricsEndpoint(settings.host, port, settings.metrics_token)
    except OSError as exc:
        _fail(f"cannot serve metrics on {settings.host}:{port}: {exc.strerror or exc}")
    typer.echo(f"metrics at http://{settings.host}:{endpoint.port}/metrics", err=True)
    return endpoint


def _kind_list(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    import app.jobs

    kinds = tuple(kind.strip() for kind in text.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in app.jobs.KINDS]
    if unknown:
        raise typer.BadParameter(
            f"unknown job kind(s) {unknown}; known: {', '.join(app.jobs.KINDS)}"
        )
    return kinds


@cli.command()
def simulate(
    project: Annotated[int, typer.Option(help="Project id")],
    token: Annotated[
        str,
        typer.Option(envvar="CLOSER_TOKEN", help="A researcher token (to read item features)"),
    ],
    url: Annotated[
        str | None,
        typer.Option(help="The running server [default: http://CLOSER_HOST:CLOSER_PORT]"),
    ] = None,
    raters: Annotated[int, typer.Option(help="Simulated people at once", min=1)] = 10,
    noise: Annotated[float, typer.Option(help="Share of answers wrong", min=0, max=1)] = 0.1,
    noise_model: Annotated[
        NoiseModel,
        typer.Option(
            help="uniform: any answer is flipped with that chance; human: as often, but "
            "on the near ties (Bradley-Terry on the two distances' difference)"
        ),
    ] = NoiseModel.uniform,
    think_time: Annotated[
        float, typer.Option(help="Median seconds to answer (log-normal); 0: none", min=0)
    ] = 1.0,
    build: Annotated[int | None, typer.Option(help="Stop once this build is complete")] = None,
    routing: Annotated[
        int | None,
        # --prediction: the option's name until a routing was called a routing (2026-11).
        typer.Option("--routing", "--prediction", help="Stop once this routing is complete"),
    ] = None,
    seconds: Annotated[float | None, typer.Option(help="Stop after this long")] = None,
    answers: Annotated[int | None, typer.Option(help="Stop after this many each")] = None,
    seed: Annotated[int, typer.Option(help="Seed for noise and think times")] = 0,
    throttled: Annotated[
        bool,
        typer.Option(
            help="Send the rater requests without the researcher token, so the study's rate "
            "limits apply to them as to strangers"
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON")] = False,
) -> None:
    """A crowd of simulated raters answering from the items' features over HTTP."""
    import asyncio
    import json

    from app.simulate import CrowdError, run_crowd

    if build is None and routing is None and seconds is None and answers is None:
        _fail("say when to stop: --build ID, --routing ID, --seconds S or --answers N")
    url = url or local_url(get_settings())

    def progress(report) -> None:
        line = report.summary()
        typer.echo(
            f"{line['seconds']:>7.1f} s  {line['answers']:>8} answers  "
            f"{line['answers_per_second']:>7.1f}/s  p50 {line['p50_ms']} ms  "
            f"p99 {line['p99_ms']} ms  build: {line['build_status'] or '-'}  "
            f"routing: {line['routing_status'] or '-'}",
            err=True,
        )

    try:
        report = asyncio.run(
            run_crowd(
                url=url,
                project_id=project,
                token=token,
                raters=raters,
                noise=noise,
                noise_model=str(noise_model),
                think_time=think_time,
                seconds=seconds,
                answers_each=answers,
                build_id=build,
                routing_id=routing,
                seed=seed,
                throttled=throttled,
                on_progress=None if json_output else progress,
            )
        )
    except CrowdError as error:
        _fail(str(error))
    summary = report.summary()
    if json_output:
        typer.echo(json.dumps(summary))
        return
    rows = [
        (
            "answers stored",
            f"{summary['answers']} in {summary['seconds']} s ({summary['answers_per_second']}/s)",
        ),
        ("answer latency", f"p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms"),
        (
            "rater sessions",
            f"{summary['sessions_started']} started: "
            f"{summary['sessions_completed']} reached the study's answers per rater, "
            f"{summary['sessions_out_of_work']} ended early (they had seen every query)",
        ),
        (
            "sent again",
            f"{summary['retries']} requests after a network error or a 5xx; "
            f"{summary['replayed']} answers the server already held (stored once)",
        ),
        ("rate limited", f"{summary['throttled']} requests waited out a 429 (Retry-After)"),
    ]
    if build is not None:
        rows.append(("build", f"{build} is {summary['build_status']}"))
    if routing is not None:
        rows.append(("routing", f"{routing} is {summary['routing_status']}"))
    for name, value in rows:
        typer.echo(f"{name:>15}: {value}")


def _demo_line(settings, base_url: str) -> str | None:
    """Where to rate the demo study on this server, if there is one."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.db import make_engine, make_session_factory, unit_of_work
    from app.demo.service import describe, find_demo, latest_build

    engine = make_engine(settings.resolved_database_url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            project = find_demo(session)
            build = None if project is None else latest_build(session, project)
            if project is None or build is None:
                return None
            return f"Demo study: rate at {base_url}/r/{project.public_slug} ({describe(build)})"
    except SQLAlchemyError:
        return None  # the service itself says what is wrong with the database
    finally:
        engine.dispose()


LOCAL_ADMIN = "admin"


def _workspace_line(settings, base_url: str) -> str | None:
    """On the embedded default: a link that signs this machine's user in to the workspace
    as the local admin (as secret as this console), like a notebook server's."""
    if settings.mode is not Mode.embedded:
        return None
    from app.auth.service import ensure_researcher
    from app.core.signing import WorkspaceCookies

    with _database(settings) as session:
        admin_id = ensure_researcher(session=session, name=LOCAL_ADMIN, admin=True).id
    key = WorkspaceCookies(settings.effective_secret_key).sign_in_link_key(admin_id)
    return f"Workspace: open {base_url}/login/link?key={key} to sign in (link valid 24 h)"


def local_url(settings) -> str:
    """Where this machine reaches the server `closer serve` starts with these settings."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{host}:{settings.port}"


def _ensure_schema(settings) -> None:
    """Embedded mode migrates on its own; production expects `closer migrate` first."""
    from app.core import migrations
    from app.core.db import make_engine

    url = settings.resolved_database_url
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if settings.mode is Mode.embedded:
        migrations.upgrade(url)
        return
    engine = make_engine(url)
    try:
        pending = migrations.pending_revisions(engine, url)
    finally:
        engine.dispose()
    if pending:
        _fail(f"database needs migrations {', '.join(pending)}: run 'closer migrate'")


def _safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def main() -> None:
    try:
        cli()
    except ConfigurationError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()

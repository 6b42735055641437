"""The worker: claims jobs, runs their handlers, reports progress, survives their failures."""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.caches import Caches, using
from app.core.errors import database_unavailable
from app.models import Job, JobStatus
from app.worker import queue
from app.worker.wakeup import BELL, Listener

log = logging.getLogger("closer.worker")
OUTAGE_WAIT = 2.0  # seconds between tries while the database cannot be reached
LISTEN_WAIT = 5.0  # seconds a starting worker waits for its PostgreSQL LISTEN to hold


class JobCancelled(Exception):
    """Raised inside a handler when the job was cancelled; the worker marks it so."""


class JobInterrupted(Exception):
    """Raised inside a handler when its worker is stopping: the job goes back to the
    queue at once (the attempt not counted), for the next worker to start over."""


@dataclass
class JobContext:
    """What a handler gets: its job's parameters, a way to report progress, a session maker."""

    job_id: int
    kind: str
    project_id: int | None
    params: dict[str, Any]
    attempt: int
    sessions: sessionmaker[Session]
    _report: Callable[[float | None, str | None], bool] = field(repr=False)
    max_attempts: int = 3
    stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    worker_id: str = ""

    def succeed_in(self, session: Session, result: dict[str, Any] | None) -> None:
        """Record the job's success in the caller's transaction, before its commit: what
        the job made (a fit's version, serving) is never seen beside a job still
        'running'. The worker then leaves the job as it stands."""
        queue.finish(
            session=session,
            job_id=self.job_id,
            worker_id=self.worker_id,
            status=JobStatus.succeeded,
            message="done",
            result=result,
            commit=False,
        )

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Record progress (0..1); raises JobCancelled if someone cancelled the job, and
        JobInterrupted if the worker is stopping."""
        self.check_stopping()
        if self._report(fraction, message):
            raise JobCancelled()

    def check_stopping(self) -> None:
        """Cheap enough to call at every step of a long computation."""
        if self.stopping.is_set():
            raise JobInterrupted()


class JobFailed(Exception):
    """Raised by a handler when trying again cannot help (the data cannot support the
    job): the job fails at once with this message instead of being retried."""


Handler = Callable[[JobContext], dict[str, Any] | None]
HANDLERS: dict[str, Handler] = {}
Periodic = Callable[..., None]


@dataclass(frozen=True)
class Upkeep:
    """Every `seconds`, function(sessions), or function(sessions, images) where it
    `needs_images` (a worker without an image store skips it); `alongside_jobs`: also
    while the worker runs a job, from a thread beside it."""

    seconds: float
    function: Periodic
    needs_images: bool = False
    alongside_jobs: bool = False


PERIODIC: list[Upkeep] = []


def handler(kind: str) -> Callable[[Handler], Handler]:
    """Register the function that runs jobs of `kind`."""

    def register(function: Handler) -> Handler:
        HANDLERS[kind] = function
        return function

    return register


def periodic(
    seconds: float, *, needs_images: bool = False, alongside_jobs: bool = False
) -> Callable[[Periodic], Periodic]:
    """Register upkeep that an idle worker runs every `seconds` (it must be safe to run on
    several workers at once); with `needs_images` it is given the image store too. With
    `alongside_jobs` a busy worker runs it too, beside the job in hand: what a crowd
    drains in seconds must not wait for a fit of minutes to end."""

    def register(function: Periodic) -> Periodic:
        PERIODIC.append(Upkeep(seconds, function, needs_images, alongside_jobs))
        return function

    return register


class Worker:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        poll_seconds: float = 1.0,
        heartbeat_seconds: float = 5.0,
        stale_after_seconds: float = 60.0,
        handlers: dict[str, Handler] | None = None,
        kinds: Collection[str] | None = None,
        skip_kinds: Collection[str] = (),
        upkeep: bool = True,
        images: Any = None,
    ) -> None:
        """`kinds` / `skip_kinds` choose the jobs this worker takes (e.g. one worker for
        long training fits and another for the quick build steps); `upkeep` runs the
        periodic checks while idle."""
        self.sessions = sessions
        self.poll_seconds = poll_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.stale_after = timedelta(seconds=stale_after_seconds)
        if handlers is None and not HANDLERS:
            # The domains register their kinds (app/jobs.py imports them all); the worker
            # sits below them and imports none.
            raise RuntimeError("no job kinds registered: import app.jobs before starting a worker")
        self.handlers = HANDLERS if handlers is None else handlers
        self.periodic = PERIODIC if handlers is None and upkeep else []
        self.images = images  # the ImageStore, for upkeep that removes a project's images
        self.kinds = None if kinds is None else tuple(kinds)
        self.skip_kinds = tuple(skip_kinds)
        self._last_run: dict[Periodic, float] = {}
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stopping = threading.Event()
        # Set while the worker waits for work (on PostgreSQL, listening for new jobs).
        self.idle = threading.Event()
        self.stopped = threading.Event()  # set once run() has returned
        self._in_hand: int | None = None  # the job being run
        # In a --background worker, the thread that keeps the priority its jobs give up.
        self._apart: threading.Thread | None = None

    def run(self, *, until_idle: bool = False) -> int:
        """Run jobs until stopped (or, with until_idle, until none is left); returns the count."""
        done = 0
        listener = None if until_idle else self._listen()
        if listener is not None:
            # A job queued elsewhere before LISTEN holds would wait for the next poll.
            listener.listening.wait(LISTEN_WAIT)
        try:
            while not self.stopping.is_set():
                rings = BELL.rings()  # a job queued from here on wakes the wait below
                try:
                    ran = self.run_one()
                except Exception as exc:
                    if not database_unavailable(exc):
                        raise
                    # The database restarts, say: wait for it rather than exit. A job
                    # claimed before it went away is taken up again once its heartbeat is
                    # stale.
                    log.warning("database unavailable, retrying in %.0f s: %s", OUTAGE_WAIT, exc)
                    self.stopping.wait(OUTAGE_WAIT)
                    continue
                if ran:
                    done += 1
                elif until_idle:
                    break
                else:
                    if self._apart is None:
                        self._upkeep()
                    self.idle.set()
                    BELL.wait(rings, self.poll_seconds)
                    self.idle.clear()
        finally:
            if listener is not None:
                listener.stop()
            self.stopped.set()
        return done

    def _listen(self) -> Listener | None:
        """On PostgreSQL, a connection that hears of jobs queued by other processes."""
        engine = self.sessions.kw.get("bind")
        if engine is None or engine.dialect.name != "postgresql":
            return None
        return Listener(engine).start()

    def _upkeep(self, *, alongside_a_job: bool = False) -> None:
        now = time.monotonic()
        for task in self.periodic:
            if (task.needs_images and self.images is None) or (
                alongside_a_job and not task.alongside_jobs
            ):
                continue
            if now - self._last_run.get(task.function, -1e9) >= task.seconds:
                self._last_run[task.function] = now
                try:
                    task.function(self.sessions, *([self.images] if task.needs_images else []))
                except Exception:  # upkeep must not stop the worker; it runs again soon
                    log.exception("periodic %s failed", task.function.__name__)

    def yield_cpu(self) -> None:
        """From now on take only CPU time nothing else wants (Linux SCHED_IDLE; elsewhere
        nice 19) for the jobs, from the thread that will call run(), but keep the upkeep
        and the heartbeat at the priority they have now, in a thread of their own.

        The upkeep holds what answers wait for: the triplets log's lock for a tally, the
        open proposals while they are swapped. A thread at the lowest priority holding
        them is left off a busy CPU while the answers queue behind it. A heartbeat at the
        lowest priority misses its beats while the CPU stays busy, and another worker
        takes the fit over as dead (its attempts run out: "failed"). Linux sets a
        thread's priority, not the process's, and a thread starts at its maker's: so
        their thread is made before the priority drops."""
        if self._apart is None:
            self._apart = threading.Thread(
                target=contextvars.copy_context().run,
                args=(self._apart_from_jobs, self.stopping),
                name="closer-upkeep-and-heartbeat",
                daemon=True,
            )
            self._apart.start()
        run_on_spare_cpu()

    def _upkeep_beside(self, done: threading.Event) -> None:
        """Until `done`, every poll, the upkeep that may run while a job does."""
        while not done.wait(self.poll_seconds):
            self._upkeep(alongside_a_job=True)

    def _apart_from_jobs(self, done: threading.Event) -> None:
        """Until `done`, every poll, the upkeep (what may run beside a job while one
        does), and the job in hand's heartbeat as often as a job's own would beat (see
        yield_cpu)."""
        beaten = time.monotonic()
        while not done.wait(self.poll_seconds):
            job_id = self._in_hand
            self._upkeep(alongside_a_job=job_id is not None)
            if job_id is not None and time.monotonic() - beaten >= self.heartbeat_seconds:
                beaten = time.monotonic()
                self._beat_once(job_id)

    def stop(self) -> None:
        """Stop taking jobs; the job in hand stops at its next progress report and goes
        back to the queue."""
        self.stopping.set()
        BELL.ring()

    def run_one(self) -> bool:
        with self.sessions() as session:
            job = queue.claim_next(
                session=session,
                worker_id=self.worker_id,
                stale_after=self.stale_after,
                kinds=self.kinds,
                skip_kinds=self.skip_kinds,
            )
        if job is None:
            return False
        self._execute(job)
        return True

    def _report(self, job_id: int, progress: float | None, message: str | None) -> bool:
        with self.sessions() as session:
            return queue.heartbeat(
                session=session,
                job_id=job_id,
                worker_id=self.worker_id,
                progress=progress,
                message=message,
            )

    def _execute(self, job: Job) -> None:
        function = self.handlers.get(job.kind)
        with self.sessions() as session:
            if function is None:
                queue.finish(
                    session=session,
                    job_id=job.id,
                    worker_id=self.worker_id,
                    status=JobStatus.failed,
                    message=f"no handler for job kind '{job.kind}'",
                )
                return
        context = JobContext(
            job.id,
            job.kind,
            job.project_id,
            dict(job.params),
            job.attempts,
            self.sessions,
            lambda p, m: self._report(job.id, p, m),
            job.max_attempts,
            self.stopping,
            self.worker_id,
        )
        retry = True
        beating = threading.Event()
        beat = beside = None
        if self._apart is None:
            beat = threading.Thread(target=self._beat, args=(job.id, beating), daemon=True)
            beat.start()
            if any(task.alongside_jobs for task in self.periodic):
                # In the worker's context: an embedded worker's upkeep uses its app's caches.
                run_beside = contextvars.copy_context().run
                beside = threading.Thread(
                    target=run_beside, args=(self._upkeep_beside, beating), daemon=True
                )
                beside.start()
        self._in_hand = job.id
        try:
            if job.cancel_requested:
                raise JobCancelled()
            result = function(context)
            status, message = JobStatus.succeeded, "done"
        except JobCancelled:
            result, status, message = None, JobStatus.cancelled, "cancelled"
        except JobInterrupted:
            result, status, message = None, JobStatus.queued, "interrupted"
        except JobFailed as exc:
            result, status, message = None, JobStatus.failed, str(exc)
            retry = False
        except Exception as exc:  # a handler's failure must not stop the worker
            log.exception("job %s (%s) failed", job.id, job.kind)
            result, status = None, JobStatus.failed
            message = f"{exc.__class__.__name__}: {exc}"
        finally:
            self._in_hand = None
            beating.set()
        try:
            self._record_outcome(job, status, message, result, retry)
        finally:
            # Only now: the upkeep beside the job may be in the middle of a task, and the
            # job's outcome (a fit's version already serving, say) must not wait for it.
            for thread in (beat, beside):
                if thread is not None:
                    thread.join()

    def _record_outcome(
        self, job: Job, status: JobStatus, message: str, result: Any, retry: bool
    ) -> None:
        """Records how the job ended, even across a database outage: a job left `running`
        would wait a whole stale period (60 s) before anyone took it up again."""
        while True:
            try:
                with self.sessions() as session:
                    if status is JobStatus.queued:
                        queue.requeue(
                            session=session,
                            job_id=job.id,
                            worker_id=self.worker_id,
                            message="interrupted by a worker stop; the next worker starts it over",
                            failed=False,
                        )
                    elif status is JobStatus.failed and retry and job.attempts < job.max_attempts:
                        queue.requeue(
                            session=session,
                            job_id=job.id,
                            worker_id=self.worker_id,
                            message=f"attempt {job.attempts} failed: {message}; retrying",
                        )
                    else:
                        queue.finish(
                            session=session,
                            job_id=job.id,
                            worker_id=self.worker_id,
                            status=status,
                            message=message,
                            result=result,
                        )
                return
            except Exception as exc:
                if not database_unavailable(exc) or self.stopping.is_set():
                    raise
                log.warning("recording job %s waits for the database: %s", job.id, exc)
                self.stopping.wait(OUTAGE_WAIT)

    def _beat(self, job_id: int, done: threading.Event) -> None:
        while not done.wait(self.heartbeat_seconds):
            self._beat_once(job_id)

    def _beat_once(self, job_id: int) -> None:
        try:
            self._report(job_id, None, None)
        except Exception:  # a missed heartbeat is retried at the next beat
            log.warning("heartbeat for job %s failed", job_id, exc_info=True)


def run_on_spare_cpu() -> None:
    """From now on the calling thread takes only CPU time nothing else wants (Linux
    SCHED_IDLE; elsewhere nice 19), and runs its linear algebra on itself alone."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or not allowed: the next best thing
        os.nice(19 - os.nice(0))
    # OpenBLAS started its pool's threads as numpy was imported, at the priority the
    # process had then: a job's matrix products split across them ran partly at normal
    # priority. One thread, the caller's, does them now (OpenBLAS takes this from the
    # main thread only, where `closer worker` calls it).
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def start_in_thread(
    worker: Worker, name: str = "closer-worker", caches: Caches | None = None
) -> threading.Thread:
    """The embedded default: worker threads beside the web server, with its caches."""

    def run() -> None:
        if caches is None:
            worker.run()
            return
        with using(caches):
            worker.run()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def make_kernels_ready(report: Callable[[str], None]) -> threading.Thread:
    """Compile the learners' kernels (or load them from numba's cache) in a thread of
    their own, beside the first jobs: a fresh worker's first fit waited for them
    otherwise (1.7-2.5 s at 50,000 items / 100,000 answers, with the cache warm)."""

    def compile_them() -> None:
        from app.learn.warm_up import compile_kernels

        report(f"learners' kernels ready in {compile_kernels():.1f} s")

    thread = threading.Thread(target=compile_them, name="compile-kernels", daemon=True)
    thread.start()
    return thread

"""The job store: SQLAlchemy over a SQLite file (default) or PostgreSQL (`DATABASE_URL`).

The store is the service's source of truth and, in embedded mode, its queue. Every state change
of a job goes through one method here, which writes the row, appends an event (for the SSE
stream) and logs one line with the job id and tenant, so nothing is lost when the API restarts
and every transition is visible.

A worker *claims* a job with one atomic UPDATE that succeeds only when no live lease is held
(`lease_owner` empty, the same owner, or `lease_expires` past). It then renews the lease while
it renders; a crashed worker's lease runs out and `requeue_expired()` puts the job back in the
queue. Whatever Celery redelivers, a job therefore never runs twice at once.

A stream job (`Job.is_stream`) takes requests while it runs: `request_prompt` queues a prompt
switch as a `JobControl` row, which its worker takes (and deletes) before each chunk, together
with `cancel_requested`; the switches it applies are recorded in the job's spec
(`prompt_switches`) and as `prompt` events. The tables are in `videogen.api.tables`.
"""

from __future__ import annotations

import builtins
import logging
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import CursorResult, case, create_engine, delete, event, func, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from .tables import CANCELLED, COMPLETED, IN_PROGRESS, QUEUED, TERMINAL, Base, Job, JobControl, JobEvent

log = logging.getLogger("videogen.jobs")


@dataclass(frozen=True)
class StreamControls:
    """What the worker of a stream applies before its next chunk."""

    cancel: bool  # cancel requested, or the job is no longer this worker's
    prompt: str | None  # the latest prompt switch requested since the last chunk (earlier ones were never shown)


@dataclass(frozen=True)
class Page:
    jobs: list[Job]
    has_more: bool


class TenantQueueFull(Exception):
    """A create over the tenant's queued-jobs limit (`VIDEOGEN_TENANT_MAX_QUEUED`)."""

    def __init__(self, tenant: str, queued: int, limit: int) -> None:
        super().__init__(f"tenant {tenant} has {queued} queued jobs (limit {limit})")
        self.tenant, self.queued, self.limit = tenant, queued, limit


def resolve_driver(url: str) -> str:
    """`postgresql://` (the documented form) -> psycopg 3, the `[postgres]` extra's driver, whatever
    SQLAlchemy's default for the bare name is (psycopg2 before 2.1). Explicit drivers are kept."""
    import importlib.util

    if url.startswith("postgresql://") and importlib.util.find_spec("psycopg") is not None:
        return "postgresql+psycopg://" + url[len("postgresql://") :]
    if url.startswith("postgres://"):  # Heroku-style alias SQLAlchemy does not know
        return resolve_driver("postgresql://" + url[len("postgres://") :])
    return url


class JobStore:
    """Every read and state change of jobs, their events and stream controls: the tables' only writer."""

    def __init__(self, url: str, *, output_ttl_seconds: float = 7 * 24 * 3600, tenant_max_running: int = 0,
                 tenant_weights: dict[str, float] | None = None) -> None:  # fmt: skip
        url = resolve_driver(url)
        self.url = url
        self.output_ttl = output_ttl_seconds
        # Fair share (see `next_queued`): running jobs per tenant (0: no limit), turns per round.
        self.tenant_max_running = tenant_max_running
        self.tenant_weights = {t: float(w) for t, w in (tenant_weights or {}).items()}
        kw: dict[str, Any] = {"future": True}
        if url.startswith("sqlite"):
            # Threads of one process (API threadpool, embedded worker) and other processes (Celery
            # workers on the same host) share the file: WAL lets readers run beside the writer.
            kw["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            kw.update(pool_pre_ping=True, pool_size=10, max_overflow=20)
        self.engine = create_engine(url, **kw)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_connect)
            event.listen(self.engine, "begin", _sqlite_begin)
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        # Read-then-write transactions take SQLite's write lock up front (BEGIN IMMEDIATE): a
        # deferred one that read first fails at once with "database is locked" when another
        # connection wrote in between, instead of waiting. PostgreSQL ignores the option.
        self._write_session = sessionmaker(self.engine.execution_options(sqlite_begin="BEGIN IMMEDIATE"),
                                           expire_on_commit=False)  # fmt: skip
        Base.metadata.create_all(self.engine)
        _add_missing_columns(self.engine)  # columns added since a store file was created (webhook_*)
        for index in Job.__table__.indexes:  # indexes added since a store file was created
            index.create(self.engine, checkfirst=True)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._session.begin() as s:
            yield s

    @contextmanager
    def write(self) -> Iterator[Session]:
        with self._write_session.begin() as s:
            yield s

    def ping(self) -> None:
        with self.engine.connect() as c:
            c.execute(text("SELECT 1"))

    # -- API side ----------------------------------------------------------------------------
    def create(self, job: Job, *, max_queued: int = 0) -> Job:
        """Insert a queued job. `max_queued` > 0: refuse (`TenantQueueFull`) when the tenant already
        has that many queued jobs; counted in the insert's write transaction, so exact on SQLite
        (one writer at a time) and at most a few over under concurrent creates on PostgreSQL."""
        job.created_at = job.created_at or time.time()
        job.status = QUEUED
        with self.write() as s:
            if max_queued > 0:
                queued = s.scalar(select(func.count()).where(Job.tenant == job.tenant, Job.status == QUEUED)) or 0
                if queued >= max_queued:
                    raise TenantQueueFull(job.tenant, queued, max_queued)
            s.add(job)
            s.flush()
            self._event(s, job.id, "status", {"status": QUEUED})
        self._log(job, "created", QUEUED)
        return job

    def get(self, tenant: str, job_id: str) -> Job | None:
        with self.session() as s:
            job = s.get(Job, job_id)
            return job if job is not None and job.tenant == tenant and not job.deleted else None

    def get_any(self, job_id: str) -> Job | None:
        with self.session() as s:
            return s.get(Job, job_id)

    def list(self, tenant: str, *, after: str | None, limit: int, order: str) -> Page | None:
        """Cursor pagination by (created_at, id). None when `after` is not one of the tenant's jobs."""
        desc = order == "desc"
        with self.session() as s:
            q = select(Job).where(Job.tenant == tenant, Job.deleted.is_(False))
            if after:
                cursor = s.get(Job, after)
                if cursor is None or cursor.tenant != tenant:
                    return None
                key = (cursor.created_at, cursor.id)
                if desc:
                    q = q.where((Job.created_at < key[0]) | ((Job.created_at == key[0]) & (Job.id < key[1])))
                else:
                    q = q.where((Job.created_at > key[0]) | ((Job.created_at == key[0]) & (Job.id > key[1])))
            by = (Job.created_at.desc(), Job.id.desc()) if desc else (Job.created_at, Job.id)
            rows = list(s.scalars(q.order_by(*by).limit(limit + 1)))
        return Page(rows[:limit], len(rows) > limit)

    def request_cancel(self, tenant: str, job_id: str) -> Job | None:
        """A queued job is cancelled at once; a running one when its worker sees the flag (next step)."""
        with self.write() as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is None or job.tenant != tenant or job.deleted:
                return None
            if job.status in TERMINAL:
                return job
            job.cancel_requested = True
            if job.status == QUEUED:
                self._finish(s, job, CANCELLED)
                return job
        self._log(job, "cancel requested", job.status)
        return job

    def delete(self, tenant: str, job_id: str) -> Job | None:
        """Hide the job at once; a running job is cancelled, and its files go when it stops."""
        with self.write() as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is None or job.tenant != tenant or job.deleted:
                return None
            job.deleted = True
            job.cancel_requested = True
            if job.status == QUEUED:
                self._finish(s, job, CANCELLED)
        self._log(job, "deleted", job.status)
        return job

    def request_prompt(self, tenant: str, job_id: str, prompt: str) -> Job | None:
        """Queue a prompt switch for a stream job that has not finished (nor been asked to stop);
        its worker applies it at the next chunk boundary. Returns the job either way (the caller
        tells why nothing was queued from its state), None when it is not the tenant's."""
        with self.write() as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is None or job.tenant != tenant or job.deleted:
                return None
            if not job.is_stream or job.status in TERMINAL or job.cancel_requested:
                return job
            s.add(JobControl(job_id=job_id, type="prompt", data={"prompt": prompt}, created_at=time.time()))
        self._log(job, f"prompt switch requested ({len(prompt)} chars)", job.status)
        return job

    def events_after(self, job_id: str, after_id: int, limit: int = 500) -> builtins.list[JobEvent]:
        with self.session() as s:
            q = select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.id > after_id)
            return list(s.scalars(q.order_by(JobEvent.id).limit(limit)))

    # -- worker side -------------------------------------------------------------------------
    def next_queued(self, limit: int = 20, *, created_before: float | None = None,
                    models: tuple[str, ...] | None = None) -> builtins.list[str]:  # fmt: skip
        """Queued jobs nobody holds, in fair-share order (candidates for `claim`): tenants take
        turns. A job's turn is its place in its tenant's queue plus the tenant's running jobs,
        divided by the tenant's weight (`tenant_weights`, default 1: a weight-2 tenant gets two
        turns per round); equal turns go to the tenant whose last job started longest ago
        (round-robin when one worker serves them one at a time), then to the oldest job. So a
        tenant with 20 queued jobs and one with 1 alternate instead of the second waiting for all
        20. Tenants at `tenant_max_running` are skipped until one of their jobs ends.
        `created_before`: only jobs created before then (the reaper's re-dispatch leaves creates
        whose wake-up may still be on its way). `models`: only jobs of these models (a fleet
        worker's `--model`s; None: any model)."""
        now = time.time()
        unheld = Job.lease_owner.is_(None) | (Job.lease_expires < now)
        with self.session() as s:
            running = (select(Job.tenant, func.count().label("n")).where(Job.status.in_((QUEUED, IN_PROGRESS)), ~unheld)
                       .group_by(Job.tenant).subquery())  # fmt: skip
            place = func.row_number().over(partition_by=Job.tenant, order_by=(Job.created_at, Job.id))
            waiting = select(Job.id, Job.created_at, Job.tenant, place.label("place"))
            waiting = waiting.where(Job.status == QUEUED, unheld)
            if created_before is not None:
                waiting = waiting.where(Job.created_at < created_before)
            if models is not None:
                waiting = waiting.where(Job.model.in_(models))
            w = waiting.subquery()
            # When the turns tie (one worker between jobs: nobody runs), the tenant served longest ago goes first.
            served = (select(Job.tenant, func.max(Job.started_at).label("at"))
                      .where(Job.tenant.in_(select(w.c.tenant))).group_by(Job.tenant).subquery())  # fmt: skip
            busy = func.coalesce(running.c.n, 0)
            q = (select(w.c.id).outerjoin(running, running.c.tenant == w.c.tenant)
                 .outerjoin(served, served.c.tenant == w.c.tenant))  # fmt: skip
            if self.tenant_max_running > 0:
                q = q.where(busy < self.tenant_max_running)
            turn = w.c.place + busy
            if self.tenant_weights:
                turn = turn / case(self.tenant_weights, value=w.c.tenant, else_=1.0)
            order = (turn, func.coalesce(served.c.at, 0.0), w.c.created_at, w.c.id)
            return list(s.scalars(q.order_by(*order).limit(limit)))

    def claim(self, job_id: str, worker: str, lease_seconds: float) -> Job | None:
        """Take the job for `worker` if nobody holds a live lease on it. Atomic (one UPDATE)."""
        now = time.time()
        with self.write() as s:
            result = cast(
                CursorResult,
                s.execute(  # an UPDATE's result: it has a rowcount
                    update(Job)
                    .where(
                        Job.id == job_id,
                        Job.status.in_((QUEUED, IN_PROGRESS)),
                        Job.cancel_requested.is_(False),
                        (Job.lease_owner.is_(None)) | (Job.lease_owner == worker) | (Job.lease_expires < now),
                    )
                    .values(
                        lease_owner=worker,
                        lease_expires=now + lease_seconds,
                        attempts=Job.attempts + 1,
                        queued_reason=None,
                    )
                ),
            )
            if result.rowcount != 1:
                return None
            return s.get(Job, job_id)

    def renew(self, job_id: str, worker: str, lease_seconds: float) -> bool:
        """Extend the lease; False when it is no longer this worker's (it must stop)."""
        with self.write() as s:
            result = cast(
                CursorResult,
                s.execute(  # an UPDATE's result: it has a rowcount
                    update(Job)
                    .where(Job.id == job_id, Job.lease_owner == worker)
                    .values(lease_expires=time.time() + lease_seconds)
                ),
            )
            return result.rowcount == 1

    def cancel_requested(self, job_id: str) -> bool:
        with self.session() as s:
            return bool(s.scalar(select(Job.cancel_requested).where(Job.id == job_id)))

    def mark_started(self, job_id: str, worker: str, *, steps_total: int, segments_total: int,
                     resumed_segments: int, steps_per_segment: int) -> bool:  # fmt: skip
        with self.write() as s:
            job = self._owned(s, job_id, worker)
            if job is None:
                return False
            job.steps_total, job.segments_total = steps_total, segments_total
            job.segments_done = resumed_segments
            job.steps_done = resumed_segments * steps_per_segment  # restored segments are not re-denoised
            job.started_at = job.started_at or time.time()
            previous = job.status
            job.status = IN_PROGRESS
            self._event(s, job_id, "status", {"status": IN_PROGRESS, "attempt": job.attempts,
                                              "resumed_segments": resumed_segments, **self._counts(job)})  # fmt: skip
        self._log(job, f"started by {worker} (attempt {job.attempts}, resumed {resumed_segments} segment(s))",
                  IN_PROGRESS if previous != IN_PROGRESS else "in_progress (again)")  # fmt: skip
        return True

    def record_step(self, job_id: str, worker: str, segment: int, step: int, steps: int) -> None:
        self.record_steps(job_id, worker, [(segment, step, steps)])

    def record_steps(self, job_id: str, worker: str, steps: builtins.list[tuple[int, int, int]]) -> None:
        """Several denoising steps (segment, step, steps) in one transaction: one progress event
        each. Batching keeps SQLite's single writer free for the API's inserts when steps are fast."""
        if not steps:
            return
        with self.write() as s:
            job = self._owned(s, job_id, worker)
            if job is None:
                return
            for segment, step, total in steps:
                job.steps_done = min(job.steps_total, job.steps_done + 1)
                self._event(
                    s, job_id, "progress", {"segment": segment, "step": step, "steps": total, **self._counts(job)}
                )

    def record_segment(self, job_id: str, worker: str, index: int, frames_written: int, resumed: bool) -> None:
        with self.write() as s:
            job = self._owned(s, job_id, worker)
            if job is None:
                return
            job.segments_done = max(job.segments_done, index + 1)
            self._event(s, job_id, "segment", {"index": index, "frames_written": frames_written, "resumed": resumed,
                                               **self._counts(job)})  # fmt: skip

    def record_retry(self, job_id: str, worker: str, index: int, attempt: int, reasons: list[str]) -> None:
        """The health gate re-sampled segment (or chunk) `index`: a `segment_retries` entry on the
        job and a `retry` event. A restarted job that retries the same segment again (same seed:
        same attempt) does not add it twice."""
        with self.write() as s:
            job = self._owned(s, job_id, worker)
            if job is None:
                return
            retries = list(job.spec.get("segment_retries", []))
            entry = {"segment": index, "attempt": attempt, "reasons": list(reasons)}
            if not any(r["segment"] == index and r["attempt"] == attempt for r in retries):
                job.spec = {**job.spec, "segment_retries": [*retries, entry]}
            self._event(s, job_id, "retry", {**entry, **self._counts(job)})

    def take_controls(self, job_id: str, worker: str) -> StreamControls:
        """A stream's worker, before its first chunk: pending controls (see `record_chunk`)."""
        with self.write() as s:
            job = self._owned(s, job_id, worker)
            return StreamControls(True, None) if job is None else self._take_controls(s, job)

    def record_chunk(self, job_id: str, worker: str, *, index: int, first_frame: int, frames: int, prompt: str,
                     fps: float) -> StreamControls:  # fmt: skip
        """A stream job made a chunk: frames done, one `progress` event, a `prompt` event and a
        `prompt_switches` entry when the chunk's prompt differs from the previous one's. Returns
        the controls for the next chunk, in the same transaction."""
        with self.write() as s:
            job = self._owned(s, job_id, worker)
            if job is None:
                return StreamControls(True, None)
            switches = list(job.spec.get("prompt_switches", []))
            before = [sw["prompt"] for sw in switches if sw["frame"] < first_frame]  # a restart replays them
            shown = before[-1] if before else job.prompt
            if prompt != shown and all(sw["frame"] != first_frame for sw in switches):
                switch = {"at_seconds": first_frame / fps, "frame": first_frame, "chunk": index, "prompt": prompt}
                job.spec = {**job.spec, "prompt_switches": [*switches, switch]}
                self._event(s, job_id, "prompt", switch)
            job.steps_done = min(job.steps_total, first_frame + frames)
            job.segments_done = max(job.segments_done, index + 1)
            self._event(s, job_id, "progress", {"chunk": index, "first_frame": first_frame, "frames": frames,
                                                "prompt": prompt, **self._counts(job)})  # fmt: skip
            return self._take_controls(s, job)

    def finish(self, job_id: str, worker: str | None, status: str, *, error: tuple[str, str, str | None] | None = None,
               has_video: bool = False, has_thumbnail: bool = False) -> Job | None:  # fmt: skip
        """Terminal transition by the lease holder (worker None: whoever; used for queued jobs)."""
        with self.write() as s:
            job = s.get(Job, job_id, with_for_update=True) if worker is None else self._owned(s, job_id, worker)
            if job is None or job.status in TERMINAL:
                return None
            if error is not None:
                job.error_code, job.error_message, job.error_param = error
            job.has_video, job.has_thumbnail = has_video, has_thumbnail
            if status == COMPLETED:
                job.steps_done, job.segments_done = job.steps_total, job.segments_total
                job.finished_by = worker  # an extension of it prefers this worker (`api.routing`)
            self._finish(s, job, status)
            return job

    def queued_models(self) -> builtins.list[str]:
        """The models of the queued jobs (the reaper's re-dispatch goes model by model)."""
        with self.session() as s:
            return list(s.scalars(select(Job.model).where(Job.status == QUEUED).distinct()))

    def set_queued_reason(self, model: str, reason: str | None) -> int:
        """Why the queued jobs of `model` wait (None: they do not wait on a missing worker)."""
        with self.write() as s:
            differs = Job.queued_reason.is_(None) if reason is not None else Job.queued_reason.is_not(None)
            if reason is not None:
                differs = differs | (Job.queued_reason != reason)
            result = cast(CursorResult, s.execute(update(Job).where(Job.status == QUEUED, Job.model == model, differs)
                                                  .values(queued_reason=reason)))  # fmt: skip
            return result.rowcount

    def requeue_expired(self) -> builtins.list[Job]:
        """Jobs whose worker vanished (lease ran out) go back to `queued`, keeping their checkpoints."""
        now = time.time()
        with self.write() as s:
            rows = list(s.scalars(select(Job).where(Job.status == IN_PROGRESS, Job.lease_expires < now)
                                  .with_for_update()))  # fmt: skip
            for job in rows:
                job.status, job.lease_owner, job.lease_expires = QUEUED, None, None
                if job.cancel_requested:  # it was asked to stop anyway
                    self._finish(s, job, CANCELLED)
                    continue
                self._event(s, job.id, "status", {"status": QUEUED, "reason": "worker lost", **self._counts(job)})
        for job in rows:
            if job.status == QUEUED:
                self._log(job, "requeued: the worker's lease expired", QUEUED)
        return rows

    def expired(self, now: float | None = None) -> builtins.list[Job]:
        """Finished jobs past `expires_at`, and deleted jobs that have stopped: their files can go."""
        now = time.time() if now is None else now
        with self.session() as s:
            q = select(Job).where(Job.status.in_(TERMINAL),
                                  (Job.expires_at < now) | Job.deleted.is_(True))  # fmt: skip
            return list(s.scalars(q))

    def purge(self, job_id: str) -> None:
        with self.write() as s:
            s.execute(delete(JobEvent).where(JobEvent.job_id == job_id))
            s.execute(delete(JobControl).where(JobControl.job_id == job_id))
            s.execute(delete(Job).where(Job.id == job_id))

    def count_by_status(self) -> dict[str, int]:
        with self.session() as s:
            return dict(s.execute(select(Job.status, func.count()).group_by(Job.status)).all())

    def count_by_status_tenant(self) -> dict[tuple[str, str], int]:
        """(status, tenant) -> jobs (deleted ones included until purged): `/metrics`' `videogen_jobs`."""
        with self.session() as s:
            rows = s.execute(select(Job.status, Job.tenant, func.count()).group_by(Job.status, Job.tenant)).all()
            return {(status, tenant): n for status, tenant, n in rows}

    # -- webhooks (`api.webhooks`) ------------------------------------------------------------
    def due_webhooks(self, now: float | None = None, limit: int = 50) -> builtins.list[Job]:
        """Jobs whose webhook delivery is pending and due (`webhook_next_at` past)."""
        now = time.time() if now is None else now
        with self.session() as s:
            q = select(Job).where(Job.webhook_status == "pending", Job.webhook_next_at <= now)
            return list(s.scalars(q.order_by(Job.webhook_next_at).limit(limit)))

    def claim_webhook(self, job_id: str, hold_until: float) -> bool:
        """Take a due delivery for one attempt (several API processes share the store): pushes
        `webhook_next_at` to `hold_until`, so a sender that dies mid-attempt leaves it due again."""
        now = time.time()
        with self.write() as s:
            result = cast(CursorResult, s.execute(
                update(Job).where(Job.id == job_id, Job.webhook_status == "pending", Job.webhook_next_at <= now)
                .values(webhook_next_at=hold_until)))  # fmt: skip
            return result.rowcount == 1

    def record_webhook(self, job_id: str, *, delivered: bool, error: str | None, retry_at: float | None) -> Job | None:
        """One delivery attempt's outcome: delivered; or failed with `error`, again at `retry_at`
        (None: no more attempts, the delivery failed)."""
        with self.write() as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is None or job.webhook_status != "pending":
                return None
            job.webhook_attempts = (job.webhook_attempts or 0) + 1
            job.webhook_last_error = None if delivered else (error or "")[:500]
            if delivered:
                job.webhook_status, job.webhook_next_at = "delivered", None
            elif retry_at is None:
                job.webhook_status, job.webhook_next_at = "failed", None
            else:
                job.webhook_next_at = retry_at
        log.info("job %s tenant %s: webhook %s attempt %d %s", job.id, job.tenant, job.webhook_event,
                 job.webhook_attempts, "delivered" if delivered else f"failed ({error}); {job.webhook_status}")  # fmt: skip
        return job

    def pending_webhooks(self) -> int:
        with self.session() as s:
            return s.scalar(select(func.count()).where(Job.webhook_status == "pending")) or 0

    # -- internals ---------------------------------------------------------------------------
    def _owned(self, s: Session, job_id: str, worker: str) -> Job | None:
        job = s.get(Job, job_id)
        return job if job is not None and job.lease_owner == worker and job.status not in TERMINAL else None

    @staticmethod
    def _take_controls(s: Session, job: Job) -> StreamControls:
        rows = list(s.scalars(select(JobControl).where(JobControl.job_id == job.id).order_by(JobControl.id)))
        if rows:
            s.execute(delete(JobControl).where(JobControl.id.in_([r.id for r in rows])))
        prompts = [r.data["prompt"] for r in rows if r.type == "prompt"]
        return StreamControls(job.cancel_requested, prompts[-1] if prompts else None)

    def _finish(self, s: Session, job: Job, status: str) -> None:
        if job.is_stream:  # switches nobody will apply
            s.execute(delete(JobControl).where(JobControl.job_id == job.id))
        job.status = status
        job.completed_at = time.time()
        job.expires_at = job.completed_at + self.output_ttl
        job.lease_owner = job.lease_expires = None
        if job.webhook_url and not job.deleted:  # `api.webhooks.WebhookSender` delivers it (a deleted job: none)
            job.webhook_event, job.webhook_status = "evt_" + secrets.token_hex(16), "pending"
            job.webhook_attempts, job.webhook_next_at = 0, job.completed_at
        data = {"status": status, **self._counts(job)}
        if job.error_code:
            data["error"] = {"code": job.error_code, "message": job.error_message, "param": job.error_param}
        self._event(s, job.id, "status", data)
        self._log(job, "finished" + (f": {job.error_code}: {job.error_message}" if job.error_code else ""), status)

    @staticmethod
    def _counts(job: Job) -> dict[str, int]:
        return {"progress": job.progress, "steps_done": job.steps_done, "steps_total": job.steps_total,
                "segments_done": job.segments_done, "segments_total": job.segments_total}  # fmt: skip

    @staticmethod
    def _event(s: Session, job_id: str, type_: str, data: dict[str, Any]) -> None:
        s.add(JobEvent(job_id=job_id, type=type_, data=data, created_at=time.time()))

    @staticmethod
    def _log(job: Job, what: str, status: str) -> None:
        log.info("job %s tenant %s: %s -> %s", job.id, job.tenant, what, status)


def _add_missing_columns(engine) -> None:
    """`ALTER TABLE ... ADD COLUMN` for the job table's columns an older store lacks (all nullable or
    defaulted). Idempotent; a second process adding the same column at once loses the race harmlessly."""
    from sqlalchemy import inspect
    from sqlalchemy.exc import DBAPIError

    table = Job.__table__
    have = {c["name"] for c in inspect(engine).get_columns(table.name)}
    for column in table.columns:
        if column.name in have:
            continue
        ddl = f"ALTER TABLE {table.name} ADD COLUMN {column.name} {column.type.compile(engine.dialect)}"
        if column.default is not None and column.default.is_scalar and column.default.arg is not None:
            ddl += f" DEFAULT {column.default.arg!r}"
        try:
            with engine.begin() as c:
                c.exec_driver_sql(ddl)
            log.info("job store: added column %s.%s", table.name, column.name)
        except DBAPIError:  # another process added it first
            if column.name not in {c["name"] for c in inspect(engine).get_columns(table.name)}:
                raise


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql(conn.get_execution_options().get("sqlite_begin", "BEGIN"))


def _sqlite_connect(dbapi_conn, _record) -> None:
    dbapi_conn.isolation_level = None  # pysqlite must not emit its own BEGIN; `_sqlite_begin` does
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()

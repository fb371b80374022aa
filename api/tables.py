"""The job store's tables (SQLAlchemy): `Job`, its `JobEvent`s and pending `JobControl`s, the
job statuses and job ids. `videogen.api.store.JobStore` is the only writer."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import JSON, Boolean, Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

QUEUED, IN_PROGRESS, COMPLETED, FAILED, CANCELLED = "queued", "in_progress", "completed", "failed", "cancelled"
TERMINAL = (COMPLETED, FAILED, CANCELLED)
ID_PREFIX = "video_"


def new_job_id() -> str:
    return ID_PREFIX + secrets.token_hex(16)


def is_job_id(value: str) -> bool:
    """Job ids are ours (`video_` + 32 hex digits); only such strings ever become file names."""
    rest = value[len(ID_PREFIX) :] if value.startswith(ID_PREFIX) else ""
    return len(rest) == 32 and all(c in "0123456789abcdef" for c in rest)


class Base(DeclarativeBase):
    pass


class Job(Base):
    """One video job. Times are Unix seconds (float): the same on SQLite and PostgreSQL."""

    __tablename__ = "videogen_jobs"
    # Fair-share dispatch asks when each waiting tenant's last job started (`JobStore.next_queued`).
    __table_args__ = (Index("ix_videogen_jobs_tenant_started", "tenant", "started_at"),
                      Index("ix_videogen_jobs_webhook_due", "webhook_status", "webhook_next_at"))  # fmt: skip

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(200), index=True)
    model: Mapped[str] = mapped_column(String(200))  # the public model name
    prompt: Mapped[str] = mapped_column(Text)
    seconds: Mapped[str] = mapped_column(String(32))
    size: Mapped[str] = mapped_column(String(32))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # videogen RenderSpec.to_dict()
    source_video_id: Mapped[str | None] = mapped_column(String(40), default=None)  # extensions
    status: Mapped[str] = mapped_column(String(16), index=True, default=QUEUED)
    steps_done: Mapped[int] = mapped_column(Integer, default=0)
    steps_total: Mapped[int] = mapped_column(Integer, default=0)  # 0 until a worker has planned the job
    segments_done: Mapped[int] = mapped_column(Integer, default=0)
    segments_total: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)
    error_param: Mapped[str | None] = mapped_column(String(200), default=None)
    has_video: Mapped[bool] = mapped_column(Boolean, default=False)  # files live at OutputStorage paths
    has_thumbnail: Mapped[bool] = mapped_column(Boolean, default=False)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    lease_owner: Mapped[str | None] = mapped_column(String(200), default=None)
    lease_expires: Mapped[float | None] = mapped_column(Float, default=None)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    started_at: Mapped[float | None] = mapped_column(Float, default=None)
    completed_at: Mapped[float | None] = mapped_column(Float, default=None)
    expires_at: Mapped[float | None] = mapped_column(Float, default=None)
    # Webhook delivery (`api.webhooks`): the URL (the job's own or its tenant's), and once the job has
    # ended the event (`evt_...`, the same `webhook-id` on every retry) and its delivery state.
    webhook_url: Mapped[str | None] = mapped_column(String(2048), default=None)
    webhook_event: Mapped[str | None] = mapped_column(String(40), default=None)
    webhook_status: Mapped[str | None] = mapped_column(String(16), default=None)  # pending | delivered | failed
    webhook_attempts: Mapped[int] = mapped_column(Integer, default=0)
    webhook_next_at: Mapped[float | None] = mapped_column(Float, default=None)
    webhook_last_error: Mapped[str | None] = mapped_column(Text, default=None)
    # Model-aware routing (`api.routing`): the worker that completed the job (an extension prefers
    # it: its model and the source's tail are warm), and why a queued job waits (no live worker
    # serves its model), refreshed by the reaper.
    finished_by: Mapped[str | None] = mapped_column(String(200), default=None)
    queued_reason: Mapped[str | None] = mapped_column(String(300), default=None)

    @property
    def is_stream(self) -> bool:
        """A live stream (`stream: true`): `spec` is a `StreamSpec`, `steps_*` count frames and
        `segments_*` chunks."""
        return bool(self.spec) and self.spec.get("kind") == "stream"

    @property
    def progress(self) -> int:
        """Denoising steps done over steps in all segments (a stream: frames made over frames), in
        percent; 100 only when completed."""
        if self.status == COMPLETED:
            return 100
        if not self.steps_total:
            return 0
        return min(99, 100 * self.steps_done // self.steps_total)


class JobEvent(Base):
    """What the SSE stream replays: status changes, every denoising step, every finished segment;
    for a stream, every chunk (`progress`) and every prompt switch shown (`prompt`)."""

    __tablename__ = "videogen_job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(40), index=True)
    type: Mapped[str] = mapped_column(String(16))  # status | progress | segment | prompt
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)


class JobControl(Base):
    """A request to the worker of a running stream job: today a prompt switch. The worker takes
    (reads and deletes) them before each chunk; a table rather than a column keeps their order."""

    __tablename__ = "videogen_job_controls"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(40), index=True)
    type: Mapped[str] = mapped_column(String(16))  # prompt
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)


class WorkerRecord(Base):
    """A fleet worker's registration (`api.routing.WorkerRegistry`): the models it serves and when
    it last said it was alive. The reaper deletes rows silent for `worker_forget_seconds`."""

    __tablename__ = "videogen_workers"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)  # `WorkerContext.worker_id`
    queue: Mapped[str] = mapped_column(String(200), index=True)  # the fleet's base queue (VIDEOGEN_QUEUE)
    models: Mapped[list[str] | None] = mapped_column(JSON, default=None)  # public names; None: any model
    started_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    stopped: Mapped[bool] = mapped_column(Boolean, default=False)  # shut down cleanly (not merely silent)

"""Model-aware routing in a fleet: which worker may run which job, and where its wake-up goes.

A fleet worker declares the models it serves (`videogen worker --model NAME`, repeatable; none:
any model) and registers them in the job store (`WorkerRegistry`, table `videogen_workers`),
saying every `worker_heartbeat_seconds` that it is alive. The store stays the source of truth: a
woken worker claims the fair-share next job *of its models* (`JobStore.next_queued(models=)`),
so a 14B worker never loads the 1.3B model whatever message reaches it. Wake-ups are routed so
that they reach a worker that can use them:

* `<queue>.model.<model>`: a job's wake-up. A worker consumes the queues of its models; an
  any-model worker those of every model in its catalog and the bare `<queue>`.
* `<queue>.worker.<id>`: every worker's own queue. An extension's wake-up goes there when the
  worker that rendered its source is alive (its model and the source's tail are warm); the worker
  then runs that job first if fair share lets it. Not claimed within the reaper's grace, the job
  gets a wake-up on its model queue (`Reaper.redispatch` counts per model queue), so any worker of
  the model takes it when the preferred one is busy or has died.

At create time (`check`): a model a live worker serves is admitted; one that only workers silent
for less than `worker_forget_seconds` serve (down, expected back) is queued with a
`queued_reason`; one no registered worker serves is a 400 naming `model`. A fleet in which no
worker has registered yet (the API started first) queues everything with a reason.
"""

from __future__ import annotations

import builtins
import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, select

from .store import JobStore
from .tables import WorkerRecord

log = logging.getLogger("videogen.api")

LIVE_BEATS = 3  # a worker that missed this many heartbeats is down


def _slug(name: str) -> str:
    """A queue-name-safe form of a model name or worker id (Redis keys take anything; this keeps
    them readable in `redis-cli` and in logs)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:150]


def model_queue(base: str, model: str) -> str:
    return f"{base}.model.{_slug(model)}"


def worker_queue(base: str, worker_id: str) -> str:
    return f"{base}.worker.{_slug(worker_id)}"


def worker_queues(base: str, worker_id: str, models: tuple[str, ...] | None, catalog: list[str]) -> list[str]:
    """The queues a worker consumes: its own, its models' (an any-model worker: the catalog's, and
    the bare base queue that senders without a model use)."""
    own = [worker_queue(base, worker_id)]
    if models is None:
        return [*own, base, *(model_queue(base, m) for m in catalog)]
    return [*own, *(model_queue(base, m) for m in models)]


def parse_models(value: str) -> tuple[str, ...] | None:
    """`worker_models` ("a,b"; "" = any model) -> the served names, or None for any."""
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    return names or None


@dataclass(frozen=True)
class WorkerInfo:
    id: str
    models: tuple[str, ...] | None  # None: any model
    last_seen: float
    stopped: bool

    def serves(self, model: str) -> bool:
        return self.models is None or model in self.models

    def alive(self, now: float, live_seconds: float) -> bool:
        return not self.stopped and self.last_seen >= now - live_seconds


class ModelNotServed(Exception):
    """No worker of the fleet serves the model (none registered it within `worker_forget_seconds`)."""

    def __init__(self, model: str, served: builtins.list[str], any_model: bool) -> None:
        listed = ", ".join(served) if served else "none"
        super().__init__(f"The model '{model}' is not served by any worker of this server (served: {listed}).")
        self.model, self.served, self.any_model = model, served, any_model


class WorkerRegistry:
    """The fleet's workers as the job store knows them (one row each, `WorkerRecord`)."""

    def __init__(self, store: JobStore, queue: str, heartbeat_seconds: float = 10.0,
                 forget_seconds: float = 600.0) -> None:  # fmt: skip
        self.store, self.queue = store, queue
        self.live_seconds = LIVE_BEATS * heartbeat_seconds
        self.forget_seconds = max(forget_seconds, self.live_seconds)

    @classmethod
    def from_settings(cls, store: JobStore, settings) -> WorkerRegistry:
        return cls(store, settings.queue, settings.worker_heartbeat_seconds, settings.worker_forget_seconds)

    # -- worker side ---------------------------------------------------------------------------
    def heartbeat(self, worker_id: str, models: tuple[str, ...] | None) -> None:
        now = time.time()
        with self.store.write() as s:
            row = s.get(WorkerRecord, worker_id)
            if row is None:
                s.add(WorkerRecord(id=worker_id, queue=self.queue, models=list(models) if models else None,
                                   started_at=now, last_seen=now, stopped=False))  # fmt: skip
            else:
                row.last_seen, row.stopped = now, False

    def stopped(self, worker_id: str) -> None:
        """A clean shutdown: down at once (its models stay "served, down" for `forget_seconds`)."""
        with self.store.write() as s:
            row = s.get(WorkerRecord, worker_id)
            if row is not None:
                row.stopped = True

    # -- API side ------------------------------------------------------------------------------
    def workers(self, now: float | None = None) -> builtins.list[WorkerInfo]:
        """Workers of this fleet seen within `forget_seconds`."""
        now = time.time() if now is None else now
        with self.store.session() as s:
            rows = s.scalars(select(WorkerRecord).where(WorkerRecord.queue == self.queue,
                                                        WorkerRecord.last_seen >= now - self.forget_seconds))  # fmt: skip
            return [WorkerInfo(r.id, tuple(r.models) if r.models else None, r.last_seen, r.stopped) for r in rows]

    def is_alive(self, worker_id: str | None) -> bool:
        now = time.time()
        return worker_id is not None and any(w.id == worker_id and w.alive(now, self.live_seconds)
                                             for w in self.workers(now))  # fmt: skip

    def check(self, model: str) -> str | None:
        """None when a live worker serves `model`; the reason its jobs wait when only workers that
        are down serve it (or no worker has registered yet); `ModelNotServed` when none does."""
        now = time.time()
        workers = self.workers(now)
        if not workers:
            return "no worker has registered with this server yet"
        serving = [w for w in workers if w.serves(model)]
        if any(w.alive(now, self.live_seconds) for w in serving):
            return None
        if serving:  # the text changes only when a worker does: the reaper rewrites no row for nothing
            seen = datetime.fromtimestamp(max(w.last_seen for w in serving), UTC)
            return f"no live worker serves model '{model}' (one was last seen at {seen:%Y-%m-%dT%H:%M:%SZ})"
        served = sorted({m for w in workers for m in (w.models or ())})
        raise ModelNotServed(model, served, any(w.models is None for w in workers))

    def refresh_reasons(self, models: builtins.list[str]) -> None:
        """The reaper: each queued model's `queued_reason` as `check` sees it now."""
        for model in models:
            try:
                reason = self.check(model)
            except ModelNotServed as exc:  # its workers were forgotten: it waits for one to come back
                reason = f"no worker serves model '{exc.model}'"
            self.store.set_queued_reason(model, reason)

    def forget(self, now: float | None = None) -> int:
        """Delete the rows of workers silent for `forget_seconds`."""
        now = time.time() if now is None else now
        with self.store.write() as s:
            result = s.execute(delete(WorkerRecord).where(WorkerRecord.last_seen < now - self.forget_seconds))
            return result.rowcount  # type: ignore[attr-defined]

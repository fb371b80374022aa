"""The Celery app of a worker fleet (Redis broker), and its one task.

    celery -A workers.celery_app worker --pool=solo --concurrency=1     # or: videogen worker --gpu N

Settings follow Celery's advice for long GPU tasks (REFERENCES.md, "Celery with GPUs"):
`task_acks_late` (a task is acknowledged only when done, so a dead worker's task is delivered
again), prefetch 1 (a worker holds one job, not a backlog), the solo pool (CUDA does not survive
fork; one process per GPU), and a Redis visibility timeout above the longest render (otherwise
Redis delivers a running task again, and again). Redelivery is harmless anyway: the task only
takes the job id, and `run_job` renders only after winning the store's lease. Cancellation is
cooperative (a flag in the store, read every denoising step); revoke/terminate cannot stop a solo
pool. Nothing here ever waits on another task's result.

Routing (`api.routing`): the worker consumes its own queue `<queue>.worker.<id>` and the queues
of the models it serves (`VIDEOGEN_WORKER_MODELS`, set by `videogen worker --model`; none: every
model of its catalog and the bare queue), runs only jobs of those models, and registers them in
the job store with a heartbeat (`WorkerRegistry`) that the API reads to route and admit jobs.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import uuid

from celery import Celery, Task
from celery.signals import worker_init, worker_ready, worker_shutdown
from kombu import Exchange, Queue

from videogen.api.dispatch import RENDER_TASK
from videogen.api.routing import model_queue, parse_models, worker_queues
from videogen.api.settings import ServiceSettings

log = logging.getLogger("videogen.worker")

settings = ServiceSettings()
WORKER_ID = f"celery@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"  # one process, one worker
SERVES = parse_models(settings.worker_models)  # None: any model


def _catalog_names() -> list[str]:
    from videogen.api.catalog import ModelCatalog

    try:
        return ModelCatalog(settings).names()
    except Exception:  # a bad VIDEOGEN_MODELS: the worker still serves the bare queue and its own
        log.exception("the model catalog could not be read")
        return []


QUEUES = worker_queues(settings.queue, WORKER_ID, SERVES, _catalog_names() if SERVES is None else [])
app = Celery("videogen", broker=settings.redis_url or "redis://127.0.0.1:6379/0")
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_concurrency=1,
    worker_pool="solo",
    task_ignore_result=True,
    task_default_queue=settings.queue,
    # Each queue bound to its own direct exchange under its own name, as a sender's `queue=NAME`
    # declares it: a shared default binding would copy one wake-up into every queue.
    task_queues=tuple(Queue(q, Exchange(q, type="direct"), routing_key=q) for q in QUEUES),
    broker_transport_options={"visibility_timeout": settings.visibility_timeout},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


class RenderTask(Task):
    """Holds the worker's context (store, storage, model cache) once per process."""

    _context = None

    @property
    def context(self):
        if RenderTask._context is None:
            from videogen.api.storage import open_storage
            from videogen.api.store import JobStore

            from .jobs import WorkerContext
            from .models import ModelCache

            store = JobStore(settings.db_url, output_ttl_seconds=settings.output_ttl_seconds,
                             tenant_max_running=settings.tenant_max_running,
                             tenant_weights=settings.tenant_weight_table)  # fmt: skip
            models = ModelCache(settings.torch_threads, budget_gb=settings.model_cache_gb or None)
            RenderTask._context = WorkerContext(settings, store, open_storage(settings, min_free_bytes=0), models,
                                                WORKER_ID, serves=SERVES)  # fmt: skip
        return RenderTask._context


@app.task(name=RENDER_TASK, base=RenderTask, bind=True, ignore_result=True)
def render_job(self, job_id: str, worker: str | None = None) -> str | None:
    """A wake-up: run the store's fair-share next job of this worker's models (Celery's queue is
    FIFO; the store's order is fair between tenants). `job_id` is what the sender had in mind,
    `worker` the worker it was addressed to (an extension's source's); see `run_next`."""
    from .jobs import run_next

    return run_next(self.context, woken_for=job_id, addressed=worker == WORKER_ID)


@worker_init.connect
def _check_store(sender=None, **_kw) -> None:
    """A worker that cannot reach its job store is not ready: one line, exit 2, before it
    consumes anything (it would take wake-ups and fail every job). The same for its bucket."""
    _check_object_storage()  # first: the context below opens the bucket too
    try:
        render_job.context.store.ping()
    except Exception as exc:  # any driver or URL error
        from sqlalchemy.engine import make_url

        try:
            where = make_url(settings.db_url).render_as_string(hide_password=True)
        except Exception:
            where = "DATABASE_URL"
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        print(f"videogen worker: error: the job store ({where}) does not answer: {type(exc).__name__}: "
              f"{reason[0][:300] if reason else ''}", file=sys.stderr, flush=True)  # fmt: skip
        os._exit(2)  # not SystemExit: Celery would log it with a traceback and carry on starting


def _check_object_storage() -> None:
    """With VIDEOGEN_STORAGE_URL, the bucket must be usable (scheme, bucket, credentials, endpoint):
    else one line, exit 2, like a job store that does not answer."""
    if not settings.storage_url:
        return
    from videogen.api.s3storage import StorageConfigError
    from videogen.api.storage import open_storage

    try:
        problem = open_storage(settings).remote_problem()
    except StorageConfigError as exc:
        problem = str(exc)
    else:
        problem = problem and f"the object storage {settings.storage_url} cannot be used: {problem}"
    if problem:
        print(f"videogen worker: error: {problem}", file=sys.stderr, flush=True)
        os._exit(2)


@worker_init.connect
def _serve_metrics(sender=None, **_kw) -> None:
    """`--metrics-port` / VIDEOGEN_WORKER_METRICS_PORT: the worker's /metrics (`workers.metrics`); a
    port that cannot be bound is a one-line start-up error, exit 2."""
    if not settings.worker_metrics_port:
        return
    from .metrics import serve

    try:
        serve(settings.worker_metrics_port, settings.worker_metrics_host)
    except OSError as exc:
        print(f"videogen worker: error: the metrics port {settings.worker_metrics_host}:{settings.worker_metrics_port}"
              f" cannot be used: {exc.strerror or exc}", file=sys.stderr, flush=True)  # fmt: skip
        os._exit(2)
    log.info("worker metrics on http://%s:%d/metrics", settings.worker_metrics_host, settings.worker_metrics_port)


@worker_ready.connect
def _requeue_orphans(sender=None, **_kw) -> None:
    """A worker that starts after a crash need not wait for the API's reaper: jobs whose lease
    already ran out go back to the queue now."""
    try:
        for job in render_job.context.store.requeue_expired():
            if job.status == "queued":
                app.send_task(RENDER_TASK, args=[job.id], queue=model_queue(settings.queue, job.model))
    except Exception:  # the API's reaper does the same; never keep a worker from starting
        log.exception("requeue of orphaned jobs failed")


class Heartbeat:
    """Registers the worker and its models in the job store, then says every
    `worker_heartbeat_seconds` that it is alive (`api.routing.WorkerRegistry`); a clean shutdown
    marks it stopped at once. A beat that fails (the store hiccups) is retried at the next."""

    def __init__(self) -> None:
        from videogen.api.routing import WorkerRegistry

        self.registry = WorkerRegistry.from_settings(render_job.context.store, settings)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="videogen-heartbeat", daemon=True)

    def start(self) -> None:
        self.registry.heartbeat(WORKER_ID, SERVES)  # registered before the worker says `ready.`
        self._thread.start()
        log.info("worker %s serves %s; queues %s", WORKER_ID, ", ".join(SERVES) if SERVES else "any model",
                 ", ".join(QUEUES))  # fmt: skip

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)  # a beat in flight must not undo `stopped`
        self.registry.stopped(WORKER_ID)

    def _run(self) -> None:
        while not self._stop.wait(settings.worker_heartbeat_seconds):
            try:
                self.registry.heartbeat(WORKER_ID, SERVES)
            except Exception:
                log.warning("worker heartbeat failed", exc_info=True)


_heartbeat: Heartbeat | None = None


@worker_init.connect
def _register(sender=None, **_kw) -> None:
    global _heartbeat
    _heartbeat = Heartbeat()
    _heartbeat.start()


@worker_shutdown.connect
def _unregister(sender=None, **_kw) -> None:
    if _heartbeat is not None:
        try:
            _heartbeat.stop()
        except Exception:  # the store is gone: the worker is down once its beats stop anyway
            log.warning("could not mark the worker stopped", exc_info=True)

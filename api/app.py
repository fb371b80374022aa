"""The FastAPI app factory.

    app = create_app(ServiceSettings(), workers=[embedded_worker])

`workers` are objects with `start()`, `stop()` and `alive`, started and stopped with the app
(embedded mode passes its in-process worker; the API itself never imports `workers/`). A reaper
thread requeues jobs whose worker vanished (its lease ran out), removes outputs past
`expires_at`, and removes the spools of finished live streams (`api.spool`). A `WebhookSender`
thread delivers the jobs' webhook events (`api.webhooks`); `/metrics` is `api.metrics`.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from .catalog import ModelCatalog
from .console import install_console
from .dispatch import CeleryQueue, QueueUnavailable, StoreQueue
from .errors import error_body, install_error_handlers
from .limits import BodySizeLimit, max_body_bytes
from .metrics import ApiMetrics, metrics_endpoint
from .openapi import install_openapi
from .routing import WorkerRegistry
from .settings import ServiceSettings
from .storage import open_storage
from .store import JobStore
from .streams import router as streams_router
from .tables import TERMINAL
from .videos import Service, router
from .webhooks import WebhookSender

log = logging.getLogger("videogen.api")


class Reaper:
    """Every `interval` s: requeue jobs with an expired lease (crashed worker), purge expired outputs,
    remove the spools of streams that ended `stream_spool_keep_seconds` ago, and (fleet) send the
    wake-ups the broker lost (`redispatch`)."""

    def __init__(self, service: Service, interval: float) -> None:
        self.service, self.interval = service, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="videogen-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def run_once(self) -> None:
        svc = self.service
        for job in svc.store.requeue_expired():
            if job.status == "queued":
                try:
                    svc.queue.submit(job.id, model=job.model)
                except QueueUnavailable:  # `redispatch` sends it when the broker is back
                    pass
        for job in svc.store.expired():
            try:
                svc.storage.remove(job.id)
            except OSError as exc:  # the bucket failed: the next pass tries again
                log.warning("job %s: outputs not removed yet: %s", job.id, exc)
                continue
            svc.store.purge(job.id)
            log.info(
                "job %s tenant %s: outputs removed (%s)", job.id, job.tenant, "deleted" if job.deleted else "expired"
            )
        keep_until = time.time() - svc.settings.stream_spool_keep_seconds
        for job_id in svc.storage.stream_ids():
            job = svc.store.get_any(job_id)
            if job is None or (job.status in TERMINAL and (job.completed_at or 0) < keep_until):
                svc.storage.remove_stream(job_id)
        self.redispatch()
        self.refresh_routing()

    def refresh_routing(self) -> None:
        """Fleet: forget workers silent for `worker_forget_seconds`, and say why queued jobs wait
        (`queued_reason`: no live worker serves their model) or stop saying it."""
        registry = getattr(self.service.queue, "registry", None)
        if registry is None:
            return
        registry.forget()
        registry.refresh_reasons(self.service.store.queued_models())

    dispatch_grace_seconds = 2.0  # a create's own wake-up may still be on its way this long

    def redispatch(self) -> int:
        """Fleet: the store is the source of truth. Queued jobs a worker could claim now, minus the
        wake-ups waiting in Redis, are wake-ups lost (Redis restarted without persistence, a create
        while it was down, a wake-up taken while the tenant was at its running limit): send that
        many again. Never more: a wake-up is not tied to its job id (the worker claims the
        fair-share next job), and the store's lease decides who renders. Counted per model queue
        (`api.routing`): a wake-up waiting in one worker's own queue (an extension's) is not
        counted, so a job its preferred worker has not claimed within the grace gets one on its
        model's queue, which any worker of the model takes. Returns the number sent."""
        svc = self.service
        backlog = getattr(svc.queue, "backlog", None)
        if backlog is None:  # embedded: the worker polls the store itself
            return 0
        missing = 0
        try:
            before = time.time() - self.dispatch_grace_seconds
            for model in svc.store.queued_models():
                waiting = svc.store.next_queued(limit=10_000, created_before=before, models=(model,))
                lost = len(waiting) - backlog(model) if waiting else 0
                for job_id in waiting[: max(0, lost)]:
                    svc.queue.submit(job_id, model=model)
                missing += max(0, lost)
        except QueueUnavailable as exc:
            log.warning("re-dispatch deferred: the broker does not answer (%s)", str(exc)[:200])
            return 0
        except Exception as exc:  # Redis down while asking for the backlog: the next pass tries again
            log.warning("re-dispatch deferred: %s: %s", type(exc).__name__, str(exc)[:200])
            return 0
        if missing > 0:
            log.warning("re-dispatched %d queued job(s) the broker had no wake-up for", missing)
        return missing

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except Exception:  # a database hiccup must not kill the reaper
                log.exception("reaper pass failed")


def build_service(settings: ServiceSettings) -> Service:
    data = settings.data_path
    data.mkdir(parents=True, exist_ok=True)
    store = JobStore(settings.db_url, output_ttl_seconds=settings.output_ttl_seconds,
                     tenant_max_running=settings.tenant_max_running,
                     tenant_weights=settings.tenant_weight_table)  # fmt: skip
    queue = (CeleryQueue(settings.redis_url, settings.queue, settings.visibility_timeout,
                         WorkerRegistry.from_settings(store, settings))
             if settings.fleet else StoreQueue())  # fmt: skip
    return Service(settings, store, open_storage(settings), ModelCatalog(settings), queue)


def create_app(settings: ServiceSettings | None = None, *, service: Service | None = None,
               workers: list[Any] | None = None) -> FastAPI:  # fmt: skip
    settings = settings or ServiceSettings()
    service = service or build_service(settings)
    workers = list(workers or [])
    reaper = Reaper(service, settings.reaper_interval_seconds)
    metrics = ApiMetrics(service, workers)
    webhooks = WebhookSender(service.store, service.webhooks,
                             on_attempt=lambda result: metrics.webhook_attempts.labels(result).inc())  # fmt: skip

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Everything alive after start-up (modules, app, settings) is moved out of the cyclic GC's
        # reach and full collections are rarer: a gen-2 pass over SQLAlchemy/FastAPI's object graph
        # stalled every in-flight request by tens of ms (create p99 60-150 ms -> see docs/service.md).
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        reaper.start()
        webhooks.start()
        for w in workers:
            w.start()
        log.info("videogen API ready: %s mode, data in %s", service.queue.mode, settings.data_path)
        yield
        for w in workers:
            w.stop()
        reaper.stop()
        webhooks.stop()

    app = FastAPI(title="videogen", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.service = service
    app.state.workers = workers
    app.state.reaper = reaper
    app.state.webhooks = webhooks
    app.state.metrics = metrics
    install_error_handlers(app)
    install_openapi(app, settings.max_prompt_chars)
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes(settings))
    app.include_router(router)
    app.include_router(streams_router)
    install_console(app)  # the page at /, and /docs with local assets

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    app.add_api_route("/metrics", metrics_endpoint(metrics, settings.metrics_token), methods=["GET"],
                      tags=["health"], include_in_schema=False)  # fmt: skip

    @app.get("/readyz", tags=["health"])
    def readyz():
        """Readiness: the store answers, a file can be written in the data directory and its disk
        has `min_free_bytes` free, the queue (Redis) answers, and in embedded mode the worker
        process runs and has said it is ready (not while it is dead or restarting)."""
        checks: dict[str, str] = {}
        try:
            service.store.ping()
            checks["database"] = "ok"
        except Exception as exc:  # any driver error means not ready
            checks["database"] = f"error: {type(exc).__name__}"
        problem = service.storage.problem()
        checks["data_dir"] = "ok" if problem is None else f"error: {problem}"
        if service.storage.remote is not None:  # the bucket outputs live in (VIDEOGEN_STORAGE_URL)
            problem = service.storage.remote_problem()
            checks["object_storage"] = "ok" if problem is None else f"error: {problem}"
        try:
            service.queue.ping()
            checks["queue"] = "ok"
        except Exception as exc:
            checks["queue"] = f"error: {type(exc).__name__}"
        if workers:
            checks["worker"] = "ok" if all(w.alive for w in workers) else "error: not running"
        ok = all(v == "ok" for v in checks.values())
        if not ok:
            bad = ", ".join(f"{k} ({v})" for k, v in checks.items() if v != "ok")
            return JSONResponse({**error_body(f"not ready: {bad}", "server_error", None, "not_ready"), "checks": checks},
                                503)  # fmt: skip
        return {"status": "ready", "mode": service.queue.mode, "checks": checks}

    return app

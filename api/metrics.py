"""`GET /metrics`: Prometheus text exposition of the API process (docs/service.md "Metrics").

Computed at scrape time from the job store (the source of truth, so every API process of a fleet
says the same): `videogen_jobs{status,tenant}`, `videogen_queue_depth` (queued jobs), and in a
fleet `videogen_broker_backlog` (wake-ups waiting in Redis); `videogen_webhooks_pending`; plus the
API's own counter `videogen_webhook_attempts_total{result}`. The embedded worker's metrics
(`videogen.workers.metrics`: jobs run, time queued and running, denoising step time, segments,
model loaded, GPU memory) are added from the worker objects the app runs: each may have
`metrics_collectors()` (the child process writes them with prometheus-client's multiprocess
mode into a directory the API process reads). The API never imports `workers/`.

Open to anyone who reaches the port (like `/healthz`): it holds counts, tenant names and model
names, never keys, secrets, prompts or webhook URLs. `VIDEOGEN_METRICS_TOKEN` restricts it to
`Authorization: Bearer <token>`.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .errors import error_body

log = logging.getLogger("videogen.api")


class StoreCollector(Collector):
    """Gauges read from the store (and the broker) at every scrape."""

    def __init__(self, service) -> None:
        self.service = service

    def collect(self):
        svc = self.service
        jobs = GaugeMetricFamily("videogen_jobs", "Jobs in the store by status and tenant (until purged).",
                                 labels=["status", "tenant"])  # fmt: skip
        queued = 0
        for (status, tenant), n in sorted(svc.store.count_by_status_tenant().items()):
            jobs.add_metric([status, tenant], n)
            queued += n if status == "queued" else 0
        yield jobs
        yield GaugeMetricFamily("videogen_queue_depth", "Queued jobs waiting for a worker.", value=queued)
        yield GaugeMetricFamily("videogen_webhooks_pending", "Webhook deliveries not yet delivered or given up.",
                                value=svc.store.pending_webhooks())  # fmt: skip
        backlog = getattr(svc.queue, "backlog", None)
        if backlog is not None:
            try:
                value = backlog()
            except Exception:  # Redis down: the gauge is absent this scrape
                return
            yield GaugeMetricFamily("videogen_broker_backlog", "Wake-ups waiting in the broker.", value=value)


class ApiMetrics:
    """The API process's registry: the store's gauges, its counters, and its workers' metrics."""

    def __init__(self, service, workers: list[Any]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StoreCollector(service))
        self.webhook_attempts = Counter("videogen_webhook_attempts_total", "Webhook delivery attempts by result "
                                        "(delivered, retry, failed).", ["result"], registry=self.registry)  # fmt: skip
        self.workers = workers

    def render(self) -> bytes:
        parts = [generate_latest(self.registry)]
        for w in self.workers:
            for collector in getattr(w, "metrics_collectors", lambda: [])():
                registry = CollectorRegistry(auto_describe=False)
                registry.register(collector)
                try:
                    parts.append(generate_latest(registry))
                except Exception:  # a half-written file of a worker that just died: next scrape
                    log.warning("worker metrics unreadable this scrape", exc_info=True)
        return b"".join(parts)


def metrics_endpoint(metrics: ApiMetrics, token: str):
    def metrics_route(request: Request) -> Response:
        """Prometheus text exposition (see `api.metrics`); `VIDEOGEN_METRICS_TOKEN` set: bearer token."""
        if token:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                body = error_body("/metrics needs the metrics token.", "invalid_request_error", None, "invalid_api_key")
                return JSONResponse(body, 401)
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return metrics_route

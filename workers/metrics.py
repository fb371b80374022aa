"""A worker process's Prometheus metrics (docs/service.md "Metrics"), observed by `workers.jobs`:

    videogen_worker_jobs_total{status}          jobs this process ran to an end (completed, failed, cancelled)
    videogen_job_queued_seconds                 created -> first claimed (observed when a job first starts)
    videogen_job_running_seconds{status}        claimed -> ended, per attempt (observed when it ends)
    videogen_denoising_step_seconds{model}      every denoising step of a render
    videogen_segments_rendered_total            segments denoised and written (not those restored from checkpoints)
    videogen_segments_retried_total             re-samplings by the health gate (segments and stream chunks)
    videogen_worker_up{worker}                  1 while the worker process lives
    videogen_worker_busy{worker}                1 while it renders a job
    videogen_worker_model_loaded{worker,model,device,dtype}  1 per model it holds
    videogen_gpu_memory_allocated_bytes{worker,device}, ..._max_allocated_bytes   torch.cuda, on a GPU only

Where they are served:

* a Celery worker: `videogen worker --metrics-port N` (or `VIDEOGEN_WORKER_METRICS_PORT`) serves
  `http://<host>:N/metrics` from the worker process (the solo pool: one process);
* the embedded worker's child process (`VIDEOGEN_EMBEDDED_WORKER=process`, the default): it writes
  its metrics with prometheus-client's multiprocess mode (`enable_multiprocess`, memory-mapped
  files in a directory the API process made) and the API's `/metrics` reads them
  (`MultiProcessCollector`). Counters and histograms of a child that died and was restarted are
  kept (summed); its gauges go with it (`mark_dead`). Gauges then carry a `pid` label;
* the embedded worker thread: the API's `/metrics` reads this module's registry directly.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_JOB_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400)


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry(auto_describe=True)
        self.jobs = Counter("videogen_worker_jobs", "Jobs this worker ran to an end, by final status.", ["status"],
                            registry=r)  # fmt: skip
        self.queued = Histogram("videogen_job_queued_seconds", "Time from create to a job's first start.",
                                buckets=_JOB_BUCKETS, registry=r)  # fmt: skip
        self.running = Histogram("videogen_job_running_seconds", "Time from claim to end of one attempt at a job.",
                                 ["status"], buckets=_JOB_BUCKETS, registry=r)  # fmt: skip
        self.steps = Histogram("videogen_denoising_step_seconds", "Wall time of one denoising step.", ["model"],
                               buckets=_STEP_BUCKETS, registry=r)  # fmt: skip
        self.segments = Counter("videogen_segments_rendered", "Segments denoised and written (not restored).",
                                registry=r)  # fmt: skip
        self.retries = Counter("videogen_segments_retried", "Segment or chunk re-samplings by the health gate.",
                               registry=r)  # fmt: skip
        self.up = Gauge("videogen_worker_up", "1 while the worker process lives.", ["worker"], registry=r,
                        multiprocess_mode="liveall")  # fmt: skip
        self.busy = Gauge("videogen_worker_busy", "1 while the worker renders a job.", ["worker"], registry=r,
                          multiprocess_mode="liveall")  # fmt: skip
        self.model = Gauge("videogen_worker_model_loaded", "1 per model the worker holds in memory.",
                           ["worker", "model", "device", "dtype"], registry=r, multiprocess_mode="liveall")  # fmt: skip
        self.gpu = Gauge("videogen_gpu_memory_allocated_bytes", "torch.cuda.memory_allocated after the last segment.",
                         ["worker", "device"], registry=r, multiprocess_mode="liveall")  # fmt: skip
        self.gpu_max = Gauge("videogen_gpu_memory_max_allocated_bytes", "torch.cuda.max_memory_allocated.",
                             ["worker", "device"], registry=r, multiprocess_mode="liveall")  # fmt: skip

    # -- what `workers.jobs` reports ---------------------------------------------------------
    def worker_started(self, worker: str) -> None:
        self.up.labels(worker).set(1)
        self.busy.labels(worker).set(0)

    def job_claimed(self, worker: str, created_at: float, first_start: bool) -> float:
        """Returns the claim time (`time.monotonic()`) for `job_ended`."""
        self.busy.labels(worker).set(1)
        if first_start:
            self.queued.observe(max(0.0, time.time() - created_at))
        return time.monotonic()

    def job_ended(self, worker: str, status: str | None, claimed: float) -> None:
        self.busy.labels(worker).set(0)
        if status is not None:  # None: the lease went to another worker; it reports the end
            self.jobs.labels(status).inc()
            self.running.labels(status).observe(time.monotonic() - claimed)
        self.gpu_memory(worker)

    def model_loaded(self, worker: str, model: str, device: str, dtype: str) -> None:
        self.model.labels(worker, model, device, dtype).set(1)

    def gpu_memory(self, worker: str) -> None:
        """torch.cuda's memory counters, where torch is loaded and has a GPU; nothing otherwise."""
        torch = sys.modules.get("torch")
        try:
            if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
                return
            for i in range(torch.cuda.device_count()):
                self.gpu.labels(worker, f"cuda:{i}").set(torch.cuda.memory_allocated(i))
                self.gpu_max.labels(worker, f"cuda:{i}").set(torch.cuda.max_memory_allocated(i))
        except Exception:  # a metric must never fail a render
            return


_lock = threading.Lock()
_metrics: WorkerMetrics | None = None


def worker_metrics() -> WorkerMetrics:
    """This process's `WorkerMetrics` (made on first use)."""
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = WorkerMetrics()
        return _metrics


def enable_multiprocess(directory: str) -> None:
    """The embedded child, before its first metric: write metrics to memory-mapped files in
    `directory` (prometheus-client's multiprocess mode) for the API process to read."""
    from prometheus_client import values

    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    values.ValueClass = values.MultiProcessValue()


def multiprocess_collector(directory: str):
    """The API process's reader of a child's metric files."""
    from prometheus_client.multiprocess import MultiProcessCollector

    return MultiProcessCollector(None, path=directory)


def mark_dead(pid: int, directory: str) -> None:
    """A child that exited: its live gauges go (counters and histograms stay)."""
    from prometheus_client import multiprocess

    try:
        multiprocess.mark_process_dead(pid, directory)
    except OSError:
        pass


def serve(port: int, host: str) -> None:
    """A Celery worker's `/metrics` (a daemon thread of the worker process)."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=host, registry=worker_metrics().registry)

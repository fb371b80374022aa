"""`EmbeddedWorker`: the in-process worker of `videogen serve` (embedded mode, no Redis).

A thread claims queued jobs from the store, oldest first, and runs them with `run_job`, the same
function the Celery task calls. It renders with `torch_threads` threads (default 1) so that the
API's event loop keeps a core: torch releases the GIL inside its kernels, and on the 2-core dev
machine 50 concurrent clients still see create p99 well under 50 ms while a render runs
(benchmarks/api_load.py).
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from api.videos import Service
from workers.jobs import WorkerContext, run_job
from workers.models import ModelCache

log = logging.getLogger("videogen.worker")


class EmbeddedWorker:
    def __init__(self, service: Service, wakeup: threading.Event | None = None) -> None:
        self.service = service
        self.ctx = WorkerContext(service.settings, service.store, service.storage, ModelCache(service.settings.torch_threads),
                                 worker_id=f"embedded@{socket.gethostname()}:{os.getpid()}")  # fmt: skip
        self.wakeup = wakeup or getattr(service.queue, "wakeup", None) or threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="videogen-embedded-worker", daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current job. A job still rendering at exit keeps its checkpoints and lease;
        the lease runs out and the next start resumes it."""
        self._stop.set()
        self.wakeup.set()

    def _run(self) -> None:
        log.info("embedded worker %s started", self.ctx.worker_id)
        poll = self.ctx.settings.worker_poll_seconds
        while not self._stop.is_set():
            self.wakeup.clear()
            try:
                ran = self._run_next()
            except Exception:  # the store may be briefly unavailable; keep the worker alive
                log.exception("embedded worker: pass failed")
                ran = False
            if not ran:
                self.wakeup.wait(poll)

    def _run_next(self) -> bool:
        for job_id in self.ctx.store.next_queued():
            if self._stop.is_set():
                return False
            if run_job(job_id, self.ctx) is not None:
                return True
        return False

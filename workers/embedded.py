"""The embedded worker of `videogen serve` (no Redis): claims queued jobs from the store, oldest
first, and runs them with `run_job`, the same function the Celery task calls.

Two ways to host it, same loop (`EmbeddedWorker`):

* `EmbeddedWorkerProcess` (default): a child process started with `spawn`. The API process never
  imports torch and keeps its GIL to itself, and the child runs at a lower priority (nice 10).
  With a tiny model most render time is Python overhead that holds the GIL: at 50 clients on the
  busy 2-core dev box, create p99 was ~440 ms with the thread, ~170 ms with a child process at
  normal priority, ~24 ms with the niced child (benchmarks/api_load.py; docs/service.md). The
  child exits when the API process goes away, and the API restarts it if it dies.
* `EmbeddedWorkerThread`: a thread of the API process (`VIDEOGEN_EMBEDDED_WORKER=thread`).

A create wakes the worker at once through an event; otherwise it polls every
`worker_poll_seconds`.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
import threading

from videogen.api.settings import ServiceSettings
from videogen.api.videos import Service

from .jobs import WorkerContext, run_job
from .models import ModelCache

log = logging.getLogger("videogen.worker")


class EmbeddedWorker:
    """The claim-and-run loop. `stop` and `wakeup` are threading or multiprocessing events."""

    def __init__(self, service: Service, wakeup, stop, parent_pid: int | None = None) -> None:
        self.ctx = WorkerContext(service.settings, service.store, service.storage,
                                 ModelCache(service.settings.torch_threads),
                                 worker_id=f"embedded@{socket.gethostname()}:{os.getpid()}")  # fmt: skip
        self.wakeup, self.stop = wakeup, stop
        self.parent_pid = parent_pid

    def run(self) -> None:
        log.info("embedded worker %s started", self.ctx.worker_id)
        poll = self.ctx.settings.worker_poll_seconds
        while not self.stop.is_set():
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                log.warning("embedded worker: the API process is gone; exiting")
                return
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
            if self.stop.is_set():
                return False
            if run_job(job_id, self.ctx) is not None:
                return True
        return False


class EmbeddedWorkerThread:
    """In a thread of the API process. Stopping waits for nothing: a job still rendering at exit
    keeps its checkpoints; its lease runs out and the next start resumes it."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._stop = threading.Event()
        self.wakeup = getattr(service.queue, "wakeup", None) or threading.Event()
        self._thread = threading.Thread(target=self._run, name="videogen-embedded-worker", daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wakeup.set()

    def _run(self) -> None:
        EmbeddedWorker(self.service, self.wakeup, self._stop).run()


def _child_main(settings: dict, wakeup, stop, parent_pid: int, log_level: int) -> None:
    from videogen.api.app import build_service

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.get("embedded_worker_nice"):
        os.nice(settings["embedded_worker_nice"])
    service = build_service(ServiceSettings(**settings))
    try:
        EmbeddedWorker(service, wakeup, stop, parent_pid).run()
    except KeyboardInterrupt:
        pass


class EmbeddedWorkerProcess:
    """In a child process; a supervisor thread restarts it if it dies while the API runs."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._mp = multiprocessing.get_context("spawn")  # CUDA and torch threads do not survive fork
        self.wakeup = self._mp.Event()
        self._stop = self._mp.Event()
        service.queue.wakeup = self.wakeup  # StoreQueue.submit sets it
        self._proc = None
        self._supervisor = threading.Thread(target=self._supervise, name="videogen-worker-supervisor", daemon=True)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _spawn(self) -> None:
        args = (self.service.settings.model_dump(), self.wakeup, self._stop, os.getpid(), logging.getLogger().level)
        self._proc = self._mp.Process(target=_child_main, args=args, name="videogen-embedded-worker", daemon=True)
        self._proc.start()

    def start(self) -> None:
        self._spawn()
        self._supervisor.start()

    def _supervise(self) -> None:
        while not self._stop.wait(1.0):
            if self._proc is not None and not self._proc.is_alive():
                log.error("embedded worker process exited (%s); restarting it", self._proc.exitcode)
                self._spawn()

    def stop(self) -> None:
        self._stop.set()
        self.wakeup.set()
        if self._proc is not None:
            self._proc.join(timeout=5)  # a render stops at its next step only if cancelled; do not wait long
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=5)

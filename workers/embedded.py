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

A create wakes the worker at once; otherwise it polls the store every `worker_poll_seconds`, so
a lost wake-up costs one poll. Nothing the API does ever waits on the worker: the child process
is woken through a pipe whose write end never blocks (a dead child, or a full pipe, costs a
dropped byte), and the supervisor thread alone watches, restarts and stops the child. The child
shares no lock with the API process: a multiprocessing Event did, and a child killed while
waiting on it left `Event.set` in every later create waiting forever.

Stopping (SIGTERM/SIGINT to `serve`, or to its whole process group as systemd, `timeout` and
container runtimes send it): the child exits at once, mid-render too. A running job keeps its
checkpoints; its lease runs out and the reaper of the next start requeues and resumes it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import select
import signal
import socket
import threading
import time

from videogen.api.settings import ServiceSettings
from videogen.api.videos import Service

from .jobs import WorkerContext, run_job
from .models import ModelCache

log = logging.getLogger("videogen.worker")


class EmbeddedWorker:
    """The claim-and-run loop. `wakeup` has `clear()` and `wait(timeout)` (a `threading.Event`, or
    the child's `WakeupReader`); `stop` has `is_set()`."""

    def __init__(self, service: Service, wakeup, stop, parent_pid: int | None = None) -> None:
        self.ctx = WorkerContext(service.settings, service.store, service.storage,
                                 ModelCache(service.settings.torch_threads, service.settings.model_cache_gb or None),
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

    def metrics_collectors(self) -> list:
        """For the API's `/metrics`: this process's worker metrics (`workers.metrics`)."""
        from .metrics import worker_metrics

        return [worker_metrics().registry]


class WakeupPipe:
    """The API's end of the child's wake-up pipe: `set()` writes one byte and never blocks. A full
    pipe already holds a wake-up; a dead child's pipe (EPIPE) needs none, since its successor polls
    the store first. `attach` swaps in the pipe of a restarted child; `close` sends EOF (stop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held only around a non-blocking write or a close
        self._fd: int | None = None

    def attach(self, fd: int) -> None:
        os.set_blocking(fd, False)
        with self._lock:
            old, self._fd = self._fd, fd
        if old is not None:
            os.close(old)

    def set(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            try:
                os.write(self._fd, b"w")
            except OSError:  # BlockingIOError (a wake-up is pending) or BrokenPipeError (the child is gone)
                pass

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class WakeupReader:
    """The child's end of the wake-up pipe: `wait(timeout)` returns at the first byte or at EOF,
    which means the API closed its end (stopping) or died; `closed` is then set."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.closed = threading.Event()

    def clear(self) -> None:
        self._drain()

    def wait(self, timeout: float) -> None:
        if not self.closed.is_set() and select.select([self.fd], [], [], timeout)[0]:
            self._drain()

    def _drain(self) -> None:
        try:
            while True:
                if not os.read(self.fd, 4096):
                    self.closed.set()
                    return
        except BlockingIOError:
            pass


def _child_main(settings: dict, wakeup_conn, ready_conn, parent_pid: int, log_level: int,
                metrics_dir: str | None = None) -> None:  # fmt: skip
    if metrics_dir is not None:  # before any metric exists: the API process reads them from there
        from .metrics import enable_multiprocess

        enable_multiprocess(metrics_dir)
    from videogen.api.app import build_service
    from videogen.api.logs import setup_logging

    setup_logging(log_level, settings.get("log_format", "text"))
    # SIGTERM keeps its default action (exit now: the job's checkpoints make it resumable); SIGINT
    # (a terminal's Ctrl-C reaches the whole group) does the same instead of a KeyboardInterrupt
    # that a render's cleanup could take for a failure.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if settings.get("embedded_worker_nice"):
        os.nice(settings["embedded_worker_nice"])
    service = build_service(ServiceSettings(**settings))
    wakeup = WakeupReader(wakeup_conn.fileno())
    ready_conn.send_bytes(b"ready")
    EmbeddedWorker(service, wakeup, wakeup.closed, parent_pid).run()


class EmbeddedWorkerProcess:
    """In a child process, watched by a supervisor thread: it restarts a child that dies while the
    API runs (after 1 s, doubling up to 30 s while children die before they are ready), and
    `alive` (readiness) is true only while a child runs and has said it is ready."""

    TICK = 0.25  # s between the supervisor's looks at the child

    def __init__(self, service: Service) -> None:
        self.service = service
        self._mp = multiprocessing.get_context("spawn")  # CUDA and torch threads do not survive fork
        self.wakeup = WakeupPipe()
        service.queue.wakeup = self.wakeup  # StoreQueue.submit sets it
        self._stop = threading.Event()  # the API's own: the child never touches it
        self._proc = None
        self._ready_conn = None
        self._ready = False
        self._supervisor = threading.Thread(target=self._supervise, name="videogen-worker-supervisor", daemon=True)
        self.metrics_dir: str | None = None  # the child's metric files (`workers.metrics`), made at start

    @property
    def alive(self) -> bool:
        return self._ready

    def metrics_collectors(self) -> list:
        """For the API's `/metrics`: the child's metrics, read from its multiprocess files."""
        from .metrics import multiprocess_collector

        return [multiprocess_collector(self.metrics_dir)] if self.metrics_dir else []

    def start(self) -> None:
        import tempfile

        self.metrics_dir = tempfile.mkdtemp(prefix="videogen-worker-metrics-")
        self._spawn()
        self._supervisor.start()

    def _spawn(self) -> None:
        wake_r, wake_w = self._mp.Pipe(duplex=False)
        ready_r, ready_w = self._mp.Pipe(duplex=False)
        args = (self.service.settings.model_dump(), wake_r, ready_w, os.getpid(), logging.getLogger().level,
                self.metrics_dir)  # fmt: skip
        proc = self._mp.Process(target=_child_main, args=args, name="videogen-embedded-worker", daemon=True)
        proc.start()
        wake_r.close()  # only the child reads: its death makes our writes fail instead of filling the pipe
        ready_w.close()
        self.wakeup.attach(os.dup(wake_w.fileno()))
        wake_w.close()
        if self._ready_conn is not None:
            self._ready_conn.close()
        self._proc, self._ready_conn, self._ready = proc, ready_r, False

    def _supervise(self) -> None:
        backoff, restart_at = 1.0, None
        while not self._stop.wait(self.TICK):
            proc = self._proc
            if proc.is_alive():
                if not self._ready and self._ready_conn.poll(0):
                    self._ready, backoff = True, 1.0
                continue
            if restart_at is None:
                self._ready = False
                if self.metrics_dir:  # its live gauges (up, busy, model) go; its counters stay
                    from .metrics import mark_dead

                    mark_dead(proc.pid, self.metrics_dir)
                # SIGTERM/SIGINT to the whole group reaches the child first: the API is stopping too.
                level = logging.WARNING if proc.exitcode in (-signal.SIGTERM, -signal.SIGINT) else logging.ERROR
                log.log(level, "embedded worker process exited (%s); restarting it in %.0f s", proc.exitcode, backoff)
                restart_at = time.monotonic() + backoff
            elif time.monotonic() >= restart_at:
                restart_at, backoff = None, min(30.0, backoff * 2)
                self._spawn()

    def stop(self) -> None:
        """EOF on the wake-up pipe stops an idle child at once; a rendering one gets SIGTERM."""
        self._stop.set()
        if self._supervisor.is_alive():
            self._supervisor.join(timeout=2)
        self._ready = False
        self.wakeup.close()
        proc = self._proc
        if proc is None:
            return
        proc.join(timeout=1)
        for send in (proc.terminate, proc.kill):
            if proc.is_alive():
                send()
                proc.join(timeout=3)
        if self.metrics_dir:
            import shutil

            shutil.rmtree(self.metrics_dir, ignore_errors=True)

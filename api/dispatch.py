"""How a created job reaches a worker.

* `StoreQueue` (embedded mode): the store *is* the queue; `submit` only wakes the in-process
  worker so that it does not wait for its next poll. The wake-up never blocks (a thread's
  `threading.Event`, or the worker process's `WakeupPipe`): a dead worker must not stop creates.
* `CeleryQueue` (fleet mode, `REDIS_URL` set): sends the task `videogen.render_job(job_id)` by
  name over Redis. The API does not import `workers/` (which would bring torch along); the task
  name and queue are the contract.

A message carries only a job id and is only a wake-up: the spec stays in the store, the worker
claims the store's fair-share next job, and a redelivered or duplicated message is harmless (the
store's lease decides who renders). Messages Redis lost are sent again by the API's reaper.
In a fleet a wake-up goes to its model's queue, or to one worker's (`api.routing`).
"""

from __future__ import annotations

import threading
import time

from .routing import model_queue, worker_queue

RENDER_TASK = "videogen.render_job"


class StoreQueue:
    mode = "embedded"

    def __init__(self) -> None:
        self.wakeup = threading.Event()  # replaced by the embedded worker's own; `set()` must never block

    def submit(self, job_id: str, *, model: str | None = None, prefer_worker: str | None = None) -> None:
        self.wakeup.set()

    def check(self, model: str) -> str | None:
        """The embedded worker serves every model."""
        return None

    def ping(self) -> None:
        pass


class QueueUnavailable(Exception):
    """The broker did not take a wake-up. The job stays queued in the store; the reaper's
    re-dispatch (`CeleryQueue.backlog`) sends it once the broker answers again."""


class CeleryQueue:
    """Wake-ups over Redis. A message is a wake-up, not a job: the worker that takes one claims
    the store's fair-share next job (`JobStore.next_queued`), so the broker needs only as many
    messages as there are claimable jobs, whichever ids they carry. What Redis loses (a restart
    without persistence, a create while it was down) the reaper sends again: claimable jobs minus
    the messages waiting (`backlog`)."""

    mode = "fleet"
    retry_after_failure = 2.0  # s: after a failed send, creates skip the broker (no wait) this long

    def __init__(self, redis_url: str, queue: str, visibility_timeout: int, registry=None) -> None:
        from celery import Celery

        self.queue = queue
        self.registry = registry  # `api.routing.WorkerRegistry`; None: every wake-up to `queue` (no routing)
        self.app = Celery("videogen-api", broker=redis_url)
        # A create must not hang on a broker that is down: one quick retry, short socket timeouts.
        self.app.conf.update(broker_transport_options={"visibility_timeout": visibility_timeout,
                                                       "socket_connect_timeout": 2, "socket_timeout": 5},
                             task_ignore_result=True, broker_connection_retry_on_startup=True,
                             broker_connection_timeout=2,
                             task_publish_retry_policy={"max_retries": 1, "interval_start": 0.1,
                                                        "interval_step": 0.2, "interval_max": 0.2})  # fmt: skip
        self._down_until = 0.0

    def check(self, model: str) -> str | None:
        """`WorkerRegistry.check`: None (served), a reason the job will wait, or `ModelNotServed`."""
        return None if self.registry is None else self.registry.check(model)

    def queue_for(self, model: str | None) -> str:
        return self.queue if model is None or self.registry is None else model_queue(self.queue, model)

    def submit(self, job_id: str, *, model: str | None = None, prefer_worker: str | None = None) -> None:
        """Send a wake-up for a job of `model` (None: the bare queue, any-model workers); to
        `prefer_worker`'s own queue when that worker is alive. `QueueUnavailable` when the broker
        does not take it."""
        if time.monotonic() < self._down_until:
            raise QueueUnavailable("the broker did not answer a moment ago")
        queue, kwargs = self.queue_for(model), {}
        if prefer_worker is not None and self.registry is not None and self.registry.is_alive(prefer_worker):
            queue, kwargs = worker_queue(self.queue, prefer_worker), {"worker": prefer_worker}
        try:
            self.app.send_task(RENDER_TASK, args=[job_id], kwargs=kwargs, queue=queue)
        except Exception as exc:  # kombu's OperationalError, a socket error, a timeout: all mean "not sent"
            self._down_until = time.monotonic() + self.retry_after_failure
            raise QueueUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def backlog(self, model: str | None = None) -> int:
        """Wake-ups waiting in the broker (not yet taken by a worker) for `model`'s queue; None: in
        the bare queue and the queues of every model with queued jobs (`videogen_broker_backlog`)."""
        from kombu.exceptions import ChannelError

        queues = {self.queue_for(model)}
        if model is None and self.registry is not None:
            queues |= {self.queue_for(m) for m in self.registry.store.queued_models()}
        with self.app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            total = 0
            for queue in sorted(queues):
                try:
                    total += conn.default_channel.queue_declare(queue=queue, passive=True).message_count
                except ChannelError:  # no such queue: Redis holds no message for it
                    pass
            return total

    def ping(self) -> None:
        with self.app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            conn.default_channel.client.ping()

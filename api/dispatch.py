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
"""

from __future__ import annotations

import threading
import time

RENDER_TASK = "videogen.render_job"


class StoreQueue:
    mode = "embedded"

    def __init__(self) -> None:
        self.wakeup = threading.Event()  # replaced by the embedded worker's own; `set()` must never block

    def submit(self, job_id: str) -> None:
        self.wakeup.set()

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

    def __init__(self, redis_url: str, queue: str, visibility_timeout: int) -> None:
        from celery import Celery

        self.queue = queue
        self.app = Celery("videogen-api", broker=redis_url)
        # A create must not hang on a broker that is down: one quick retry, short socket timeouts.
        self.app.conf.update(broker_transport_options={"visibility_timeout": visibility_timeout,
                                                       "socket_connect_timeout": 2, "socket_timeout": 5},
                             task_ignore_result=True, broker_connection_retry_on_startup=True,
                             broker_connection_timeout=2,
                             task_publish_retry_policy={"max_retries": 1, "interval_start": 0.1,
                                                        "interval_step": 0.2, "interval_max": 0.2})  # fmt: skip
        self._down_until = 0.0

    def submit(self, job_id: str) -> None:
        """Send a wake-up; `QueueUnavailable` when the broker does not take it."""
        if time.monotonic() < self._down_until:
            raise QueueUnavailable("the broker did not answer a moment ago")
        try:
            self.app.send_task(RENDER_TASK, args=[job_id], queue=self.queue)
        except Exception as exc:  # kombu's OperationalError, a socket error, a timeout: all mean "not sent"
            self._down_until = time.monotonic() + self.retry_after_failure
            raise QueueUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def backlog(self) -> int:
        """Wake-ups waiting in the broker (not yet taken by a worker)."""
        from kombu.exceptions import ChannelError

        with self.app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            try:
                return conn.default_channel.queue_declare(queue=self.queue, passive=True).message_count
            except ChannelError:  # no such queue: Redis holds no message for it
                return 0

    def ping(self) -> None:
        with self.app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            conn.default_channel.client.ping()

"""How a created job reaches a worker.

* `StoreQueue` (embedded mode): the store *is* the queue; `submit` only wakes the in-process
  worker so that it does not wait for its next poll.
* `CeleryQueue` (fleet mode, `REDIS_URL` set): sends the task `videogen.render_job(job_id)` by
  name over Redis. The API does not import `workers/` (which would bring torch along); the task
  name and queue are the contract.

A message carries only the job id: the spec stays in the store, so a redelivered or duplicated
message is harmless (the worker's claim on the store's lease decides who renders).
"""

from __future__ import annotations

import threading

RENDER_TASK = "videogen.render_job"


class StoreQueue:
    mode = "embedded"

    def __init__(self) -> None:
        self.wakeup = threading.Event()

    def submit(self, job_id: str) -> None:
        self.wakeup.set()

    def ping(self) -> None:
        pass


class CeleryQueue:
    mode = "fleet"

    def __init__(self, redis_url: str, queue: str, visibility_timeout: int) -> None:
        from celery import Celery

        self.queue = queue
        self.app = Celery("videogen-api", broker=redis_url)
        self.app.conf.update(broker_transport_options={"visibility_timeout": visibility_timeout},
                             task_ignore_result=True, broker_connection_retry_on_startup=True)  # fmt: skip

    def submit(self, job_id: str) -> None:
        self.app.send_task(RENDER_TASK, args=[job_id], queue=self.queue)

    def ping(self) -> None:
        with self.app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            conn.default_channel.client.ping()

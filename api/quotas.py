"""Per-tenant admission of creates: the create rate and the queued-jobs cap, answered with 429,
`Retry-After` and OpenAI's error shape (`type: rate_limit_error`, `code` naming the limit).

The other half of fair share is dispatch order (`JobStore.next_queued`: tenants in turn, a
tenant at `VIDEOGEN_TENANT_MAX_RUNNING` skipped). The queued cap is counted by the store inside
the create's transaction (`TenantQueueFull`); the rate is a token bucket per API process, like
most API gateways keep it: `tenant_burst` creates at once, refilled at `tenant_rate` per minute.
With several API processes a tenant gets up to that many times the rate (documented in
docs/service.md); a store-based count would cost every create a query and could be dodged by
deleting jobs.
"""

from __future__ import annotations

import math
import threading
import time

from fastapi.responses import JSONResponse

from .errors import error_body
from .store import TenantQueueFull

QUEUE_FULL_RETRY_AFTER = 10  # s: a hint only; a slot frees when one of the tenant's jobs starts


class RateLimited(Exception):
    def __init__(self, tenant: str, retry_after: float, rate: float) -> None:
        super().__init__(f"tenant {tenant} is over {rate:g} creates per minute")
        self.tenant, self.retry_after, self.rate = tenant, retry_after, rate


class CreateRateLimiter:
    """Token bucket per tenant: `take(tenant)` spends one create or raises `RateLimited`."""

    def __init__(self, per_minute: float, burst: int) -> None:
        self.rate = per_minute / 60.0  # tokens per second
        self.per_minute = per_minute
        self.burst = float(burst or max(1.0, per_minute / 6))
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, monotonic time)
        self._lock = threading.Lock()

    def take(self, tenant: str) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        with self._lock:
            tokens, then = self._buckets.get(tenant, (self.burst, now))
            tokens = min(self.burst, tokens + (now - then) * self.rate)
            if tokens < 1.0:
                self._buckets[tenant] = (tokens, now)
                raise RateLimited(tenant, (1.0 - tokens) / self.rate, self.per_minute)
            self._buckets[tenant] = (tokens - 1.0, now)


def limit_response(exc: RateLimited | TenantQueueFull) -> JSONResponse:
    """The 429 for a refused create."""
    if isinstance(exc, RateLimited):
        message = (f"Rate limit reached: at most {exc.rate:g} video creates per minute per tenant "
                   f"(VIDEOGEN_TENANT_RATE). Retry after {math.ceil(exc.retry_after)} s.")  # fmt: skip
        code, retry_after = "tenant_rate_limit", math.ceil(exc.retry_after)
    else:
        message = (f"Too many queued videos: you have {exc.queued}, the limit is {exc.limit} "
                   "(VIDEOGEN_TENANT_MAX_QUEUED). Retry when one has started.")  # fmt: skip
        code, retry_after = "tenant_max_queued", QUEUE_FULL_RETRY_AFTER
    return JSONResponse(error_body(message, "rate_limit_error", None, code), 429,
                        headers={"Retry-After": str(max(1, retry_after))})  # fmt: skip

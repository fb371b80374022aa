"""Webhooks: `video.completed`, `video.failed` and `video.cancelled` events, signed per the Standard
Webhooks scheme and delivered at least once by the API process's `WebhookSender` thread.

* **Where.** A job's `webhook_url` (create or extension body), else its tenant's
  (`VIDEOGEN_WEBHOOKS="tenant=https://...,..."`), is stored on the job when it is created.
* **What.** OpenAI's webhook event: `{"id": "evt_...", "object": "event", "type": "video.completed",
  "created_at": <unix>, "data": {"id": "video_..."}}`, POSTed as JSON with the headers
  `webhook-id` (the event id: the same on every retry, so a receiver deduplicates by it),
  `webhook-timestamp` (unix seconds of this attempt) and `webhook-signature`:
  `v1,<base64 HMAC-SHA256(key, "{webhook-id}.{webhook-timestamp}.{body}")>`, where the key is the
  base64-decoded part of the secret `whsec_<base64>`: the tenant's (`VIDEOGEN_WEBHOOK_SECRETS=
  "tenant=whsec_..."`), else the server's (`VIDEOGEN_WEBHOOK_SECRET`). The operator hands each
  tenant its secret out of band, as with API keys; a create naming a URL is refused while the
  tenant has no secret.
* **When.** `JobStore._finish` marks the delivery pending with a new event id when the job ends
  (not for a deleted job). The sender polls the store every `webhook_poll_seconds`, claims a due
  delivery (`JobStore.claim_webhook`: one sender per attempt across API processes; a sender that
  dies mid-attempt leaves it due again, so a restart resumes it) and POSTs it from a small thread
  pool with `webhook_timeout_seconds` per attempt: a receiver that never answers holds one pool
  thread for that long and nothing else. A 2xx answer is delivered; anything else is retried
  after `webhook_retry_seconds` (default 5 s, 30 s, 2 min, ... about a day in all), then failed.
  The state is on the job object: `webhook: {url, status, event_id, attempts, last_error}`.
* **SSRF.** A URL must be `https://` and name a public address (every address its host resolves
  to: not private, loopback, link-local, reserved or multicast), checked at create time and again
  before every attempt (no redirects are followed), unless its host is one of
  `VIDEOGEN_WEBHOOK_ALLOW_HOSTS` (then http and any address are fine).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .tables import CANCELLED, COMPLETED, FAILED, Job

log = logging.getLogger("videogen.api")

EVENT_TYPES = {COMPLETED: "video.completed", FAILED: "video.failed", CANCELLED: "video.cancelled"}
MAX_URL_CHARS = 2048
RESOLVE_TIMEOUT = 3.0  # s: a create does not wait longer for the webhook host's DNS
_resolver = ThreadPoolExecutor(max_workers=4, thread_name_prefix="videogen-webhook-dns")


def parse_secret(value: str, where: str) -> bytes:
    """`whsec_<base64>` -> the HMAC key; ValueError (naming `where`) otherwise."""
    value = value.strip()
    if not value.startswith("whsec_"):
        raise ValueError(f"{where}: a webhook secret must look like 'whsec_<base64>'")
    try:
        key = base64.b64decode(value[len("whsec_") :], validate=True)
    except ValueError:
        raise ValueError(f"{where}: the part after 'whsec_' is not base64") from None
    if len(key) < 16:
        raise ValueError(f"{where}: the secret's key is {len(key)} bytes; use at least 16 (24 to 64 is usual)")
    return key


def _pairs(value: str, where: str, example: str) -> dict[str, str]:
    table = {}
    for item in filter(None, (s.strip() for s in value.split(","))):
        tenant, sep, rest = item.partition("=")
        if not sep or not tenant.strip() or not rest.strip():
            raise ValueError(f"{where}: expected {example!r}: {item[:80]!r}")
        table[tenant.strip()] = rest.strip()
    return table


@dataclass
class WebhookConfig:
    """The parsed webhook settings; `from_settings` raises ValueError with a one-line reason."""

    tenant_urls: dict[str, str] = field(default_factory=dict)
    tenant_keys: dict[str, bytes] = field(default_factory=dict)
    server_key: bytes | None = None
    allow_hosts: frozenset[str] = frozenset()
    retry_seconds: tuple[float, ...] = ()
    timeout: float = 5.0
    poll: float = 1.0

    @classmethod
    def from_settings(cls, settings) -> WebhookConfig:
        cfg = cls(timeout=settings.webhook_timeout_seconds, poll=settings.webhook_poll_seconds)
        if not cfg.timeout > 0 or not cfg.poll > 0:
            raise ValueError("VIDEOGEN_WEBHOOK_TIMEOUT_SECONDS and _POLL_SECONDS must be > 0")
        cfg.allow_hosts = frozenset(h.strip().lower().strip("[]")
                                    for h in settings.webhook_allow_hosts.split(",") if h.strip())  # fmt: skip
        try:
            cfg.retry_seconds = tuple(float(s) for s in settings.webhook_retry_seconds.split(",") if s.strip())
        except ValueError:
            cfg.retry_seconds = (-1.0,)
        if any(not (0 <= s < 7 * 86400) for s in cfg.retry_seconds):
            raise ValueError("VIDEOGEN_WEBHOOK_RETRY_SECONDS: expected seconds between attempts, e.g. '5,30,120'")
        if settings.webhook_secret:
            cfg.server_key = parse_secret(settings.webhook_secret, "VIDEOGEN_WEBHOOK_SECRET")
        for tenant, secret in _pairs(settings.webhook_secrets, "VIDEOGEN_WEBHOOK_SECRETS",
                                     "tenant=whsec_...,...").items():  # fmt: skip
            cfg.tenant_keys[tenant] = parse_secret(secret, f"VIDEOGEN_WEBHOOK_SECRETS ({tenant})")
        for tenant, url in _pairs(settings.webhooks, "VIDEOGEN_WEBHOOKS", "tenant=https://...,...").items():
            problem = cfg.url_problem(url, resolve=False)  # DNS is checked before every attempt
            if problem is not None:
                raise ValueError(f"VIDEOGEN_WEBHOOKS ({tenant}): {problem}")
            if cfg.key_for(tenant) is None:
                raise ValueError(f"VIDEOGEN_WEBHOOKS ({tenant}): no signing secret: set VIDEOGEN_WEBHOOK_SECRET "
                                 f"or VIDEOGEN_WEBHOOK_SECRETS='{tenant}=whsec_...'")  # fmt: skip
            cfg.tenant_urls[tenant] = url
        return cfg

    def key_for(self, tenant: str) -> bytes | None:
        return self.tenant_keys.get(tenant, self.server_key)

    def url_problem(self, url: str, *, resolve: bool = True) -> str | None:
        """Why `url` may not receive webhooks, or None (see the module's "SSRF")."""
        if len(url) > MAX_URL_CHARS:
            return f"is longer than {MAX_URL_CHARS} characters"
        try:
            parts = urlsplit(url)
            host, _port = (parts.hostname or "").lower(), parts.port
        except ValueError as exc:
            return f"is not a valid URL ({exc})"
        if parts.scheme not in ("http", "https") or not host:
            return "must be an https:// URL"
        if parts.username is not None or parts.password is not None:
            return "must not carry credentials (user:password@)"
        if host in self.allow_hosts:
            return None
        if parts.scheme != "https":
            return "must be an https:// URL (or name a host in VIDEOGEN_WEBHOOK_ALLOW_HOSTS)"
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            if not resolve:
                return None
            try:
                infos = _resolver.submit(socket.getaddrinfo, host, parts.port or 443, 0, socket.SOCK_STREAM)
                addresses = [ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos.result(RESOLVE_TIMEOUT)]
            except (OSError, FutureTimeout, ValueError):
                return f"names a host that does not resolve ({host})"
        for address in addresses:
            if not address.is_global or address.is_multicast:
                return f"points at a non-public address ({address}); only public https hosts receive webhooks"
        return None


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks signature header value."""
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def event_body(job: Job) -> bytes:
    return json.dumps({"id": job.webhook_event, "object": "event", "type": EVENT_TYPES[job.status],
                       "created_at": int(job.completed_at or time.time()), "data": {"id": job.id}},
                      separators=(",", ":")).encode()  # fmt: skip


def webhook_object(job: Job) -> dict | None:
    """The job object's `webhook`: null without a URL; `waiting` until the job ends."""
    if not job.webhook_url:
        return None
    return {"url": job.webhook_url, "status": job.webhook_status or "waiting", "event_id": job.webhook_event,
            "attempts": job.webhook_attempts or 0, "last_error": job.webhook_last_error}  # fmt: skip


class WebhookSender:
    """The API process's delivery thread (see the module's docstring). `on_attempt(result)` is
    called after each attempt with `delivered`, `retry` or `failed` (metrics)."""

    def __init__(self, store, config: WebhookConfig, on_attempt: Callable[[str], None] | None = None,
                 threads: int = 8) -> None:  # fmt: skip
        self.store, self.config, self.on_attempt, self.threads = store, config, on_attempt, threads
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="videogen-webhook")
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="videogen-webhooks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def run_once(self) -> int:
        """Start every due delivery (each in the pool); returns how many were started."""
        started = 0
        hold = self.config.timeout + 30.0
        for job in self.store.due_webhooks(limit=100):
            with self._lock:
                if job.id in self._busy or len(self._busy) >= 4 * self.threads:
                    continue
            if not self.store.claim_webhook(job.id, time.time() + hold):
                continue
            with self._lock:
                self._busy.add(job.id)
            self._pool.submit(self._deliver, job)
            started += 1
        return started

    def _run(self) -> None:
        while not self._stop.wait(self.config.poll):
            try:
                self.run_once()
            except Exception:  # a database hiccup must not stop deliveries for good
                log.exception("webhook pass failed")

    def _deliver(self, job: Job) -> None:
        try:
            error = self._attempt(job)
        except Exception as exc:  # never lose the attempt's outcome
            error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                self._busy.discard(job.id)
        attempt = (job.webhook_attempts or 0) + 1
        waits = self.config.retry_seconds
        retry_at = time.time() + waits[attempt - 1] if error is not None and attempt <= len(waits) else None
        self.store.record_webhook(job.id, delivered=error is None, error=error, retry_at=retry_at)
        if self.on_attempt is not None:
            self.on_attempt("delivered" if error is None else ("retry" if retry_at is not None else "failed"))

    def _attempt(self, job: Job) -> str | None:
        """POST the event once; None when the receiver answered 2xx, else why not."""
        import httpx

        url = job.webhook_url or ""
        problem = self.config.url_problem(url)
        if problem is not None:
            return f"webhook_url {problem}"
        key = self.config.key_for(job.tenant)
        if key is None:
            return "no signing secret for the tenant (VIDEOGEN_WEBHOOK_SECRET(S))"
        body = event_body(job)
        ts = int(time.time())
        headers = {"content-type": "application/json", "user-agent": "videogen-webhooks",
                   "webhook-id": job.webhook_event or "", "webhook-timestamp": str(ts),
                   "webhook-signature": sign(key, job.webhook_event or "", ts, body)}  # fmt: skip
        try:
            t = self.config.timeout
            r = httpx.post(url, content=body, headers=headers, follow_redirects=False,
                           timeout=httpx.Timeout(t, connect=min(t, 5.0)))  # fmt: skip
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {str(exc)[:200]}"
        if 200 <= r.status_code < 300:
            return None
        return f"HTTP {r.status_code}"

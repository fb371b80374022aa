"""Logging of `videogen serve`, `videogen worker` and the embedded worker's child process: one
line per event, with the job id and tenant when known, long values cut, as text for a terminal
or as JSON for log shippers (`--log-format json`). Torch-free, like the rest of `api`.

    setup_logging("info", "json")
    with job_log_context(job.id):       # the worker, around one job
        bind_tenant(job.tenant)         # once the job's row is read
        log.warning("...")              # -> {"time", "level", "logger", "message", "job_id", "tenant"}

Python warnings (`warnings.warn`, e.g. the text encoder's vocabulary warning, which quotes the
prompt) go through logging too, so they are cut and tagged like every other line.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS = ("text", "json")
MAX_ARG_CHARS = 200  # each %-argument (a prompt is the usual long one)
MAX_MESSAGE_CHARS = 2000  # the whole message, after formatting
MAX_TRACEBACK_CHARS = 8000  # the tail of a traceback (the frames nearest the error)

_job: contextvars.ContextVar[dict[str, str | None] | None] = contextvars.ContextVar("videogen_log_job", default=None)


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more chars]"


@contextmanager
def job_log_context(job_id: str, tenant: str | None = None) -> Iterator[None]:
    """Every line logged inside (in this thread or task) carries `job_id` and `tenant`."""
    token = _job.set({"job_id": job_id, "tenant": tenant})
    try:
        yield
    finally:
        _job.reset(token)


def bind_tenant(tenant: str) -> None:
    """Add the tenant to the current job's context (the worker learns it when it claims the job)."""
    context = _job.get()
    if context is not None:
        context["tenant"] = tenant


class JobContextFilter(logging.Filter):
    """Sets `record.job_id` / `record.tenant` from the job context (an explicit `extra=` wins) and
    cuts long %-arguments, so no line holds a whole prompt."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _job.get() or {}
        for key in ("job_id", "tenant"):
            if getattr(record, key, None) is None:
                setattr(record, key, context.get(key))
        if isinstance(record.args, tuple):
            record.args = tuple(_cut(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _cut(v) for k, v in record.args.items()}
        return True


def _cut(value: Any) -> Any:
    if isinstance(value, str | bytes) and len(value) > MAX_ARG_CHARS:
        return shorten(value if isinstance(value, str) else repr(value), MAX_ARG_CHARS)
    return value


def _message(record: logging.LogRecord) -> str:
    """The formatted message on one line, cut to `MAX_MESSAGE_CHARS`."""
    return shorten(record.getMessage(), MAX_MESSAGE_CHARS).replace("\r", "\\r").replace("\n", "\\n")


class TextFormatter(logging.Formatter):
    """`2026-12-01 17:36:39,123 WARNING videogen.worker [job=video_... tenant=alpha]: message`"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = _message(record)
        record.asctime = self.formatTime(record)
        job_id, tenant = getattr(record, "job_id", None), getattr(record, "tenant", None)
        parts = [f"job={job_id}"] * bool(job_id) + [f"tenant={tenant}"] * bool(tenant)
        record.context = f" [{' '.join(parts)}]" if parts else ""
        line = self.formatMessage(record)
        if record.exc_info:
            line += "\n" + shorten_tail(self.formatException(record.exc_info), MAX_TRACEBACK_CHARS)
        return line


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message, job_id, tenant,
    and `exception` (the traceback, as one string) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": shorten(record.getMessage(), MAX_MESSAGE_CHARS),
            "job_id": getattr(record, "job_id", None),
            "tenant": getattr(record, "tenant", None),
        }
        if record.exc_info:
            entry["exception"] = shorten_tail(self.formatException(record.exc_info), MAX_TRACEBACK_CHARS)
        return json.dumps(entry, ensure_ascii=False, default=str)


def shorten_tail(text: str, limit: int) -> str:
    """The last `limit` characters of `text` (a traceback's end names the error)."""
    return text if len(text) <= limit else f"[{len(text) - limit} chars cut]...{text[-limit:]}"


def setup_logging(level: str | int = "info", fmt: LogFormat = "text") -> None:
    """Configure the root logger of this process (replacing any handler it had)."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(JobContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    logging.captureWarnings(True)

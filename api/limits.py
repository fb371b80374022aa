"""Bounds on what one request may make the server hold or store: the body's size whatever its
transfer encoding, the nesting of its JSON, the length and characters of its text, the size of
its numbers. Everything beyond them is a 4xx in OpenAI's error shape naming the field, decided
before anything is parsed into a model, stored or queued.

    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes(settings))
    body = parse_json(raw)                           # 400 invalid_json, or a number too large
    check_values(body, max_text=settings.max_prompt_chars)

`BodySizeLimit` follows Starlette's pure-ASGI middleware pattern: it counts the bytes of the
`http.request` messages as the app reads them (a chunked upload declares no Content-Length) and
stops reading past the limit, so an oversized body is never held whole.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError, error_body

FORM_OVERHEAD_BYTES = 65536  # a body may hold `max_upload_bytes` of image plus the form's other fields
MAX_JSON_DEPTH = 32  # our deepest field is shots[i].prompt (depth 3); drift_correction's values are flat
MAX_INT_DIGITS = 20  # 2**64 has 20 digits: no field takes a larger integer (seed < 2**63)


def max_body_bytes(settings) -> int:
    return settings.max_upload_bytes + FORM_OVERHEAD_BYTES


def too_large(limit: int, multipart: bool) -> APIError:
    """A form's only large field is its `input_reference` image: the error names it."""
    return APIError(413, f"Request body is larger than {limit} bytes.", param="input_reference" if multipart else None,
                    code="payload_too_large")  # fmt: skip


class BodySizeLimit:
    """413 for a request whose body exceeds `max_bytes`: at once when its Content-Length says so,
    else as soon as the bytes read pass the limit (the app's `request.body()`/`form()` raises the
    413 `APIError`, which the error handlers answer)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        multipart = headers.get(b"content-type", b"").startswith(b"multipart/")
        length = headers.get(b"content-length", b"")  # the server (h11) has refused a malformed one already
        if length.isdigit() and int(length) > self.max_bytes:
            await _send_error(send, too_large(self.max_bytes, multipart))
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large(self.max_bytes, multipart)
            return message

        await self.app(scope, limited_receive, send)


async def _send_error(send: Send, exc: APIError) -> None:
    body = json.dumps(error_body(exc.message, exc.type, exc.param, exc.code)).encode()
    await send({"type": "http.response.start", "status": exc.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


class _TooLarge(str):
    """A JSON number no field can take (parsing it would cost time, or give inf); `check_values`
    names its field."""


def _parse_int(text: str) -> int | _TooLarge:
    digits = len(text) - text.startswith("-")
    return _TooLarge(text) if digits > MAX_INT_DIGITS else int(text)


def _parse_float(text: str) -> float | _TooLarge:
    value = float(text)
    return _TooLarge(text) if value in (float("inf"), float("-inf")) else value


def _refuse_constant(name: str) -> Any:
    raise APIError(400, f"The body is not valid JSON: {name} is not a JSON number.", code="invalid_json")


def parse_json(raw: bytes | str) -> Any:
    """JSON text -> value; 400 `invalid_json` for text that is not JSON (NaN and Infinity
    included) or nests too deeply for the parser. Numbers too large for any field come back as
    markers that `check_values` answers with a 400 naming the field."""
    try:
        return json.loads(raw, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant)
    except RecursionError:
        raise APIError(400, f"The body's JSON nests more than {MAX_JSON_DEPTH} levels deep.",
                       code="invalid_json") from None  # fmt: skip
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise APIError(400, "The body must be JSON or multipart/form-data.", code="invalid_json") from None


def check_text(param: str, value: str, max_chars: int) -> None:
    """One free-text value: at most `max_chars` characters, no NUL (PostgreSQL's text refuses it)."""
    if len(value) > max_chars:
        raise APIError(400, f"'{param}' is {len(value)} characters long; at most {max_chars} are allowed.",
                       param=param, code="string_above_max_length")  # fmt: skip
    if "\x00" in value:
        raise APIError(400, f"'{param}' contains a NUL character (\\u0000).", param=param, code="invalid_value")


def check_values(value: Any, *, max_text: int) -> None:
    """Walk a parsed body (iteratively: the depth is bounded, not the walk's stack): 400 naming
    the first field nested deeper than `MAX_JSON_DEPTH`, holding a number too large, or text
    `check_text` refuses (keys included)."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        path, item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise APIError(400, f"'{path}' nests more than {MAX_JSON_DEPTH} levels deep.", param=path,
                           code="invalid_value")  # fmt: skip
        if isinstance(item, _TooLarge):
            raise APIError(400, f"Invalid '{path}': the number {item[:24]}... is too large.", param=path,
                           code="invalid_value")  # fmt: skip
        if isinstance(item, str):
            check_text(path, item, max_text)
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):  # reversed: the first field is reported first
                child_path = f"{path}.{key}" if path else str(key)
                check_text(child_path[:100], str(key), max_text)
                stack.append((child_path, child, depth + 1))
        elif isinstance(item, list):
            stack.extend((f"{path}.{i}" if path else str(i), item[i], depth + 1) for i in reversed(range(len(item))))

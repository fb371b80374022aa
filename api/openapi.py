"""The served OpenAPI document (`/openapi.json`), made to describe what the server answers, so
that a generated client and schemathesis can trust it (tests/service/test_openapi_fuzz.py).

FastAPI derives the paths and parameters from the routes; the routes parse their bodies by hand
(JSON or multipart, `api.videos.read_params`), answer errors in OpenAI's shape with 400 rather
than 422, and stream binary or event media. `install_openapi` adds what FastAPI cannot see:

* request bodies: `CreateParams` / `ExtendParams` / `PromptParams` as JSON, and the create's
  multipart form (`input_reference` as a binary part, JSON-valued fields as text); every text
  field carries the server's `max_prompt_chars` as `maxLength`;
* responses: the video object, list and deletion; `video/mp4`, `image/png` and JSON for
  `/content`, `text/event-stream` for `/events`, MJPEG for `/stream`; and every error status a
  route answers (400, 401, 404, 409, 413, 429, 503) with the `ErrorResponse` schema;
* bearer-key security (and `?api_key=` for the MJPEG stream).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from .schemas import CreateParams, ExtendParams, PromptParams

ERROR_RESPONSE = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string", "description": "invalid_request_error, rate_limit_error or server_error"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}

_NULLABLE_INT = {"type": ["integer", "null"]}
VIDEO = {
    "type": "object",
    "required": ["id", "object", "model", "status", "progress", "created_at", "seconds", "size", "prompt"],
    "properties": {
        "id": {"type": "string", "pattern": "^video_[0-9a-f]{32}$"},
        "object": {"const": "video"},
        "model": {"type": "string"},
        "status": {"type": "string", "enum": ["queued", "in_progress", "completed", "failed", "cancelled"]},
        "progress": {"type": "integer", "minimum": 0, "maximum": 100},
        "created_at": {"type": "integer"},
        "completed_at": _NULLABLE_INT,
        "expires_at": _NULLABLE_INT,
        "started_at": _NULLABLE_INT,
        "seconds": {"type": "string"},
        "size": {"type": "string", "pattern": "^[0-9]+x[0-9]+$"},
        "prompt": {"type": "string"},
        "remixed_from_video_id": {"type": ["string", "null"]},
        "extended_from_video_id": {"type": ["string", "null"]},
        "error": {
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "param": {"type": ["string", "null"]},
                    },
                },
            ]
        },
        "steps_done": {"type": "integer", "minimum": 0},
        "steps_total": {"type": "integer", "minimum": 0},
        "segments_done": {"type": "integer", "minimum": 0},
        "segments_total": {"type": "integer", "minimum": 0},
        "stream": {"type": ["object", "null"]},
        "queued_reason": {
            "type": ["string", "null"],
            "description": "Why a queued job waits (no live worker serves its model); null otherwise.",
        },
        "retries_used": {"type": "integer", "minimum": 0},
        "segment_retries": {"type": "array", "items": {"type": "object"}},
        "webhook": {
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["url", "status", "attempts"],
                    "properties": {
                        "url": {"type": "string"},
                        "status": {"type": "string", "enum": ["waiting", "pending", "delivered", "failed"]},
                        "event_id": {"type": ["string", "null"]},
                        "attempts": {"type": "integer", "minimum": 0},
                        "last_error": {"type": ["string", "null"]},
                    },
                },
            ]
        },
    },
}
VIDEO_LIST = {
    "type": "object",
    "required": ["object", "data", "first_id", "last_id", "has_more"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "items": {"$ref": "#/components/schemas/Video"}},
        "first_id": {"type": ["string", "null"]},
        "last_id": {"type": ["string", "null"]},
        "has_more": {"type": "boolean"},
    },
}
VIDEO_DELETED = {
    "type": "object",
    "required": ["id", "object", "deleted"],
    "properties": {"id": {"type": "string"}, "object": {"const": "video.deleted"}, "deleted": {"type": "boolean"}},
}
PROMPT_SWITCH = {
    "type": "object",
    "required": ["object", "video_id", "prompt", "status"],
    "properties": {"object": {"const": "video.prompt_switch"}, "video_id": {"type": "string"},
                   "prompt": {"type": "string"}, "status": {"const": "requested"}},
}  # fmt: skip

SSE_EVENT = {  # OpenAPI 3.1: the schema of a text/event-stream describes each event
    "type": "object",
    "required": ["event", "data", "id"],
    "properties": {
        "event": {"type": "string", "description": "status, progress, segment, retry or prompt"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "id": {"type": "string", "pattern": "^[0-9]+$"},
    },
}

_ERRORS = {
    400: "Invalid request: the error names the parameter (`param`).",
    401: "Missing or unknown API key.",
    404: "No such video for this API key (another tenant's video answers the same).",
    409: "The stream has ended, or a prompt switch found it finished.",
    413: "The request body is larger than the server's limit.",
    429: "Too many requests or jobs for this API key; retry after `Retry-After` seconds.",
    503: "The job store or queue is unavailable; retry later.",
}
_BINARY = {"type": "string", "format": "binary"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(name)}}


# (path, method) -> (its 200 response, the error statuses it answers besides 400, 401 and 503)
_OPERATIONS: dict[tuple[str, str], tuple[dict[str, Any], tuple[int, ...]]] = {
    ("/v1/videos", "post"): ({"description": "The video job, queued.", "content": _json("Video")}, (404, 413, 429)),
    ("/v1/videos", "get"): (
        {"description": "A page of your videos, newest first by default.", "content": _json("VideoList")},
        (),
    ),
    ("/v1/videos/extensions", "post"): (
        {"description": "The extension job, queued.", "content": _json("Video")},
        (404, 413, 429),
    ),
    ("/v1/videos/{video_id}", "get"): ({"description": "The video.", "content": _json("Video")}, (404,)),
    ("/v1/videos/{video_id}", "delete"): ({"description": "Deleted.", "content": _json("VideoDeleted")}, (404,)),
    ("/v1/videos/{video_id}/cancel", "post"): (
        {"description": "The video, cancelled or being cancelled.", "content": _json("Video")},
        (404,),
    ),
    ("/v1/videos/{video_id}/content", "get"): (
        {
            "description": "The file of `variant`.",
            "content": {
                "video/mp4": {"schema": _BINARY},
                "image/png": {"schema": _BINARY},
                "application/json": {"schema": {"type": "object"}},
            },
        },
        (404,),
    ),
    ("/v1/videos/{video_id}/events", "get"): (
        {
            "description": "Server-Sent Events until the terminal status.",
            "content": {"text/event-stream": {"schema": SSE_EVENT}},
        },
        (404,),
    ),
    ("/v1/videos/{video_id}/prompt", "post"): (
        {"description": "The switch, requested.", "content": _json("PromptSwitch")},
        (404, 409, 413),
    ),
    ("/v1/videos/{video_id}/stream", "get"): (
        {
            "description": "MJPEG: one JPEG part per frame as it is made.",
            "content": {"multipart/x-mixed-replace": {"schema": _BINARY}},
        },
        (404, 409),
    ),
}
_BODIES = {"/v1/videos": "CreateParams", "/v1/videos/extensions": "ExtendParams",
           "/v1/videos/{video_id}/prompt": "PromptParams"}  # fmt: skip
_FORM_JSON_FIELDS = ("shots", "drift_correction", "health_checks")  # sent as JSON text in a multipart form


def _model_schemas(max_text: int) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in (CreateParams, ExtendParams, PromptParams):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    for schema in schemas.values():
        _limit_text(schema, max_text)
    return schemas


def _limit_text(node: Any, max_text: int) -> None:
    """`maxLength` on every string (`api.limits.check_values` bounds every text value)."""
    if isinstance(node, dict):
        if node.get("type") == "string" and "format" not in node:
            node["maxLength"] = max_text
        for child in node.values():
            _limit_text(child, max_text)
    elif isinstance(node, list):
        for child in node:
            _limit_text(child, max_text)


def _create_form(create: dict[str, Any]) -> dict[str, Any]:
    """The multipart form of `POST /v1/videos`: the JSON body's fields, JSON-valued ones as text,
    plus the `input_reference` image (PNG, JPEG or WebP)."""
    properties = {name: ({"type": "string", "description": "JSON text"} if name in _FORM_JSON_FIELDS else prop)
                  for name, prop in create["properties"].items()}  # fmt: skip
    properties["input_reference"] = dict(_BINARY)
    return {"type": "object", "properties": properties, "additionalProperties": False}


def build_openapi(app: FastAPI, max_text: int) -> dict[str, Any]:
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas.update(_model_schemas(max_text))
    schemas.update({"ErrorResponse": ERROR_RESPONSE, "Video": VIDEO, "VideoList": VIDEO_LIST,
                    "VideoDeleted": VIDEO_DELETED, "PromptSwitch": PROMPT_SWITCH})  # fmt: skip
    doc["components"]["securitySchemes"] = {
        "bearerKey": {"type": "http", "scheme": "bearer", "description": "An API key: `Authorization: Bearer KEY`."},
        "queryKey": {"type": "apiKey", "in": "query", "name": "api_key"},
    }
    for path, item in doc["paths"].items():
        for method, op in item.items():
            _describe(path, method, op, schemas)
    return doc


def _describe(path: str, method: str, op: dict[str, Any], schemas: dict[str, Any]) -> None:
    responses = op["responses"]
    responses.pop("422", None)
    if path == "/readyz":
        responses["503"] = {"description": "Not ready: `checks` names what failed.",
                            "content": {"application/json": {"schema": {"type": "object", "required": ["error"]}}}}  # fmt: skip
    if (path, method) not in _OPERATIONS:
        return
    success, extra = _OPERATIONS[(path, method)]
    responses["200"] = success
    for status in sorted({400, 401, 503, *extra}):
        responses[str(status)] = {"description": _ERRORS[status], "content": _json("ErrorResponse")}
        if status == 429:
            responses["429"]["headers"] = {
                "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}}
            }
    op["security"] = [{"bearerKey": []}, {"queryKey": []}] if path.endswith("/stream") else [{"bearerKey": []}]
    if method == "post" and path in _BODIES:
        name = _BODIES[path]
        content: dict[str, Any] = _json(name)
        if name == "CreateParams":
            content["multipart/form-data"] = {"schema": _create_form(schemas[name])}
        op["requestBody"] = {"required": True, "content": content}


def install_openapi(app: FastAPI, max_text: int) -> None:
    """Serve `build_openapi`'s document (built once, on the first request for it)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, max_text)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

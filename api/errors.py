"""OpenAI-style error bodies, `{"error": {"message", "type", "param", "code"}}`, for every error the
API answers, including FastAPI's own request validation and unknown routes."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
          404: "invalid_request_error", 405: "invalid_request_error", 409: "invalid_request_error",
          413: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
          503: "server_error"}  # fmt: skip


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or _TYPES.get(status, "server_error")


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def not_found(job_id: str) -> APIError:
    return APIError(404, f"No video found with id '{job_id}'.", param="video_id", code="not_found")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(error_body(exc.message, exc.type, exc.param, exc.code), exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        loc = [str(x) for x in first.get("loc", ()) if x not in ("body", "query", "path", "header")]
        param = ".".join(loc) or None
        message = f"Invalid value for '{param}': {first.get('msg')}" if param else str(first.get("msg"))
        return JSONResponse(error_body(message, "invalid_request_error", param, "invalid_value"), 400)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:  # logged with its traceback by the server
        return JSONResponse(error_body("The server had an error while processing your request.", "server_error",
                                       None, "internal_error"), 500)  # fmt: skip

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette's own errors: unknown route, wrong method (its `Allow` header is kept), a
        # malformed multipart body.
        code = {400: "invalid_value", 404: "not_found", 405: "method_not_allowed",
                413: "payload_too_large"}.get(exc.status_code)  # fmt: skip
        headers, message = dict(exc.headers or {}), str(exc.detail)
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request)
            message = f"{request.method} is not allowed on {request.url.path}; allowed: {headers['Allow']}."
        return JSONResponse(error_body(message, _TYPES.get(exc.status_code, "server_error"), None, code),
                            exc.status_code, headers=headers or None)  # fmt: skip


def allowed_methods(request: Request) -> str:
    """Every method some route takes at this path: FastAPI registers one route per method, so
    Starlette's own `Allow` names only the first route it found."""
    allowed = []
    for method in ("DELETE", "GET", "PATCH", "POST", "PUT"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed)

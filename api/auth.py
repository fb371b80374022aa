"""Bearer API keys -> tenants. Keys are looked up by their SHA-256 (settings keep only hashes), and
every route takes the tenant through the `CurrentTenant` dependency.

The live-stream endpoints a browser opens itself (`<img src=".../stream">`, `new WebSocket(...)`)
cannot send headers, so they also take the key as `?api_key=` (`StreamTenant`, `tenant_for`).
The server does not log query strings (uvicorn's access log is off); proxies and browser history
may, so a header is preferred wherever the client can send one.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from .errors import APIError
from .settings import hash_key

LOCAL_TENANT = "local"  # the only tenant of a `--no-auth` server


def tenant_for(conn: HTTPConnection, *, query_key: bool = False) -> str:
    """The tenant of a request or WebSocket; `query_key`: `?api_key=` is accepted too."""
    settings = conn.app.state.settings
    if settings.no_auth:
        return LOCAL_TENANT
    header = conn.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if not header and query_key and conn.query_params.get("api_key"):
        scheme, key = "bearer", conn.query_params["api_key"]
    if scheme.lower() != "bearer" or not key.strip():
        raise APIError(401, "You didn't provide an API key. Provide it as 'Authorization: Bearer YOUR_KEY'"
                       + (" or '?api_key=YOUR_KEY'." if query_key else "."), code="missing_api_key")  # fmt: skip
    tenant = settings.tenant_by_key_hash.get(hash_key(key.strip()))
    if tenant is None:
        raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
    return tenant


def current_tenant(request: Request) -> str:
    return tenant_for(request)


def stream_tenant(request: Request) -> str:
    return tenant_for(request, query_key=True)


CurrentTenant = Annotated[str, Depends(current_tenant)]
StreamTenant = Annotated[str, Depends(stream_tenant)]  # the MJPEG stream: header or ?api_key=

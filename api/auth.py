"""Bearer API keys -> tenants. Keys are looked up by their SHA-256 (settings keep only hashes), and
every route takes the tenant through the `CurrentTenant` dependency."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.errors import APIError
from api.settings import hash_key

LOCAL_TENANT = "local"  # the only tenant of a `--no-auth` server


def current_tenant(request: Request) -> str:
    settings = request.app.state.settings
    if settings.no_auth:
        return LOCAL_TENANT
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise APIError(401, "You didn't provide an API key. Provide it as 'Authorization: Bearer YOUR_KEY'.",
                       code="missing_api_key")  # fmt: skip
    tenant = settings.tenant_by_key_hash.get(hash_key(key.strip()))
    if tenant is None:
        raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
    return tenant


CurrentTenant = Annotated[str, Depends(current_tenant)]

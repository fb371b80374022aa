"""The web console: a page at `/` (same origin as the API) to sign in with an API key, make
videos, extensions and live streams, and watch them render; and the API's own `/docs` and
`/redoc`, with Swagger UI's and ReDoc's assets served from this server (the `fastapi-offline`
package ships them), so neither page needs a CDN.

    GET /                       the console (static/index.html; ES modules and CSS, no build step)
    GET /console/...            its assets (package data: static/)
    GET /v1/console/config      no key needed: does the server want one, and its request limits
    GET /v1/console/session     the caller's tenant and the models it may use, with their defaults
    GET /docs, /redoc           Swagger UI / ReDoc over /openapi.json, assets from /docs-assets/

The page calls the public API with `Authorization: Bearer` (the key lives in the browser's session
storage); what a browser cannot send a header with uses what the API accepts for it: `fetch` reads
`/content` as a blob and the SSE `/events` as a stream, and the live view's WebSocket takes
`?api_key=` (`api.auth`). None of these routes is in the OpenAPI document: they serve the page.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

from videogen.config.presets import Preset, default_preset_name
from videogen.config.spec import API_DEFAULT_SECONDS, DEFAULT_STREAM_MODEL
from videogen.stitch.config import ANCHORS, MODES

from ..auth import CurrentTenant
from ..errors import APIError

STATIC = Path(__file__).resolve().parent / "static"
ASSETS_URL = "/console"
DOCS_ASSETS_URL = "/docs-assets"

# The page's scripts and styles come from this origin only; the videos and images it shows are
# `blob:` URLs it made from what it fetched with the key. `https:` in connect-src lets that fetch
# follow `/content`'s redirect to a presigned URL when outputs live in a bucket.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; media-src 'self' blob:; "
    "connect-src 'self' ws: wss: https:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)

router = APIRouter(include_in_schema=False)


class ConsoleFiles(StaticFiles):
    """The page's assets, revalidated on every load (`no-cache` + ETag: a 304 when unchanged), so a
    browser never runs yesterday's script against an upgraded server."""

    def file_response(self, *args: Any, **kwargs: Any):
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


@router.api_route("/", methods=["GET", "HEAD"])
def console_page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html",
                        headers={"Cache-Control": "no-cache", "Content-Security-Policy": CONTENT_SECURITY_POLICY,
                                 "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})  # fmt: skip


@router.get("/v1/console/config")
def console_config(request: Request) -> dict[str, Any]:
    """What the page needs before it asks for a key: whether it must, and the request limits."""
    settings = request.app.state.settings
    service = request.app.state.service
    return {
        "object": "console.config",
        "auth_required": not settings.no_auth,
        "mode": service.queue.mode,
        "max_prompt_chars": settings.max_prompt_chars,
        "max_upload_bytes": settings.max_upload_bytes,
        "max_seconds": settings.max_seconds,
    }


@router.get("/v1/console/session")
def console_session(request: Request, tenant: CurrentTenant) -> dict[str, Any]:
    """The caller's tenant (this also checks the key) and the server's models with the defaults a
    request that leaves a field out gets (the form shows them as placeholders)."""
    catalog = request.app.state.service.catalog
    models = []
    for name in catalog.names():
        try:
            entry = catalog.resolve(name)
        except APIError:  # misconfigured or without weights: a create would be refused
            continue
        models.append(model_card(name, entry.preset))
    names = [m["id"] for m in models]
    default = catalog.settings.default_model or _default_preset()
    causal = [m["id"] for m in models if m["causal"]]
    return {
        "object": "console.session",
        "tenant": tenant,
        "models": models,
        "default_model": default if default in names else (names[0] if names else None),
        "default_stream_model": DEFAULT_STREAM_MODEL if DEFAULT_STREAM_MODEL in causal else next(iter(causal), None),
        "default_seconds": API_DEFAULT_SECONDS,
        "drift_modes": list(MODES),
        "drift_anchors": list(ANCHORS),
    }


def model_card(name: str, preset: Preset) -> dict[str, Any]:
    limits = preset.limits
    return {
        "id": name,
        "description": preset.description,
        "causal": preset.causal,
        "size": f"{preset.size[0]}x{preset.size[1]}",
        "sizes": [f"{w}x{h}" for w, h in limits.sizes],  # []: any size up to max_pixels
        "max_pixels": limits.max_pixels,
        "fps": preset.fps,
        "steps": preset.steps,
        "guidance_scale": preset.guidance,
        "segment_seconds": preset.segment_seconds,
    }


def _default_preset() -> str | None:
    try:
        return default_preset_name()
    except Exception:  # no readable preset file: the catalog lists none either
        return None


def _docs_assets() -> Path | None:
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "static"
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def install_console(app: FastAPI) -> None:
    """Mount the page, its assets and the offline `/docs` and `/redoc` (create the app with
    `docs_url=None, redoc_url=None`: these replace FastAPI's CDN-loading pages)."""
    app.include_router(router)
    app.mount(ASSETS_URL, ConsoleFiles(directory=STATIC), name="console")
    assets = _docs_assets()
    if assets is not None:
        app.mount(DOCS_ASSETS_URL, StaticFiles(directory=assets), name="docs-assets")

    def need_assets() -> None:
        if assets is None:
            raise APIError(503, "The API docs need the `fastapi-offline` package (the [server] extra) for their "
                           "scripts: pip install 'videogen[server]'.", code="docs_unavailable")  # fmt: skip

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        need_assets()
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} API",
                                   swagger_js_url=f"{DOCS_ASSETS_URL}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS_URL}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_ASSETS_URL}/favicon.png")  # fmt: skip

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        need_assets()
        return get_redoc_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} API",
                              redoc_js_url=f"{DOCS_ASSETS_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{DOCS_ASSETS_URL}/favicon.png", with_google_fonts=False)  # fmt: skip

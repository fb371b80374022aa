"""`videogen serve` and `videogen worker`, registered into videogen's CLI through the
`videogen.commands` entry point (pyproject.toml) so that the library never imports the service.

    videogen serve [--host H] [--port P] [--data-dir DIR] [--no-auth]   # API + in-process worker
    REDIS_URL=redis://... videogen serve                               # API only; jobs go to Celery
    REDIS_URL=redis://... videogen worker --gpu N                      # one solo Celery worker on GPU N
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from videogen.cli.options import EXIT_BAD_INPUT


def add_service_commands(sub) -> None:
    s = sub.add_parser("serve", help="run the /v1/videos API (and, without REDIS_URL, an in-process worker)",
                       description="Run the OpenAI-compatible /v1/videos API. Without REDIS_URL an in-process "
                                   "worker renders the jobs (embedded mode); with it, jobs go to Celery workers.")  # fmt: skip
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--data-dir", help="outputs, checkpoints and the SQLite job store (env VIDEOGEN_DATA_DIR)")
    s.add_argument("--no-auth", action="store_true", help="no API keys; one tenant. Only on a loopback host")
    s.add_argument("--log-level", default="info")
    s.set_defaults(func=cmd_serve)

    w = sub.add_parser("worker", help="run one Celery worker (solo pool) for a fleet; needs REDIS_URL",
                       description="Run one Celery worker process with the solo pool, pinned to one GPU, "
                                   "loading each model once.")  # fmt: skip
    w.add_argument("--gpu", type=int, help="GPU index: sets CUDA_VISIBLE_DEVICES=N (default: leave as is)")
    w.add_argument("--name", help="Celery node name (default videogen-gpuN@host)")
    w.add_argument("--log-level", default="info")
    w.set_defaults(func=cmd_worker)


def _error(message: str) -> int:
    print(f"videogen: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _missing_server_extra(command: str, modules: tuple[str, ...]) -> str | None:
    """The one-line error for a library-only install (`pip install videogen` without `[server]`)."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (
        f"`videogen {command}` needs the server extra: pip install 'videogen[server]' (missing: {', '.join(missing)})"
    )


SERVE_MODULES = ("fastapi", "uvicorn", "pydantic_settings", "sqlalchemy", "multipart")
WORKER_MODULES = ("celery", "redis", "pydantic_settings", "sqlalchemy")


def cmd_serve(args: argparse.Namespace) -> int:
    if (message := _missing_server_extra("serve", SERVE_MODULES)) is not None:
        return _error(message)
    from videogen.api.settings import ServiceSettings, is_loopback

    overrides = {}
    if args.data_dir:
        overrides["data_dir"] = args.data_dir
    if args.no_auth:
        overrides["no_auth"] = True
    settings = ServiceSettings(**overrides)
    if settings.no_auth and not is_loopback(args.host):
        return _error(
            f"--no-auth is allowed only on a loopback host (127.0.0.1, ::1, localhost), not --host {args.host}"
        )
    try:
        keys = settings.tenant_by_key_hash
        settings.model_folders  # noqa: B018 - parse now, fail now
    except ValueError as exc:
        return _error(str(exc))
    if not settings.no_auth and not keys:
        return _error("no API keys: set VIDEOGEN_API_KEYS='key:tenant,...' (or use --no-auth on a loopback host)")

    import uvicorn

    from videogen.api.app import build_service, create_app

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    service = build_service(settings)
    workers = []
    if not settings.fleet:
        from .embedded import EmbeddedWorkerProcess, EmbeddedWorkerThread

        host = EmbeddedWorkerProcess if settings.embedded_worker == "process" else EmbeddedWorkerThread
        workers.append(host(service))
    app = create_app(settings, service=service, workers=workers)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    if (message := _missing_server_extra("worker", WORKER_MODULES)) is not None:
        return _error(message)
    if args.gpu is not None:
        if args.gpu < 0:
            return _error(f"--gpu={args.gpu}: must be a GPU index >= 0")
        os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)  # before anything imports torch
    if not os.environ.get("REDIS_URL") and not os.environ.get("VIDEOGEN_REDIS_URL"):
        return _error("REDIS_URL is not set: a worker takes its jobs from Redis (or use `videogen serve` alone)")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .celery_app import app

    name = args.name or f"videogen-gpu{args.gpu if args.gpu is not None else 'any'}@%h"
    app.worker_main(["worker", "--pool=solo", "--concurrency=1", f"--loglevel={args.log_level.upper()}",
                     f"--hostname={name}"])  # fmt: skip
    return 0

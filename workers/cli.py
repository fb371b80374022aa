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
    s.add_argument("--log-format", choices=("text", "json"),
                   help="text (default), or json: one object per line for log shippers (env VIDEOGEN_LOG_FORMAT)")  # fmt: skip
    add_memory_arguments(s)
    s.set_defaults(func=cmd_serve)

    w = sub.add_parser("worker", help="run one Celery worker (solo pool) for a fleet; needs REDIS_URL",
                       description="Run one Celery worker process with the solo pool, pinned to one GPU, "
                                   "loading each model once.")  # fmt: skip
    w.add_argument("--gpu", type=int, help="GPU index: sets CUDA_VISIBLE_DEVICES=N (default: leave as is)")
    w.add_argument("--name", help="Celery node name (default videogen-gpuN@host)")
    w.add_argument("--model", action="append", dest="models", metavar="NAME",
                   help="serve only this model (repeatable; a preset or VIDEOGEN_MODELS name). Default: any "
                        "model. Jobs are routed by model (docs/service.md, Routing)")  # fmt: skip
    w.add_argument("--model-cache-gb", type=float,
                   help="GiB of model weights the worker keeps loaded, least recently used evicted (default: "
                        "one model on CUDA, unbounded on CPU; env VIDEOGEN_MODEL_CACHE_GB)")  # fmt: skip
    w.add_argument("--log-level", default="info")
    w.add_argument("--metrics-port", type=int,
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (env VIDEOGEN_WORKER_METRICS_PORT)")  # fmt: skip
    w.add_argument("--metrics-host", help="address the metrics port listens on (default 0.0.0.0)")
    w.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text, or json: one object per line for log shippers")  # fmt: skip
    add_memory_arguments(w)
    w.set_defaults(func=cmd_worker)


def add_memory_arguments(p) -> None:
    """The worker's memory settings (every job it runs; `videogen.models.memory`)."""
    p.add_argument("--offload", metavar="MODE",
                   help="none | model | group: keep model components on the CPU and move each (model) or each "
                        "transformer block (group) to the GPU while used, e.g. Wan 14B on 24 GB (default: each "
                        "preset's; env VIDEOGEN_OFFLOAD)")  # fmt: skip
    p.add_argument("--vae-tiling", metavar="MODE",
                   help="auto | on | off: tiled VAE decode; auto from 720p (default: each preset's; env VIDEOGEN_VAE_TILING)")  # fmt: skip


def apply_memory_arguments(args) -> str | None:
    """Export --offload/--vae-tiling to the loader (the environment reaches an embedded worker's child
    process too); the one-line error for an unknown mode."""
    from videogen.config.presets import OFFLOAD_MODES, VAE_TILING_MODES

    for option, value, modes, env in (("--offload", args.offload, OFFLOAD_MODES, "VIDEOGEN_OFFLOAD"),
                                      ("--vae-tiling", args.vae_tiling, VAE_TILING_MODES, "VIDEOGEN_VAE_TILING")):  # fmt: skip
        if value is None:
            continue
        if value not in modes:
            return f"{option}={value}: must be one of {', '.join(modes)}"
        os.environ[env] = value
    return None


def _unknown_models(models: list[str]) -> str | None:
    """The one-line error for a `--model` this server's catalog (presets, VIDEOGEN_MODELS) lacks."""
    from videogen.api.catalog import ModelCatalog
    from videogen.api.settings import ServiceSettings

    try:
        names = ModelCatalog(ServiceSettings()).names()
    except ValueError as exc:  # a bad VIDEOGEN_MODELS
        return str(exc)
    for name in models:
        if name not in names or "," in name:
            return f"--model={name}: not a model of this server (available: {', '.join(names)})"
    return None


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


GRACEFUL_SHUTDOWN_SECONDS = 3  # open requests (an SSE stream never ends by itself) get this long at exit

SERVE_MODULES = ("fastapi", "uvicorn", "pydantic_settings", "sqlalchemy", "multipart")
WORKER_MODULES = ("celery", "redis", "pydantic_settings", "sqlalchemy")


def cmd_serve(args: argparse.Namespace) -> int:
    if (message := _missing_server_extra("serve", SERVE_MODULES)) is not None:
        return _error(message)
    if (message := apply_memory_arguments(args)) is not None:
        return _error(message)
    from videogen.api.settings import ServiceSettings, is_loopback

    overrides = {}
    if args.data_dir:
        overrides["data_dir"] = args.data_dir
    if args.no_auth:
        overrides["no_auth"] = True
    if args.log_format:
        overrides["log_format"] = args.log_format
    settings = ServiceSettings(**overrides)
    if settings.no_auth and not is_loopback(args.host):
        return _error(
            f"--no-auth is allowed only on a loopback host (127.0.0.1, ::1, localhost), not --host {args.host}"
        )
    try:
        keys = settings.tenant_by_key_hash
        settings.model_folders  # noqa: B018 - parse now, fail now
        settings.tenant_weight_table  # noqa: B018
        from videogen.api.webhooks import WebhookConfig

        WebhookConfig.from_settings(settings)
    except ValueError as exc:
        return _error(str(exc))
    if not settings.no_auth and not keys:
        return _error("no API keys: set VIDEOGEN_API_KEYS='key:tenant,...' (or use --no-auth on a loopback host)")

    import uvicorn

    from videogen.api.app import create_app
    from videogen.api.logs import setup_logging

    setup_logging(args.log_level, settings.log_format)  # the embedded child sets up the same from settings
    service = _start_service(settings)
    if isinstance(service, str):
        return _error(service)
    workers = []
    if not settings.fleet:
        from .embedded import EmbeddedWorkerProcess, EmbeddedWorkerThread

        host = EmbeddedWorkerProcess if settings.embedded_worker == "process" else EmbeddedWorkerThread
        workers.append(host(service))
    app = create_app(settings, service=service, workers=workers)
    base = base_url(args.host, args.port)
    urls = f"videogen console: {base}/  (API: {base}/v1/videos, docs: {base}/docs)"
    if settings.log_format == "json":  # every line a log shipper reads must be JSON
        logging.getLogger("videogen.api").info(urls)
    else:
        print(urls, flush=True)
    # SIGTERM/SIGINT: stop within seconds even with event streams open (their clients reconnect).
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS, log_config=None)  # fmt: skip
    return 0


def base_url(host: str, port: int) -> str:
    """The URL a browser on this machine opens for `--host`/`--port` (a wildcard host: localhost)."""
    if host in ("0.0.0.0", "::", ""):
        host = "localhost"
    elif ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _start_service(settings):
    """`build_service(settings)`, or the one line that says why it cannot start (the traceback goes
    to the debug log): a data dir that cannot be made or written, a bad DATABASE_URL, a database
    that does not answer, a VIDEOGEN_STORAGE_URL bucket that cannot be used. A disk below `min_free_bytes` only warns: `/readyz` says not ready until
    space is freed."""

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from videogen.api.app import build_service
    from videogen.api.s3storage import StorageConfigError

    log = logging.getLogger("videogen.api")
    data = settings.data_path
    try:
        url = make_url(settings.db_url).render_as_string(hide_password=True)
    except Exception:  # unparseable: show none of it (it may hold a password)
        url = "DATABASE_URL"
    try:
        service = build_service(settings)
    except OSError as exc:
        log.debug("start-up failed", exc_info=True)
        return f"the data dir {data} cannot be used: {exc.strerror or type(exc).__name__}"
    except (SQLAlchemyError, ImportError) as exc:
        log.debug("start-up failed", exc_info=True)
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        if settings.database_url:
            reason = reason.replace(settings.database_url, url)
        return f"the job store {url} cannot be opened: {reason}"
    except StorageConfigError as exc:
        return str(exc)
    if (problem := service.storage.remote_problem()) is not None:  # a bucket that cannot be used: say so now
        return f"the object storage {settings.storage_url} cannot be used: {problem}"
    problem = service.storage.problem()
    if problem is not None and problem.startswith("not writable"):
        return f"the data dir {data} is {problem}"
    if problem is not None:
        log.warning("the data dir %s: %s; not ready until space is freed (VIDEOGEN_MIN_FREE_BYTES)", data, problem)
    return service


def cmd_worker(args: argparse.Namespace) -> int:
    if (message := _missing_server_extra("worker", WORKER_MODULES)) is not None:
        return _error(message)
    if (message := apply_memory_arguments(args)) is not None:
        return _error(message)
    if args.gpu is not None:
        if args.gpu < 0:
            return _error(f"--gpu={args.gpu}: must be a GPU index >= 0")
        os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)  # before anything imports torch
    if not os.environ.get("REDIS_URL") and not os.environ.get("VIDEOGEN_REDIS_URL"):
        return _error("REDIS_URL is not set: a worker takes its jobs from Redis (or use `videogen serve` alone)")
    if args.metrics_port is not None:
        if not 0 < args.metrics_port < 65536:
            return _error(f"--metrics-port={args.metrics_port}: must be a TCP port (1..65535)")
        os.environ["VIDEOGEN_WORKER_METRICS_PORT"] = str(args.metrics_port)  # read by workers.celery_app
    if args.metrics_host:
        os.environ["VIDEOGEN_WORKER_METRICS_HOST"] = args.metrics_host
    if args.model_cache_gb is not None:
        if not args.model_cache_gb > 0:
            return _error(f"--model-cache-gb={args.model_cache_gb:g}: must be > 0 (GiB)")
        os.environ["VIDEOGEN_MODEL_CACHE_GB"] = str(args.model_cache_gb)
    if args.models:
        if (problem := _unknown_models(args.models)) is not None:
            return _error(problem)
        os.environ["VIDEOGEN_WORKER_MODELS"] = ",".join(args.models)  # read by workers.celery_app
    from videogen.api.logs import setup_logging

    setup_logging(args.log_level, args.log_format)
    from .celery_app import app

    app.conf.worker_hijack_root_logger = False  # keep setup_logging's handler (and its format)

    name = args.name or f"videogen-gpu{args.gpu if args.gpu is not None else 'any'}@%h"
    app.worker_main(["worker", "--pool=solo", "--concurrency=1", f"--loglevel={args.log_level.upper()}",
                     f"--hostname={name}"])  # fmt: skip
    return 0

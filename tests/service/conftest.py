"""Fixtures of the job-service tests: real processes on 127.0.0.1.

* `tiny_model`: a tiny real Wan diffusers folder (tests/tiny_wan.py), served under the preset
  name `tiny` from a test `models.yaml` (32x32 at 8 fps, 2 steps, short segments), so a render
  takes a fraction of a second on a CPU.
* `serve(...)`: `videogen serve` in a subprocess on a free port (embedded mode, or fleet mode when
  given a Redis URL), waited on until /healthz answers.
* `redis_url`: the Redis on 127.0.0.1:6379 if it answers, else a `redis-server` started on a free
  port, else the fleet tests are skipped with the reason.
* `celery_worker(...)`: `celery -A workers.celery_app worker --pool=solo` subprocesses.
* `postgres_url`: a throwaway schema in the `test` database on 127.0.0.1:5432, else skipped.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from service_helpers import presets_yaml, tiny_preset

REPO = Path(__file__).resolve().parents[2]
KEYS = {"key-alpha": "alpha", "key-beta": "beta"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny-wan"
    # In a subprocess: the test process itself stays free of torch (so does the API).
    tests = str(Path(__file__).resolve().parent.parent)  # where tiny_wan.py lies
    code = (
        f"import sys; sys.path.insert(0, {tests!r}); from tiny_wan import save_tiny_wan; save_tiny_wan({str(path)!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=_env({}))
    return path


@pytest.fixture(scope="session")
def config_dir(tmp_path_factory, tiny_model) -> Path:
    d = tmp_path_factory.mktemp("config")
    (d / "models.yaml").write_text(presets_yaml(tiny_preset(tiny_model)))
    return d


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_") and k not in ("REDIS_URL", "DATABASE_URL")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def service_env(config_dir) -> dict[str, str]:
    """Environment shared by servers and workers: the test presets, fast leases and reaper, CPU."""
    return {
        "VIDEOGEN_CONFIG_DIR": str(config_dir),
        "VIDEOGEN_API_KEYS": ",".join(f"{k}:{t}" for k, t in KEYS.items()),
        "VIDEOGEN_DEVICE": "cpu",
        "VIDEOGEN_LEASE_SECONDS": "2",
        "VIDEOGEN_REAPER_INTERVAL_SECONDS": "0.5",
        "VIDEOGEN_WORKER_POLL_SECONDS": "0.2",
        "VIDEOGEN_MAX_UPLOAD_BYTES": "65536",
    }


class Proc:
    """A subprocess whose output goes to a log file (shown when a test fails)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._fh = open(log, "wb")
        self.p = subprocess.Popen(args, env=env, cwd=REPO, stdout=self._fh, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip

    def kill9(self) -> None:
        os.killpg(self.p.pid, signal.SIGKILL)  # the whole group: celery's solo worker has no children
        self.p.wait(10)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()
        self._fh.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Server(Proc):
    def __init__(self, env: dict[str, str], data_dir: Path, log: Path, extra_args: list[str] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        super().__init__([sys.executable, "-m", "videogen.cli", "serve", "--port", str(self.port),
                          "--data-dir", str(data_dir), *extra_args], env, log)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError(f"server exited {self.p.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not start:\n{self.output()}")

    def client(self, key: str | None = "key-alpha") -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture(scope="session")
def make_server(service_env):
    """make_server(data_dir, log, extra_env=None, args=()) -> a started Server (caller stops it)."""

    def make(data_dir: Path, log: Path, extra_env: dict[str, str] | None = None, args=()) -> Server:
        return Server(_env({**service_env, **(extra_env or {})}), data_dir, log, list(args))

    return make


@pytest.fixture
def serve(tmp_path, service_env, request):
    """serve(extra_env=None, data_dir=None, args=()) -> a running `videogen serve`."""
    started: list[Proc] = []

    def start(extra_env: dict[str, str] | None = None, data_dir: Path | None = None, args=()) -> Server:
        data = data_dir or tmp_path / "data"
        s = Server(_env({**service_env, **(extra_env or {})}), data, tmp_path / f"server{len(started)}.log", list(args))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        for s in started:
            print(f"--- {s.log.name}\n{s.output()[-4000:]}")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    import redis

    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=1).ping()
        yield "redis://127.0.0.1:6379/0"
        return
    except redis.RedisError:
        pass
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("no Redis on 127.0.0.1:6379 and no redis-server binary to start one")
    port = free_port()
    d = tmp_path_factory.mktemp("redis")
    p = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(d)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.RedisError:
            time.sleep(0.05)
    else:
        p.kill()
        pytest.skip("redis-server did not start")
    yield f"redis://127.0.0.1:{port}/0"
    p.terminate()
    p.wait(10)


@pytest.fixture
def fleet_env(redis_url, tmp_path) -> dict[str, str]:
    """A fleet of its own: a queue name no other test run shares, a SQLite store both sides see."""
    return {
        "REDIS_URL": redis_url,
        "VIDEOGEN_QUEUE": f"videogen-test-{uuid.uuid4().hex[:8]}",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'data' / 'jobs.db'}",
        "VIDEOGEN_DATA_DIR": str(tmp_path / "data"),
    }


@pytest.fixture
def celery_worker(service_env, tmp_path):
    """celery_worker(env) -> a started worker process; waits until it is ready to consume."""
    started: list[Proc] = []

    def start(fleet_env: dict[str, str]) -> Proc:
        log = tmp_path / f"worker{len(started)}.log"
        args = [sys.executable, "-m", "celery", "-A", "videogen.workers.celery_app", "worker", "--pool=solo",
                "--concurrency=1", "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
                f"--hostname=test{len(started)}-{uuid.uuid4().hex[:6]}@%h"]  # fmt: skip
        w = Proc(args, _env({**service_env, **fleet_env}), log)
        started.append(w)
        deadline = time.monotonic() + 60
        while "ready." not in w.output():
            if w.p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"celery worker did not start:\n{w.output()}")
            time.sleep(0.1)
        return w

    yield start
    for w in started:
        w.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
        return
    try:
        import psycopg  # the `[postgres]` extra's driver, which SQLAlchemy 2.1 uses for postgresql://

        conn = psycopg.connect(host="127.0.0.1", port=5432, user="postgres", dbname="test", connect_timeout=2)
    except Exception as exc:  # no server, no database, no trust auth: all mean "not here"
        pytest.skip(f"PostgreSQL on 127.0.0.1:5432 (db test, user postgres) unreachable: {exc}")
    schema = f"vg_{uuid.uuid4().hex[:10]}"
    conn.autocommit = True
    conn.execute(f"CREATE SCHEMA {schema}")
    # The documented URL form, no driver suffix: it must work with what `[postgres]` installs.
    yield f"postgresql://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    conn.execute(f"DROP SCHEMA {schema} CASCADE")
    conn.close()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def alpha(server):
    """A client with tenant alpha's key on the module's `server` fixture."""
    with server.client("key-alpha") as c:
        yield c


@pytest.fixture
def beta(server):
    with server.client("key-beta") as c:
        yield c

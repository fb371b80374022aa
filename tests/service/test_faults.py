"""Faults of the fleet's infrastructure (issue 21, defects 5 and 6): a Redis that restarts without
persistence (every message it held is gone), a create while Redis is down, a PostgreSQL store
given by its documented URL, and a worker whose store does not answer.

Each Redis here is a `redis-server` of the test's own on a free port (`--save "" --appendonly no`),
never the shared one on 6379, since the tests stop and restart it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid

import pytest
from conftest import REPO, _env, free_port
from service_helpers import TERMINAL, sse_events, wait_done, wait_for

JOB = {"prompt": "a red circle moving right", "model": "tiny", "seconds": "2", "size": "32x32", "steps": 2}


class RedisServer:
    """A `redis-server` that keeps nothing on disk, on a port that stays the same across restarts."""

    def __init__(self, tmp_path) -> None:
        self.exe = shutil.which("redis-server")
        if self.exe is None:
            pytest.skip("no redis-server binary")
        self.port, self.dir = free_port(), tmp_path
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.p: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        import redis

        self.p = subprocess.Popen([self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", str(self.dir)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.p is not None and self.p.poll() is None:
            self.p.kill()  # like a crash: nothing is saved (nothing would be anyway)
            self.p.wait(10)
        self.p = None


@pytest.fixture
def own_redis(tmp_path):
    d = tmp_path / "redis"
    d.mkdir()
    server = RedisServer(d)
    yield server
    server.stop()


@pytest.fixture
def own_fleet_env(own_redis, tmp_path) -> dict[str, str]:
    return {
        "REDIS_URL": own_redis.url,
        "VIDEOGEN_QUEUE": f"videogen-test-{uuid.uuid4().hex[:8]}",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'data' / 'jobs.db'}",
        "VIDEOGEN_DATA_DIR": str(tmp_path / "data"),
    }


def _runs(client, video_id: str) -> tuple[int, int]:
    """(times started, times finished) from the job's events."""
    events = sse_events(client, video_id)
    starts = sum(1 for k, d in events if k == "status" and d["status"] == "in_progress")
    ends = sum(1 for k, d in events if k == "status" and d["status"] in TERMINAL)
    return starts, ends


def test_jobs_queued_when_redis_restarts_without_persistence_still_complete(
    serve, own_redis, own_fleet_env, celery_worker
):
    server = serve(extra_env=own_fleet_env)
    celery_worker(own_fleet_env)
    with server.client() as c:
        ids = [c.post("/v1/videos", json=JOB).json()["id"] for _ in range(5)]
        wait_for(c, ids[0], lambda v: v["status"] != "queued", timeout=90, interval=0.02)
        own_redis.stop()  # the four waiting wake-ups are gone with it
        own_redis.start()
        for vid in ids:
            assert wait_done(c, vid, timeout=120)["status"] == "completed"
        time.sleep(1.0)  # any duplicate wake-up is consumed by now
        for vid in ids:
            assert _runs(c, vid) == (1, 1), vid


def test_a_create_while_redis_is_down_is_queued_and_runs_once_redis_is_back(
    serve, own_redis, own_fleet_env, celery_worker
):
    server = serve(extra_env=own_fleet_env)
    celery_worker(own_fleet_env)
    with server.client() as c:
        own_redis.stop()
        t0 = time.monotonic()
        r = c.post("/v1/videos", json=JOB)
        assert time.monotonic() - t0 < 10
        assert r.status_code == 200, r.text  # kept in the store: the reconciler dispatches it later
        video = r.json()
        assert video["status"] == "queued"
        ready = c.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["queue"].startswith("error")
        own_redis.start()
        assert wait_done(c, video["id"], timeout=120)["status"] == "completed"
        assert _runs(c, video["id"]) == (1, 1)


# -- defect 6: the documented PostgreSQL URL; a worker whose store does not answer ----------------
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_fleet_on_the_documented_postgresql_url_renders(db_url, serve, redis_url, celery_worker, tmp_path):
    assert db_url.startswith("postgresql://")  # no driver suffix, as the README writes it
    env = {"REDIS_URL": redis_url, "VIDEOGEN_QUEUE": f"videogen-test-{uuid.uuid4().hex[:8]}",
           "DATABASE_URL": db_url, "VIDEOGEN_DATA_DIR": str(tmp_path / "data")}  # fmt: skip
    server = serve(extra_env=env)
    celery_worker(env)
    with server.client() as c:
        assert c.get("/readyz").status_code == 200
        video = c.post("/v1/videos", json=JOB).json()
        assert wait_done(c, video["id"], timeout=90)["status"] == "completed"


@pytest.mark.parametrize(
    "database_url",
    ["postgresql://postgres:s3cret@127.0.0.1:1/test", "sqlite:////nonexistent-dir/sub/jobs.db"],
    ids=["unreachable_postgresql", "unopenable_sqlite"],
)
def test_a_worker_whose_store_does_not_answer_exits_with_one_line_and_never_says_ready(
    database_url, redis_url, service_env, tmp_path
):
    env = {**service_env, "REDIS_URL": redis_url, "VIDEOGEN_QUEUE": f"videogen-test-{uuid.uuid4().hex[:8]}",
           "DATABASE_URL": database_url, "VIDEOGEN_DATA_DIR": str(tmp_path / "data")}  # fmt: skip
    args = [sys.executable, "-m", "celery", "-A", "videogen.workers.celery_app", "worker", "--pool=solo",
            "--concurrency=1", "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
            f"--hostname=bad-{uuid.uuid4().hex[:6]}@%h"]  # fmt: skip
    try:
        r = subprocess.run(args, env=_env(env), cwd=REPO, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the worker kept running without its store:\n{exc.stdout}\n{exc.stderr}") from None
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "ready." not in out and "Traceback" not in out, out
    errors = [line for line in out.splitlines() if "error:" in line.lower() or "ERROR" in line]
    assert len(errors) == 1 and errors[0].startswith("videogen worker: error: the job store"), out
    assert "s3cret" not in out

"""The life of `videogen serve` under faults, with real processes: the embedded worker killed
while idle, SIGTERM/SIGINT from a process manager, a full or unwritable disk, and start-up
errors. No API call may block on the worker; a stopped server leaves its running job resumable;
storage failures reach the user as `storage_error` without server paths."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import REPO, _env
from service_helpers import wait_done, wait_for

FAST = {"model": "tiny", "seconds": "2", "size": "32x32"}  # 16 frames: 2 segments x 2 steps
SLOW = {"model": "tiny", "seconds": "6", "size": "128x128", "steps": 4}  # ~6 segments, a few seconds on a CPU
MEDIUM = {"model": "tiny", "seconds": "4", "size": "64x64", "steps": 4}  # 4 segments, still running after a step


def create(client: httpx.Client, **fields) -> dict:
    r = client.post("/v1/videos", json={"prompt": "a red circle moving right", **fields})
    assert r.status_code == 200, r.text
    return r.json()


def worker_pids(server) -> list[int]:
    """Pids of the embedded worker processes the server has started, in order (from its log)."""
    return [int(p) for p in re.findall(r"embedded worker embedded@\S+:(\d+) started", server.output())]


def wait_ready_worker(server, count: int = 1, timeout: float = 60.0) -> int:
    """Wait until the `count`-th worker process has started and /readyz says ready; its pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = worker_pids(server)
        if len(pids) >= count and httpx.get(server.url + "/readyz", timeout=5).status_code == 200:
            return pids[count - 1]
        time.sleep(0.1)
    raise AssertionError(f"worker {count} not ready:\n{server.output()[-3000:]}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(pid_alive(int(p)) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[3])
    except (OSError, ValueError, IndexError):
        return None


# -- defect 1: the embedded worker dies while idle --------------------------------------------------
def test_killing_the_idle_worker_blocks_no_request_and_the_restarted_worker_runs_the_queue(serve):
    server = serve()
    pid = wait_ready_worker(server)
    time.sleep(0.5)  # idle: waiting for a wake-up
    os.kill(pid, signal.SIGKILL)

    # Readiness says so while the worker is dead or restarting.
    deadline = time.monotonic() + 10
    while (r := httpx.get(server.url + "/readyz", timeout=5)).status_code == 200:
        assert time.monotonic() < deadline, "readyz stayed ready after the worker was killed"
        time.sleep(0.02)
    assert r.status_code == 503 and r.json()["checks"]["worker"] != "ok"

    # No request waits for the worker: creates answer at once, dead worker or not.
    with server.client() as c:
        c.timeout = httpx.Timeout(10)
        ids = [create(c, **FAST)["id"] for _ in range(4)]
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
        assert c.get("/v1/videos?limit=10").status_code == 200
        # The supervisor restarts the worker, which runs everything queued meanwhile.
        new_pid = wait_ready_worker(server, count=2)
        assert new_pid != pid
        for vid in ids:
            assert wait_done(c, vid, timeout=90)["status"] == "completed"
        # And the new worker is woken by a create, not only by its poll.
        assert wait_done(c, create(c, **FAST)["id"], timeout=60)["status"] == "completed"


# -- defect 2: SIGTERM / SIGINT from a process manager ----------------------------------------------
@pytest.mark.parametrize(
    "target, sig, busy",
    [("group", signal.SIGTERM, False), ("group", signal.SIGTERM, True), ("pid", signal.SIGTERM, True),
     ("pid", signal.SIGINT, False)],
)  # fmt: skip
def test_a_signal_stops_serve_and_its_worker_within_seconds_and_a_running_job_resumes(serve, target, sig, busy):
    server = serve()
    wait_ready_worker(server)
    vid = None
    if busy:
        with server.client() as c:
            vid = create(c, **MEDIUM)["id"]
            wait_for(c, vid, lambda v: v["steps_done"] >= 1, timeout=60)
    else:
        time.sleep(0.5)  # idle: waiting for a wake-up
    child = worker_pids(server)[-1]
    sent = time.monotonic()
    if target == "group":  # what systemd, `timeout` and container runtimes do
        os.killpg(server.p.pid, sig)
    else:
        os.kill(server.p.pid, sig)
    try:
        server.p.wait(15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve still running 15 s after {sig.name} to its {target}:\n{server.output()[-3000:]}")
    deadline = time.monotonic() + 5
    while group_alive(server.p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped_s = time.monotonic() - sent
    assert not pid_alive(child) and not group_alive(server.p.pid), "the worker outlived serve"
    assert server.p.returncode in (0, -sig, 128 + sig), server.output()[-3000:]
    assert stopped_s < 10, stopped_s

    if vid is None or target != "group":
        return
    # The job was left resumable: the next server finishes it from its checkpoints.
    again = serve(data_dir=server.data_dir)
    with again.client() as c:
        assert wait_done(c, vid, timeout=120)["status"] == "completed"


# -- defect 8: storage failures ----------------------------------------------------------------------
def test_a_disk_below_the_free_space_floor_is_not_ready_and_refuses_creates_with_503(serve):
    server = serve(extra_env={"VIDEOGEN_MIN_FREE_BYTES": str(1 << 60)})  # an exabyte: no disk has it free
    ready = httpx.get(server.url + "/readyz", timeout=5)
    assert ready.status_code == 503
    assert "free" in ready.json()["checks"]["data_dir"] and str(server.data_dir) not in ready.text
    with server.client() as c:
        r = c.post("/v1/videos", json={"prompt": "a red circle", **FAST})
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "storage_error" and err["type"] == "server_error"
        assert str(server.data_dir) not in r.text
        assert c.get("/v1/videos").json()["data"] == []  # no orphan row


def test_an_unwritable_data_dir_is_not_ready_and_refuses_creates(serve, tmp_path):
    server = serve()
    wait_ready_worker(server)
    # Root ignores permission bits: put a regular file where the data directory was.
    moved = tmp_path / "moved-away"
    server.data_dir.rename(moved)
    server.data_dir.write_text("not a directory")
    try:
        ready = httpx.get(server.url + "/readyz", timeout=5)
        assert ready.status_code == 503 and "not writable" in ready.json()["checks"]["data_dir"], ready.text
        with server.client() as c:
            r = c.post("/v1/videos", json={"prompt": "a red circle", **FAST})
            assert r.status_code == 503 and r.json()["error"]["code"] == "storage_error", r.text
            assert str(server.data_dir) not in r.text
    finally:
        server.data_dir.unlink()
        moved.rename(server.data_dir)
    deadline = time.monotonic() + 10
    while httpx.get(server.url + "/readyz", timeout=5).status_code != 200:  # the check is live, not cached for long
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_job_whose_files_cannot_be_written_fails_with_storage_error_and_no_server_paths(serve):
    server = serve()
    with server.client() as c:
        blocker = create(c, **SLOW)
        victim = create(c, **FAST)
        # Its output folder cannot be made (a file is in the way; permission bits do not stop root).
        (server.data_dir / "outputs" / victim["id"]).write_text("in the way")
        c.post(f"/v1/videos/{blocker['id']}/cancel")
        done = wait_done(c, victim["id"], timeout=90)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "storage_error", done["error"]
    assert "retried" in done["error"]["message"]
    assert str(server.data_dir) not in str(done) and "Errno" not in str(done)
    assert str(server.data_dir / "outputs") in server.output()  # the detail is in the server's log


@pytest.mark.parametrize(
    "problem",
    ["data_dir_under_a_file", "database_url_malformed", "database_url_unknown_driver", "database_unreachable"],
)
def test_start_up_errors_are_one_line_and_exit_2(problem, tmp_path, service_env):
    data_dir = tmp_path / "data"
    env = dict(service_env)
    if problem == "data_dir_under_a_file":
        (tmp_path / "a-file").write_text("x")
        data_dir = tmp_path / "a-file" / "data"
    elif problem == "database_url_malformed":
        env["DATABASE_URL"] = "not a url"
    elif problem == "database_url_unknown_driver":
        env["DATABASE_URL"] = "nosuchdb://user@host/db"
    else:  # nothing listens on port 1
        env["DATABASE_URL"] = "postgresql://postgres:s3cret@127.0.0.1:1/test"
    r = subprocess.run([sys.executable, "-m", "videogen.cli", "serve", "--port", "1", "--data-dir", str(data_dir)],
                       env=_env(env), cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("videogen: error: "), r.stderr
    assert "s3cret" not in r.stderr


FULL_DISK_PROBE = """
import json, sys, torch
from pathlib import Path
from videogen.api.storage import OutputStorage
from videogen.workers.jobs import _failure
storage = OutputStorage(Path(sys.argv[1]))
def full_torch_save(): torch.save({"x": torch.zeros(100_000)}, "/dev/full")
def full_write():
    with open("/dev/full", "wb") as f: f.write(b"x" * 100_000)
def other(): raise ValueError(f"bad thing in {storage.root / 'work'}")
out = {}
for name, fn in [("torch_save", full_torch_save), ("write", full_write), ("other", other)]:
    try:
        fn()
    except Exception as exc:
        out[name] = _failure(exc, storage)
print(json.dumps(out))
"""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device that is always full)")
def test_what_a_full_disk_raises_becomes_storage_error_and_other_errors_hide_the_data_dir(tmp_path):
    """The real exceptions of a full disk (/dev/full answers every write with ENOSPC): torch.save's
    `[enforce fail at inline_container.cc]` and a plain write's OSError."""
    import json

    r = subprocess.run([sys.executable, "-c", FULL_DISK_PROBE, str(tmp_path)], env=_env({}), cwd=REPO,
                       capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["torch_save"][0] == out["write"][0] == "storage_error"
    assert out["torch_save"][1] == out["write"][1] and "retried" in out["write"][1]
    assert out["other"] == ["internal_error", "ValueError: bad thing in <data_dir>/work", None]

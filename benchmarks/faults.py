"""Fault benchmark of the job service: jobs through a fleet while its parts fail (issue 21).

    PYTHONPATH=. python benchmarks/faults.py [--jobs 12] [--seconds 3] [--timeout 600]

Phase 1, fleet: a `redis-server` of its own on a free port (`--save "" --appendonly no`: a
restart loses every message), two Celery workers, `videogen serve` in fleet mode over a SQLite
store, a tiny random Wan model (tests/tiny_wan.py, 32x32 at 8 fps). It submits `--jobs` jobs
from two tenants, then
  1. kills -9 the worker holding a job that has finished a segment but not all (mid-job), and
     starts a replacement;
  2. restarts Redis (kill, start) while jobs are still queued;
and waits until every job has finished or `--timeout` passes.

Phase 2, embedded: `videogen serve` with its in-process worker child; it kills -9 the idle
child, then creates jobs (each create must answer within 10 s) and waits for them.

It prints, per phase, jobs submitted / completed / failed / lost (not finished by the deadline)
/ run twice, and checks every completed video is whole (frames decoded == seconds x fps), then
one JSON line. "Run twice" counts, from the store's job events, a job that finished more than
once, or that was started again while no worker had been declared lost in between (two workers
at once). A job resumed after its worker was killed is counted as `resumed`, not run twice.
Target: 0 lost, 0 run twice, every completed video whole.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
FPS = 8
PRESETS = f"""\
default: tiny
presets:
  tiny:
    kind: diffusers
    path: {{path}}
    size: 32x32
    fps: {FPS}
    steps: 3
    guidance: 1.0
    segment_seconds: 1.625
    overlap_frames: 5
    attention: dense
"""
KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}
TERMINAL = ("completed", "failed", "cancelled")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Proc:
    """A subprocess in its own process group, output to a log file."""

    def __init__(self, args: list[str], env: dict[str, str], logfile: Path) -> None:
        self.logfile = logfile
        self._fh = open(logfile, "wb")
        self.p = subprocess.Popen(args, env=env, cwd=REPO, stdout=self._fh, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip

    def output(self) -> str:
        return self.logfile.read_text(errors="replace")

    def kill9(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait(10)

    def stop(self) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
                self.p.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                self.kill9()
        self._fh.close()


class Redis:
    def __init__(self, tmp: Path) -> None:
        self.exe = shutil.which("redis-server")
        if self.exe is None:
            raise SystemExit("faults.py needs a redis-server binary")
        self.port, self.dir = free_port(), tmp
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.p: subprocess.Popen | None = None

    def start(self) -> None:
        self.p = subprocess.Popen([self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", str(self.dir)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def stop(self) -> None:
        if self.p is not None and self.p.poll() is None:
            self.p.kill()
            self.p.wait(10)


def make_model(tmp: Path) -> Path:
    model = tmp / "tiny-wan"
    tests = str(REPO / "tests")
    code = (
        f"import sys; sys.path.insert(0, {tests!r}); from tiny_wan import save_tiny_wan; save_tiny_wan({str(model)!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    (tmp / "config").mkdir()
    (tmp / "config" / "models.yaml").write_text(PRESETS.format(path=model))
    return tmp / "config"


def base_env(config: Path, data: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_") and k not in ("REDIS_URL", "DATABASE_URL")
    }
    env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", VIDEOGEN_CONFIG_DIR=str(config), VIDEOGEN_DEVICE="cpu",
               VIDEOGEN_DATA_DIR=str(data), DATABASE_URL=f"sqlite:///{data / 'jobs.db'}",
               VIDEOGEN_API_KEYS=",".join(f"{k}:{t}" for k, t in KEYS.items()),
               VIDEOGEN_LEASE_SECONDS="3", VIDEOGEN_REAPER_INTERVAL_SECONDS="0.5",
               VIDEOGEN_WORKER_POLL_SECONDS="0.2")  # fmt: skip
    return env


def start_server(env: dict[str, str], tmp: Path, name: str) -> tuple[Proc, str]:
    port = free_port()
    server = Proc([sys.executable, "-m", "videogen.cli", "serve", "--port", str(port)], env, tmp / f"{name}.log")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.p.poll() is not None:
            raise SystemExit(f"{name} exited:\n{server.output()[-3000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return server, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{name} did not start:\n{server.output()[-3000:]}")


def start_worker(env: dict[str, str], tmp: Path, n: int) -> Proc:
    w = Proc([sys.executable, "-m", "celery", "-A", "videogen.workers.celery_app", "worker", "--pool=solo",
              "--concurrency=1", "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
              f"--hostname=faults{n}@%h"], env, tmp / f"worker{n}.log")  # fmt: skip
    deadline = time.monotonic() + 120
    while "ready." not in w.output():
        if w.p.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"celery worker {n} did not start:\n{w.output()[-3000:]}")
        time.sleep(0.1)
    return w


def submit(clients: list[httpx.Client], n: int, seconds: int) -> list[str]:
    ids = []
    for i in range(n):
        r = clients[i % len(clients)].post("/v1/videos", json={"prompt": f"a red circle moving right {i}",
                                                               "model": "tiny", "seconds": str(seconds),
                                                               "size": "32x32", "seed": i})  # fmt: skip
        r.raise_for_status()
        ids.append(r.json()["id"])
    return ids


def rows(store, ids: list[str]) -> dict:
    return {i: store.get_any(i) for i in ids}


def wait_finished(store, ids: list[str], timeout: float, on_tick=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = rows(store, ids)
        if all(j is not None and j.status in TERMINAL for j in jobs.values()):
            return
        if on_tick is not None:
            on_tick(jobs)
        time.sleep(0.05)


def judge(store, ids: list[str], clients: dict[str, httpx.Client], seconds: int, tmp: Path) -> dict:
    """Counts from the store (statuses, events) and the frame check of every completed video."""
    from sqlalchemy import select

    from videogen.api.tables import JobEvent
    from videogen.io.video import probe

    result = {"submitted": len(ids), "completed": 0, "failed": 0, "cancelled": 0, "lost": 0, "run_twice": 0,
              "resumed": 0, "videos_whole": 0, "videos_broken": 0, "failed_errors": []}  # fmt: skip
    for vid, job in rows(store, ids).items():
        if job is None or job.status not in TERMINAL:
            result["lost"] += 1
            continue
        result[job.status] += 1
        if job.status == "failed":
            result["failed_errors"].append(f"{job.error_code}: {(job.error_message or '')[:120]}")
        with store.session() as s:
            events = list(s.scalars(select(JobEvent).where(JobEvent.job_id == vid, JobEvent.type == "status")
                                    .order_by(JobEvent.id)))  # fmt: skip
        ends = sum(1 for e in events if e.data.get("status") in TERMINAL)
        running, concurrent, resumed = False, False, False
        for e in events:
            status = e.data.get("status")
            if status == "in_progress":
                concurrent |= running  # started again while the first run was not declared lost
                running = True
            elif status == "queued" and e.data.get("reason") == "worker lost":
                running, resumed = False, True
        result["run_twice"] += ends > 1 or concurrent
        result["resumed"] += resumed
        if job.status == "completed":
            path = tmp / f"{vid}.mp4"
            r = clients[job.tenant].get(f"/v1/videos/{vid}/content")
            path.write_bytes(r.content)
            try:
                whole = r.status_code == 200 and probe(path).num_frames == seconds * FPS
            except Exception:
                whole = False
            result["videos_whole" if whole else "videos_broken"] += 1
    return result


def fleet_phase(tmp: Path, config: Path, n_jobs: int, seconds: int, timeout: float) -> dict:
    from videogen.api.store import JobStore

    data = tmp / "fleet-data"
    data.mkdir()
    redis = Redis(tmp)
    redis.start()
    env = {**base_env(config, data), "REDIS_URL": redis.url, "VIDEOGEN_QUEUE": "videogen-faults"}
    procs: list[Proc] = []
    faults: list[str] = []
    try:
        server, url = start_server(env, tmp, "fleet-server")
        procs.append(server)
        workers = {}
        for n in range(2):
            w = start_worker(env, tmp, n)
            workers[w.p.pid] = w
            procs.append(w)
        log(f"fleet: redis on {redis.port}, API {url}, 2 workers")
        clients = {t: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {k}"}, timeout=30)
                   for k, t in KEYS.items()}  # fmt: skip
        store = JobStore(env["DATABASE_URL"])
        ids = submit(list(clients.values()), n_jobs, seconds)
        log(f"fleet: {len(ids)} jobs submitted")
        state = {"killed": False, "restarted": False, "killed_at": 0.0}

        def faults_tick(jobs: dict) -> None:
            if not state["killed"]:
                for job in jobs.values():  # mid-job: a segment done, not all
                    if job.status == "in_progress" and 1 <= job.segments_done < job.segments_total and job.lease_owner:
                        pid = int(job.lease_owner.split(":")[1])
                        if pid in workers:
                            workers[pid].kill9()
                            faults.append(f"kill -9 worker {pid} at segment {job.segments_done}/{job.segments_total}")
                            log(f"fleet: {faults[-1]} of {job.id}")
                            state.update(killed=True, killed_at=time.monotonic())
                            w = start_worker(env, tmp, 2)
                            workers[w.p.pid] = w
                            procs.append(w)
                            log("fleet: replacement worker ready")
                            return
            elif not state["restarted"] and time.monotonic() - state["killed_at"] > 1.0:
                queued = sum(1 for j in jobs.values() if j.status == "queued")
                redis.stop()
                redis.start()
                faults.append(f"redis restarted without persistence with {queued} job(s) queued")
                log(f"fleet: {faults[-1]}")
                state["restarted"] = True

        t0 = time.monotonic()
        wait_finished(store, ids, timeout, faults_tick)
        wall = time.monotonic() - t0
        result = judge(store, ids, clients, seconds, tmp)
        for c in clients.values():
            c.close()
        store.engine.dispose()
        return {"faults": faults, "wall_s": round(wall, 1), **result}
    finally:
        for p in procs:
            p.stop()
        redis.stop()


def embedded_child(server: Proc) -> int | None:
    """The pid of `serve`'s worker child (a multiprocessing spawn child), if any."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == server.p.pid and b"spawn_main" in cmd and b"resource_tracker" not in cmd:
            return int(entry.name)
    return None


def embedded_phase(tmp: Path, config: Path, n_jobs: int, seconds: int, timeout: float) -> dict:
    from videogen.api.store import JobStore

    data = tmp / "embedded-data"
    data.mkdir()
    env = base_env(config, data)
    server, url = start_server(env, tmp, "embedded-server")
    faults: list[str] = []
    try:
        deadline = time.monotonic() + 30
        child = None
        while child is None and time.monotonic() < deadline:
            child = embedded_child(server)
            time.sleep(0.2)
        time.sleep(3.0)  # idle: waiting for work
        if child is not None:
            os.kill(child, signal.SIGKILL)
            faults.append(f"kill -9 idle embedded worker {child}")
            log(f"embedded: {faults[-1]}")
        else:
            faults.append("no embedded worker child found")
        time.sleep(3.0)
        clients = {t: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {k}"}, timeout=10)
                   for k, t in KEYS.items()}  # fmt: skip
        ids, hung = [], 0
        for i in range(n_jobs):
            try:
                ids += submit([list(clients.values())[i % 2]], 1, seconds)
            except httpx.TimeoutException:
                hung += 1
        log(f"embedded: {len(ids)} jobs submitted, {hung} create(s) hung")
        ready = httpx.get(url + "/readyz", timeout=10).status_code if not hung else None
        store = JobStore(env["DATABASE_URL"])
        t0 = time.monotonic()
        wait_finished(store, ids, timeout)
        wall = time.monotonic() - t0
        result = judge(store, ids, clients, seconds, tmp)
        result["submitted"] += hung
        result["lost"] += hung
        for c in clients.values():
            c.close()
        store.engine.dispose()
        return {"faults": faults, "creates_hung": hung, "readyz_after": ready, "wall_s": round(wall, 1), **result}
    finally:
        server.stop()


def report(name: str, r: dict) -> None:
    print(f"{name}: faults: {'; '.join(r['faults']) or 'none'}")
    print(f"{name}: jobs submitted {r['submitted']}, completed {r['completed']}, failed {r['failed']}, "
          f"lost {r['lost']}, run twice {r['run_twice']} (resumed after a kill: {r['resumed']}); "
          f"videos whole {r['videos_whole']}/{r['completed']} (frames == seconds x fps); {r['wall_s']} s")  # fmt: skip
    for e in r["failed_errors"]:
        print(f"{name}: failed: {e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=12, help="jobs through the fleet")
    ap.add_argument("--embedded-jobs", type=int, default=4, help="jobs through the embedded server")
    ap.add_argument("--seconds", type=int, default=3, help="video length (3 s = 3 segments of the tiny model)")
    ap.add_argument("--timeout", type=float, default=600, help="per phase: jobs not finished by then are lost")
    ap.add_argument("--skip-embedded", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="videogen-faults-") as tmp_name:
        tmp = Path(tmp_name)
        config = make_model(tmp)
        fleet = fleet_phase(tmp, config, args.jobs, args.seconds, args.timeout)
        report("fleet", fleet)
        embedded = None
        if not args.skip_embedded:
            embedded = embedded_phase(tmp, config, args.embedded_jobs, args.seconds, args.timeout)
            report("embedded", embedded)
    phases = [p for p in (fleet, embedded) if p is not None]
    summary = {key: sum(p[key] for p in phases) for key in ("submitted", "completed", "failed", "lost", "run_twice",
                                                            "resumed", "videos_whole", "videos_broken")}  # fmt: skip
    print(json.dumps({**summary, "fleet": fleet, "embedded": embedded}))
    ok = summary["lost"] == 0 and summary["run_twice"] == 0 and summary["videos_broken"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

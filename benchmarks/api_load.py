"""Load benchmark of the job service: N concurrent clients create and poll jobs against the
embedded server (`videogen serve`, API + in-process worker rendering at the same time).

    PYTHONPATH=. python benchmarks/api_load.py [--clients 50] [--duration 20] [--poll-interval 0.25]
    PYTHONPATH=. python benchmarks/api_load.py --url http://127.0.0.1:8000 --key KEY   # a running server

Without --url it starts `videogen serve --no-auth` on a free loopback port with a tiny random
Wan model (tests/tiny_wan.py) as preset `tiny`, renders one warm-up job (the worker's torch
import and model load are not what is measured), then:

every client, for `--duration` seconds, does what an SDK's create-and-poll does: create a job,
poll it every `--poll-interval` seconds until it is finished, create the next. The worker renders
all the while, so the numbers are the API's latency *while rendering*: create latency, polling
throughput and latency, errors.

Prints one JSON line. Target (issue 5): create p99 <= 50 ms at 50 clients on the 2-core dev
machine, no errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
JOB = {"prompt": "a red circle moving right", "model": "tiny", "seconds": "1", "size": "32x32", "steps": 2}
PRESETS = """\
default: tiny
presets:
  tiny:
    kind: diffusers
    path: {path}
    size: 32x32
    fps: 8
    steps: 2
    guidance: 1.0
    segment_seconds: 1.625
    overlap_frames: 5
    attention: dense
"""


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))] if xs else float("nan")


def start_server(tmp: Path) -> tuple[subprocess.Popen, str]:
    model = tmp / "tiny-wan"
    tests = str(Path(__file__).resolve().parent.parent / "tests")  # tiny_wan.py: the tests' model builder
    code = (
        f"import sys; sys.path.insert(0, {tests!r}); from tiny_wan import save_tiny_wan; save_tiny_wan({str(model)!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    (tmp / "config").mkdir()
    (tmp / "config" / "models.yaml").write_text(PRESETS.format(path=model))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO), "VIDEOGEN_CONFIG_DIR": str(tmp / "config"), "VIDEOGEN_DEVICE": "cpu"}
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "videogen.cli", "serve", "--no-auth", "--port", str(port),
                             "--data-dir", str(tmp / "data"), "--log-level", "warning"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"server did not start; see {tmp / 'server.log'}")


async def run(url: str, key: str | None, clients: int, duration: float, poll_interval: float) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as http:
        warm = (await http.post("/v1/videos", json=JOB)).json()["id"]  # loads torch and the model in the worker
        while (await http.get(f"/v1/videos/{warm}")).json()["status"] not in ("completed", "failed", "cancelled"):
            await asyncio.sleep(0.2)

        create_ms: list[float] = []
        poll_ms: list[float] = []
        errors: list[str] = []
        completed = 0

        async def client(deadline: float) -> None:
            """Like an SDK's create_and_poll: create, poll every `poll_interval` until done, repeat."""
            nonlocal completed
            await asyncio.sleep(random.uniform(0, poll_interval))  # clients are not in lockstep
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    r = await http.post("/v1/videos", json=JOB)
                except httpx.HTTPError as exc:
                    errors.append(f"create {type(exc).__name__}")
                    continue
                create_ms.append((time.perf_counter() - t0) * 1000)
                if r.status_code != 200:
                    errors.append(f"create {r.status_code}")
                    continue
                vid = r.json()["id"]
                while time.perf_counter() < deadline:
                    await asyncio.sleep(poll_interval)
                    t0 = time.perf_counter()
                    try:
                        r = await http.get(f"/v1/videos/{vid}")
                    except httpx.HTTPError as exc:
                        errors.append(f"poll {type(exc).__name__}")
                        continue
                    poll_ms.append((time.perf_counter() - t0) * 1000)
                    if r.status_code != 200:
                        errors.append(f"poll {r.status_code}")
                    elif r.json()["status"] in ("completed", "failed", "cancelled"):
                        completed += r.json()["status"] == "completed"
                        break

        t0 = time.perf_counter()
        await asyncio.gather(*(client(t0 + duration) for _ in range(clients)))
        wall = time.perf_counter() - t0
    return {
        "clients": clients,
        "duration_s": round(wall, 1),
        "poll_interval_s": poll_interval,
        "jobs_created": len(create_ms),
        "create_p50_ms": round(statistics.median(create_ms), 1) if create_ms else None,
        "create_p99_ms": round(percentile(create_ms, 99), 1),
        "create_max_ms": round(max(create_ms), 1) if create_ms else None,
        "polls": len(poll_ms),
        "polls_per_s": round(len(poll_ms) / wall, 1),
        "poll_p50_ms": round(statistics.median(poll_ms), 1) if poll_ms else None,
        "poll_p99_ms": round(percentile(poll_ms, 99), 1),
        "jobs_completed": completed,
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    ap.add_argument("--poll-interval", type=float, default=0.25, help="each client's wait between polls")
    ap.add_argument("--url", help="a running server (default: start an embedded one with a tiny model)")
    ap.add_argument("--key", help="API key for --url")
    args = ap.parse_args()
    proc = None
    with tempfile.TemporaryDirectory(prefix="videogen-bench-") as tmp:
        url = args.url
        if url is None:
            proc, url = start_server(Path(tmp))
        try:
            result = asyncio.run(run(url, args.key, args.clients, args.duration, args.poll_interval))
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(10)
    print(json.dumps(result))
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

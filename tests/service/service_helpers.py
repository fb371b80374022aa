"""Small helpers shared by the service tests (polling, SSE parsing, decoding videos)."""

from __future__ import annotations

import json
import time

import httpx

TERMINAL = ("completed", "failed", "cancelled")


def wait_for(client: httpx.Client, video_id: str, predicate, timeout: float = 60.0, interval: float = 0.05) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        video = client.get(f"/v1/videos/{video_id}").json()
        if predicate(video):
            return video
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting on {video_id}: {video}")
        time.sleep(interval)


def wait_done(client: httpx.Client, video_id: str, timeout: float = 60.0) -> dict:
    return wait_for(client, video_id, lambda v: v.get("status") in TERMINAL, timeout)


def sse_events(client: httpx.Client, video_id: str, timeout: float = 60.0) -> list[tuple[str, dict]]:
    """Read the whole event stream of a job (it ends after the terminal status)."""
    events, kind = [], None
    with client.stream("GET", f"/v1/videos/{video_id}/events", timeout=timeout) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                events.append((kind, json.loads(line[6:])))
    return events


def decode(path) -> numpy.ndarray:  # noqa: F821
    from videogen.io.video import VideoReader  # torch-free: keeps the test process light

    return VideoReader(path).read_all()

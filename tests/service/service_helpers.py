"""Small helpers shared by the service tests (polling, SSE parsing, decoding videos)."""

from __future__ import annotations

import json
import time

import httpx

TERMINAL = ("completed", "failed", "cancelled")


def tiny_preset(path, name: str = "tiny", description: str = "tiny random Wan for tests", extra: str = "") -> str:
    """A `models.yaml` preset block serving the tiny Wan folder at `path` (tests/tiny_wan.py) as
    `name`: 32x32 at 8 fps, 2 steps, 13-frame segments (a 5-frame overlap + 8 new frames per
    continuation), so a render takes a fraction of a second on a CPU. `extra`: more keys, each
    line indented four spaces (e.g. a `limits:` block)."""
    return f"""\
  {name}:
    kind: diffusers
    path: {path}
    description: {description}
    size: 32x32
    fps: 8
    steps: 2
    guidance: 1.0
    flow_shift: 3.0
    segment_seconds: 1.625
    overlap_frames: 5
    attention: dense
{extra}"""


def causal_preset(description: str = "built-in block-causal model", extra: str = "") -> str:
    """The `builtin-causal` preset block (the shipped causal weights, 64x64 at 16 fps, 8 steps)."""
    return f"""\
  builtin-causal:
    kind: builtin
    description: {description}
    weights: builtin_causal.safetensors
    causal: true
    size: 64x64
    fps: 16
    steps: 8
    guidance: 1.0
    flow_shift: 3.0
    segment_seconds: 2.0
    overlap_frames: 5
    attention: dense
{extra}"""


def presets_yaml(*blocks: str, default: str = "tiny") -> str:
    """A whole `models.yaml` of preset `blocks` (`tiny_preset`, `causal_preset`)."""
    return f"default: {default}\npresets:\n" + "".join(blocks)


def stream_presets(path) -> str:
    """`builtin-causal` (streams) and `tiny` (renders) for the stream, console and storage tests."""
    return presets_yaml(causal_preset("built-in block-causal model (the first frame alone, then chunks of 12 frames)"),
                        tiny_preset(path, description="tiny random Wan (not causal)"))  # fmt: skip


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

"""Cancel (and delete) stop a running job inside the transformer's forward pass, not at the next
denoising step: over real HTTP, a job whose single step takes seconds (a tiny Wan with many
blocks at 512x512) is cancelled in a fraction of a step, ends `cancelled` and leaves no files."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from service_helpers import wait_done

DEEP_LAYERS = 64  # blocks of the deep tiny transformer: one block is ~1.5% of a step

DEEP_PRESETS = """\
default: deep
presets:
  deep:
    kind: diffusers
    path: {path}
    description: tiny random Wan with many blocks (slow steps)
    size: 512x512
    fps: 8
    steps: 4
    guidance: 1.0
    flow_shift: 3.0
    segment_seconds: 1.125   # 9 frames; a 0.625 s job is one segment of 5 frames (2 latent frames)
    overlap_frames: 5
    attention: dense
"""

# 2 latent frames of 32x32 tokens: 2,048 tokens; a step takes seconds on one CPU thread.
SLOW_STEP = {"prompt": "a red circle moving right", "model": "deep", "seconds": "0.625", "size": "512x512"}


@pytest.fixture(scope="module")
def deep_config(tmp_path_factory, tiny_model) -> Path:
    """The tiny Wan folder with a transformer of `DEEP_LAYERS` blocks (the tiny one's two, repeated;
    written with numpy, so the test process stays torch-free), and a models.yaml serving it."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    d = tmp_path_factory.mktemp("deep")
    folder = d / "deep-wan"
    shutil.copytree(tiny_model, folder, ignore=shutil.ignore_patterns("transformer"))
    (folder / "transformer").mkdir()
    config = json.loads((tiny_model / "transformer" / "config.json").read_text())
    weights = load_file(tiny_model / "transformer" / "diffusion_pytorch_model.safetensors")
    deep = {k: v for k, v in weights.items() if not k.startswith("blocks.")}
    for i in range(DEEP_LAYERS):
        prefix = f"blocks.{i % config['num_layers']}."
        deep.update({f"blocks.{i}.{k[len(prefix) :]}": np.copy(v) for k, v in weights.items() if k.startswith(prefix)})
    save_file(deep, folder / "transformer" / "diffusion_pytorch_model.safetensors", metadata={"format": "pt"})
    (folder / "transformer" / "config.json").write_text(json.dumps({**config, "num_layers": DEEP_LAYERS}))
    (d / "config").mkdir()
    (d / "config" / "models.yaml").write_text(DEEP_PRESETS.format(path=folder))
    return d / "config"


def _seen(client, video_id: str, predicate, timeout: float = 120.0) -> tuple[dict, float]:
    """Poll until `predicate(video)`; the video and the monotonic time it was first seen so."""
    deadline = time.monotonic() + timeout
    while True:
        video = client.get(f"/v1/videos/{video_id}").json()
        if predicate(video):
            return video, time.monotonic()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting on {video_id}: {video}")
        time.sleep(0.02)


def test_cancel_stops_a_running_step_within_a_fraction_of_the_step(serve, deep_config):
    # The lease thread asks the store for a cancel every 0.1 s here (default 0.5 s), so the bound
    # below measures where the render checks the flag (each block, not each step), not the poll.
    server = serve(extra_env={"VIDEOGEN_CONFIG_DIR": str(deep_config), "VIDEOGEN_CANCEL_POLL_SECONDS": "0.1"})
    with server.client() as alpha:
        r = alpha.post("/v1/videos", json=SLOW_STEP)
        assert r.status_code == 200, r.text
        vid = r.json()["id"]
        _, t1 = _seen(alpha, vid, lambda v: v["steps_done"] >= 1)
        _, t2 = _seen(alpha, vid, lambda v: v["steps_done"] >= 2)
        step = t2 - t1  # one whole denoising step, measured on this machine under its present load
        asked = time.monotonic()  # step 3 has just begun: a per-step check would see the cancel after it
        assert alpha.post(f"/v1/videos/{vid}/cancel").status_code == 200
        final, done = _seen(alpha, vid, lambda v: v["status"] in ("completed", "failed", "cancelled"))
        latency = done - asked
        print(f"step {step:.2f} s, cancel took {latency:.2f} s")
        assert final["status"] == "cancelled" and final["steps_done"] == 2, final
        assert latency < 0.5 * step, f"cancel took {latency:.2f} s; one step takes {step:.2f} s"
        assert alpha.get(f"/v1/videos/{vid}/content").status_code == 404
        assert not (server.data_dir / "outputs" / vid).exists()  # no partial MP4 published
        assert not (server.data_dir / "work" / vid).exists()

        # Delete is a cancel too: the next job starts within a fraction of a step of it.
        deleted = alpha.post("/v1/videos", json=SLOW_STEP).json()["id"]
        _seen(alpha, deleted, lambda v: v["steps_done"] >= 1)
        after = alpha.post("/v1/videos", json={**SLOW_STEP, "size": "64x64", "steps": 1}).json()["id"]
        asked = time.monotonic()
        assert alpha.delete(f"/v1/videos/{deleted}").status_code == 200
        _, started = _seen(alpha, after, lambda v: v["status"] != "queued")
        print(f"delete freed the worker in {started - asked:.2f} s")
        assert started - asked < 0.5 * step
        assert wait_done(alpha, after, timeout=60)["status"] == "completed"  # the worker lives on
        assert not (server.data_dir / "outputs" / deleted).exists()

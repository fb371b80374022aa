"""`loras` in `POST /v1/videos`: names of files in the operator's folder (`VIDEOGEN_LORA_DIR`),
rendered by a real embedded worker that keeps its model and switches adapters between jobs."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file  # numpy only: the test process stays free of torch
from service_helpers import decode, wait_done

TINY_WIDTH, TINY_FFN = 24, 32  # tests/tiny_wan.py: 2 heads x 12 dims, ffn 32


def _lora(path, blocks=(0, 1), seed=0):
    """A rank-2 LoRA in the original Wan names for the tiny Wan's self-attention q and first FFN linear."""
    rng = np.random.default_rng(seed)
    state = {}
    for i in blocks:
        for module, width_out in (("self_attn.q", TINY_WIDTH), ("ffn.0", TINY_FFN)):
            state[f"diffusion_model.blocks.{i}.{module}.lora_A.weight"] = rng.normal(0, 0.5, (2, TINY_WIDTH)).astype(
                np.float32
            )
            state[f"diffusion_model.blocks.{i}.{module}.lora_B.weight"] = rng.normal(0, 0.5, (width_out, 2)).astype(
                np.float32
            )
    save_file(state, str(path))


@pytest.fixture
def lora_server(serve, tmp_path):
    folder = tmp_path / "loras"
    (folder / "styles").mkdir(parents=True)
    _lora(folder / "styles" / "wan.safetensors")
    _lora(folder / "deep.safetensors", blocks=(5,))  # the tiny Wan has 2 blocks
    (tmp_path / "outside.safetensors").write_bytes((folder / "deep.safetensors").read_bytes())
    # The worker at the test's own priority: on a loaded box its default extra nice starves it.
    server = serve(extra_env={"VIDEOGEN_LORA_DIR": str(folder), "VIDEOGEN_EMBEDDED_WORKER_NICE": "0"})
    with server.client() as client:
        yield server, client


def _render(client, server, **extra) -> dict:
    r = client.post("/v1/videos", json={"prompt": "a red cat moving left", "seconds": 1, "seed": 5, **extra})
    assert r.status_code == 200, r.text
    return wait_done(client, r.json()["id"], timeout=300)  # generous: a loaded CI box starts the worker slowly


def test_a_lora_job_renders_with_it_and_the_worker_renders_the_base_model_unchanged_after(lora_server, tmp_path):
    server, client = lora_server
    before = _render(client, server)
    styled = _render(client, server, loras=[{"name": "styles/wan.safetensors", "scale": 1.5}])
    after = _render(client, server)
    assert [v["status"] for v in (before, styled, after)] == ["completed"] * 3, (before, styled, after)
    video = {}
    for name, job in (("before", before), ("styled", styled), ("after", after)):
        (tmp_path / f"{name}.mp4").write_bytes(client.get(f"/v1/videos/{job['id']}/content").content)
        video[name] = decode(tmp_path / f"{name}.mp4")
    assert np.array_equal(video["before"], video["after"])  # the cached model is the base model again
    assert np.abs(video["styled"].astype(int) - video["before"]).mean() > 1.0

    # A LoRA that does not fit the model is found by the worker (it needs the model): the job fails
    # naming `loras` and the first key that does not fit.
    job = _render(client, server, loras=[{"name": "deep.safetensors"}])
    assert job["status"] == "failed" and job["error"]["param"] == "loras", job
    assert "transformer.blocks.5.attn1.to_q.lora_A.weight" in job["error"]["message"]


BAD_LORAS = [
    ([{"name": "../outside.safetensors"}], "inside the server's LoRA folder"),
    ([{"name": "/etc/passwd.safetensors"}], "inside the server's LoRA folder"),
    ([{"name": "nope.safetensors"}], "no such LoRA on this server"),
    ([{"name": "styles/wan.pt"}], "must be a .safetensors file"),
    ([{"name": "styles/wan.safetensors", "scale": 9}], "must be >= -5 and <= 5"),
    ([{"name": "styles/wan.safetensors"}, {"name": "styles/./wan.safetensors"}], "given twice"),
    ([{"name": "styles/wan.safetensors", "path": "/x"}], "Unknown parameter"),
    ("styles/wan.safetensors", "Input should be a valid list"),
]


def test_bad_loras_are_a_400_naming_loras(lora_server):
    _, client = lora_server
    for loras, reason in BAD_LORAS:
        for stream in (False, True):
            body = {"prompt": "a red cat", "seconds": 1, "loras": loras, "stream": stream, "model": "tiny"}
            r = client.post("/v1/videos", json=body)
            assert r.status_code == 400, (loras, r.text)
            error = r.json()["error"]
            assert error["param"].startswith("loras") and reason in error["message"], (loras, error)
            assert "/loras" not in error["message"]  # the server's folder is not shown

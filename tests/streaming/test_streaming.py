"""Streaming (videogen.streaming / videogen.attention.causal): the KV cache reproduces a block-causal
forward, memory is fixed over 1,000 chunks, prompt switches re-cache, output is deterministic."""

from __future__ import annotations

import resource

import numpy as np
import pytest
import torch

from videogen.attention.call import AttentionCall, attention_call, current_attention_call
from videogen.attention.causal import CausalCall, chunk_frames_of, new_cache, plan_chunk
from videogen.models.builtin import TRANSFORMER_CONFIG, build_fresh
from videogen.sampling.forward import block_causal_forward
from videogen.streaming import StreamControl, StreamSpec, stream


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    transformer, encoder = build_fresh(3)
    transformer.eval()
    return transformer, encoder


def _cached_forward(transformer, x, timesteps, embeds, chunk, first, sink, window):
    """Chunk by chunk through the KV cache: chunk j at its own timestep, writing its K/V."""
    _, c, _, h, w = x.shape
    grid_hw = (h // 2, w // 2)
    cache = new_cache(transformer, batch=1, tokens_per_frame=grid_hw[0] * grid_hw[1], sink=sink, window=window,
                      latent_shape=(c, h, w), dtype=torch.float32, device="cpu")  # fmt: skip
    outs = []
    for j, t in enumerate(timesteps):
        frames = chunk_frames_of(j, chunk, first)
        plan = plan_chunk(cache, transformer, frames, grid_hw)
        n = len(frames) * grid_hw[0] * grid_hw[1]
        with (
            torch.no_grad(),
            attention_call(AttentionCall(causal=CausalCall("cache", plan=plan, cache=cache, write=True))),
        ):
            outs.append(transformer(hidden_states=x[:, :, frames], timestep=torch.full((1, n), t),
                                    encoder_hidden_states=embeds, return_dict=False)[0])  # fmt: skip
        cache.commit(frames, x[:, :, frames])
    return torch.cat(outs, dim=2)


@pytest.mark.parametrize("chunk,first,sink", [(3, 1, 0), (3, 1, 1), (3, 3, 1), (2, 2, 2), (1, 1, 0)])
def test_kv_cache_streaming_equals_full_block_causal_forward(tiny, chunk, first, sink):
    transformer, encoder = tiny
    g = torch.Generator().manual_seed(1)
    frames = first + 2 * chunk
    x = torch.randn(1, TRANSFORMER_CONFIG["in_channels"], frames, 8, 8, generator=g)  # pixel + conditioning channels
    embeds = encoder.encode(["a red circle moving right on a black background"])
    timesteps = [0.0, 420.0, 999.0]
    sizes = torch.tensor([first, chunk, chunk]) * 16
    per_token = torch.tensor(timesteps).repeat_interleave(sizes).view(1, -1)
    with torch.no_grad():
        full = block_causal_forward(transformer, x, per_token, embeds, chunk, first)  # installs the processors
    cached = _cached_forward(transformer, x, timesteps, embeds, chunk, first, sink=sink, window=frames)
    # fp32 both ways; they differ only in summation order (SDPA over a masked vs a shorter key set)
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-5)


def test_block_causal_forward_ignores_the_future_and_bidirectional_does_not(tiny):
    transformer, encoder = tiny
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, TRANSFORMER_CONFIG["in_channels"], 6, 8, 8, generator=g)
    y = x.clone()
    y[:, :, 3:] = torch.randn(
        1, TRANSFORMER_CONFIG["in_channels"], 3, 8, 8, generator=g
    )  # change the second chunk only
    embeds = encoder.encode(["a blue square"])
    t = torch.full((1, 6 * 16), 500.0)
    with torch.no_grad():
        a, b = (block_causal_forward(transformer, v, t, embeds, 3, first_chunk_frames=3) for v in (x, y))
        da, db = (
            transformer(hidden_states=v, timestep=t, encoder_hidden_states=embeds, return_dict=False)[0] for v in (x, y)
        )
    torch.testing.assert_close(a[:, :, :3], b[:, :, :3], rtol=0, atol=1e-6)
    assert (da[:, :, :3] - db[:, :, :3]).abs().max() > 1e-3  # the ordinary model does look ahead
    assert current_attention_call() is None  # the call's context ends with it


@pytest.fixture(scope="module")
def causal_model():
    import warnings

    from videogen.models.loader import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no trained weights" where they are absent
        return load_model("builtin-causal", device="cpu", dtype="float32", attention="dense")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_memory_stays_bounded_over_1000_chunks(causal_model):
    spec = StreamSpec("a red circle moving right on a black background", seconds=None, size=(16, 16), steps=1,
                      chunk_frames=1, first_chunk_frames=1, sink_frames=1, window_frames=3)  # fmt: skip
    control = StreamControl()
    gen = stream(spec, causal_model, control=control)
    ptrs, rss, frames = None, [], 0
    for chunk in gen:
        frames += len(chunk.frames)
        if chunk.index == 0:
            state_cache = control.state.cache
            ptrs = (state_cache.k.data_ptr(), state_cache.v.data_ptr(), state_cache.nbytes)
        if chunk.index in (100, 999):
            rss.append(_rss_mb())
            assert (state_cache.k.data_ptr(), state_cache.v.data_ptr(), state_cache.nbytes) == ptrs
            assert len(state_cache.cached_frames()) == 4  # 1 sink + a window of 3
        if chunk.index == 999:
            break
    gen.close()
    assert frames == 1 + 4 * 999
    assert rss[1] - rss[0] < 20, f"RSS grew from {rss[0]:.0f} to {rss[1]:.0f} MB over 900 chunks"


def test_a_long_stream_rebases_its_clock_and_rewrites_its_cache_on_the_new_one(causal_model, monkeypatch):
    """The clock the moving frames see stays within CLOCK_PERIOD + the window, and every pass
    (the chunk's and the cache re-writes alike) uses the current base: sinks keep their index."""
    from videogen.streaming import recache

    monkeypatch.setattr(recache, "CLOCK_PERIOD", 8)
    seen, real = [], recache.plan_chunk

    def spy(cache, transformer, frames, grid_hw, clock_base=0):
        plan = real(cache, transformer, frames, grid_hw, clock_base)
        seen.append((list(frames), list(plan.frames), clock_base))
        return plan

    monkeypatch.setattr(recache, "plan_chunk", spy)  # every pass is planned there: the chunk's and the re-writes
    spec = StreamSpec("a red circle moving right on a black background", seconds=None, size=(16, 16), steps=1,
                      chunk_frames=1, first_chunk_frames=1, sink_frames=1, window_frames=3)  # fmt: skip
    control = StreamControl()
    gen = stream(spec, causal_model, control=control)
    for chunk in gen:
        if chunk.index == 40:
            break
    gen.close()
    state = control.state
    assert state.rebases >= 4 and state.recaches == 0
    assert max(base for *_, base in seen) > 30
    for frames, clocks, base in seen:
        assert clocks == [f if f < 1 else f - base for f in frames]
        assert max(clocks) < 8 + 3 + 1


def test_stream_is_deterministic_and_has_the_exact_length(causal_model):
    spec = StreamSpec("a green square moving up on a gray background", seconds=2.0, steps=2)
    a = np.concatenate([c.frames for c in stream(spec, causal_model)])
    b = np.concatenate([c.frames for c in stream(spec, causal_model)])
    assert a.shape == (32, 64, 64, 3) and np.array_equal(a, b)
    assert current_attention_call() is None


def test_prompt_switch_rebuilds_the_cache_under_the_new_prompt(causal_model):
    base = StreamSpec("a red circle moving right on a black background", seconds=3.0, steps=2)
    switched = StreamSpec(
        base.prompt, seconds=3.0, steps=2, switches=[(1.0, "a white square staying still on a blue background")]
    )
    a = list(stream(base, causal_model))
    b = list(stream(switched, causal_model))
    # identical until the switch, different after it; the switch lands on the first chunk boundary past 1 s
    first_after = next(i for i, c in enumerate(b) if c.prompt != base.prompt)
    assert b[first_after].first_frame >= 16 and b[first_after - 1].first_frame < 16
    for ca, cb in zip(a[:first_after], b[:first_after]):
        assert np.array_equal(ca.frames, cb.frames)
    assert not np.array_equal(a[first_after].frames, b[first_after].frames)


def test_control_switch_and_cancel(causal_model):
    control = StreamControl()
    spec = StreamSpec("a red circle moving right on a black background", seconds=None, steps=1)
    seen = []
    from videogen.errors import RenderCancelled

    with pytest.raises(RenderCancelled):
        for chunk in stream(spec, causal_model, control=control):
            seen.append(chunk.prompt)
            if chunk.index == 1:
                control.switch_prompt("a yellow triangle moving down on a white background")
            if chunk.index == 3:
                control.cancel()
    assert seen[:2] == [spec.prompt] * 2 and seen[2] == "a yellow triangle moving down on a white background"
    assert len(seen) == 4


@pytest.mark.parametrize("kwargs,field", [
    (dict(seconds=0), "seconds"), (dict(chunk_frames=0), "chunk_frames"), (dict(window_frames=2), "window_frames"),
    (dict(steps=0), "steps"), (dict(prompt=" "), "prompt"), (dict(size=(60, 64)), "size"),
])  # fmt: skip
def test_bad_stream_specs_name_the_field(causal_model, kwargs, field):
    from videogen.errors import InvalidOption

    args = dict(prompt="a red circle", seconds=1.0)
    args.update(kwargs)
    with pytest.raises(InvalidOption, match=field):
        next(stream(StreamSpec(**args), causal_model))


def test_cli_stream_writes_mp4_and_mjpeg_to_stdout(tmp_path):
    import subprocess
    import sys

    from videogen.io.video import probe

    cmd = [
        sys.executable,
        "-m",
        "videogen.cli",
        "stream",
        "a red circle moving right on a black background",
        "--seconds",
        "2",
    ]
    out = tmp_path / "s.mp4"
    r = subprocess.run(cmd + ["-o", str(out), "-q", "--steps", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    info = probe(out)
    assert (info.width, info.height, info.num_frames) == (64, 64, 32)
    r = subprocess.run(cmd + ["-o", "-", "-q", "--steps", "1", "--switch", "1:a blue square moving up on a gray background"],
                       capture_output=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(b"\xff\xd8\xff") == 32  # 32 JPEG frames, back to back (ffplay -f mjpeg -)


@pytest.mark.parametrize("args,message", [
    (["-o", "x.avi"], "--output=x.avi"), (["-o", "-", "--format", "mp4"], "--format=mp4"),
    (["-o", "x.mp4", "--switch", "soon:a cat"], "--switch=soon:a cat"), (["-o", "x.mp4", "--window-frames", "2"], "--window-frames=2"),
    (["-o", "x.mp4", "--model", "builtin"], "--model=builtin"),
])  # fmt: skip
def test_cli_stream_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    import contextlib
    import io

    from videogen.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.chdir(tmp_path):
        code = main(["stream", "a red circle", "--seconds", "1", "-q"] + args)
    lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("videogen: error")]
    assert code == 2 and len(lines) == 1 and message in lines[0], err.getvalue()
    assert not list(tmp_path.iterdir())


def test_cancel_check_is_asked_every_denoising_step_and_transformer_block(causal_model):
    from videogen.errors import RenderCancelled

    calls = []
    per_chunk = 1 + 3 * (1 + len(causal_model.transformer.blocks))  # before it, each of 3 steps, each block

    def check() -> bool:
        calls.append(1)
        return len(calls) >= per_chunk + 4  # chunk 1: before it, its step 1, block 0, then block 1 stops it

    spec = StreamSpec("a red circle moving right on a black background", seconds=None, steps=3)
    chunks = []
    with pytest.raises(RenderCancelled, match="before transformer block 1 of step 1 of chunk 1"):
        for chunk in stream(spec, causal_model, control=StreamControl(cancel_check=check)):
            chunks.append(chunk)
    assert len(chunks) == 1

"""Step caching (`--cache first-block|mag`, `videogen.sampling.cache`): threshold 0 changes
nothing, a large threshold skips transformer blocks and stays close to the uncached output, one
call's cache never reaches the next, cancelling still stops within one block, and bad options
name themselves."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from videogen import RenderSpec
from videogen.config.resolve import resolve_render
from videogen.config.step_cache import StepCacheConfig
from videogen.errors import InvalidOption, RenderCancelled
from videogen.models.codec import video_to_uint8
from videogen.sampling.loop import denoise_segment, run_to_end

STEPS = 12


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: the shared CI CPU is oversubscribed, and the outputs do not depend on it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class FeedForwardCount:
    """Counts the transformer blocks that really run (their feed-forward), whatever the cache skips."""

    def __init__(self, transformer) -> None:
        self.calls = 0
        self.handles = [b.ffn.register_forward_hook(self._count) for b in transformer.blocks]

    def _count(self, *_) -> None:
        self.calls += 1

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def _denoise(model, cache: StepCacheConfig | None, prompt: str = "a red circle moving left", cancel=None):
    encode = model.prompt_encoder.encode
    return denoise_segment(model, cond=encode([prompt]), uncond=encode([""]), latent_frames=3, latent_size=(8, 8),
                           prefix=None, steps=STEPS, guidance=3.0, flow_shift=3.0, seed=5, cancel=cancel,
                           cache=cache)  # fmt: skip


def _counted(model, cache: StepCacheConfig | None, **kw) -> tuple[torch.Tensor, int]:
    count = FeedForwardCount(model.transformer)
    try:
        return run_to_end(_denoise(model, cache, **kw)), count.calls
    finally:
        count.close()


def _psnr(model, a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR (dB) of the decoded frames of latents `b` against those of `a`."""
    fa = video_to_uint8(model.codec.decode(a)).astype(np.float64)
    fb = video_to_uint8(model.codec.decode(b)).astype(np.float64)
    mse = float(np.mean((fa - fb) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.mark.parametrize("mode", ["first-block", "mag"])
def test_threshold_zero_computes_every_block_and_equals_the_uncached_output(builtin_model, mode):
    plain, plain_calls = _counted(builtin_model, None)
    cached, cached_calls = _counted(builtin_model, StepCacheConfig(mode, 0.0, retention=0.0))
    assert plain_calls == cached_calls == STEPS * len(builtin_model.transformer.blocks)
    assert torch.equal(plain, cached)


# Measured on this fixture (12 steps, CFG 3, fp32 CPU): first-block 0.3 runs 36 of 48 blocks at
# 40.1 dB, mag 0.02 runs 36 at 38.4 dB; the 34 dB bound leaves 4 dB for other CPUs' arithmetic
# (skipping too much, mag 0.05: 20 of 48 blocks, gives 26.6 dB).
@pytest.mark.parametrize(("mode", "threshold"), [("first-block", 0.3), ("mag", 0.02)])
def test_a_large_threshold_skips_blocks_and_stays_close(builtin_model, mode, threshold):
    plain, plain_calls = _counted(builtin_model, None)
    cached, cached_calls = _counted(builtin_model, StepCacheConfig(mode, threshold))
    assert cached_calls < 0.8 * plain_calls
    assert _psnr(builtin_model, plain, cached) > 34.0


@pytest.mark.parametrize("mode", ["first-block", "mag"])
def test_a_cache_never_reaches_the_next_denoise_call(builtin_model, mode):
    from videogen.models.loader import load_model

    config = StepCacheConfig(mode, 0.3 if mode == "first-block" else 0.02)
    run_to_end(_denoise(builtin_model, config, prompt="a blue square moving right"))  # leaves nothing behind
    second = run_to_end(_denoise(builtin_model, config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh_model = load_model("builtin", device="cpu", dtype="float32", attention="dense")
    fresh = run_to_end(_denoise(fresh_model, config))
    assert torch.equal(second, fresh)
    blocks = builtin_model.transformer.blocks
    assert all(not isinstance(v, torch.Tensor) for b in blocks for v in vars(b).values())  # no activations kept


def test_cancel_stops_within_one_block_while_steps_are_skipped(builtin_model):
    blocks = len(builtin_model.transformer.blocks)
    config = StepCacheConfig("mag", 0.5, retention=0.0)  # skips from the second step on
    _, calls = _counted(builtin_model, config)
    assert calls < STEPS * blocks
    asked = []
    cancel_at = 2 * (blocks + 1) + 3  # asked once per step and once per block: block 1 of step 3, a skipped one
    with pytest.raises(RenderCancelled, match="before transformer block 1 of step 3"):
        run_to_end(_denoise(builtin_model, config, cancel=lambda: asked.append(1) or len(asked) >= cancel_at))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"cache": "teacache"}, "cache"),
        ({"cache": "mag", "cache_threshold": 1.5}, "cache_threshold"),
        ({"cache": "mag", "cache_threshold": -0.1}, "cache_threshold"),
        ({"cache": "first-block", "cache_threshold": float("nan")}, "cache_threshold"),
        ({"cache": "off", "cache_threshold": 0.1}, "cache_threshold"),
    ],
)
def test_bad_cache_options_name_the_option(options, field):
    with pytest.raises(InvalidOption) as exc:
        resolve_render(RenderSpec.single("a red circle", 1.0, **options))
    assert exc.value.option == field


def test_the_cli_refuses_an_unknown_cache_mode_in_one_line():
    out = subprocess.run([sys.executable, "-m", "videogen.cli", "render", "a red circle", "-o", "x.mp4", "--cache", "tea"],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["videogen: error: --cache=tea: must be one of off, first-block, mag"]


def test_a_mode_without_a_threshold_takes_the_presets_measured_one():
    from videogen.config.presets import get_preset

    preset = get_preset("builtin")
    resolved = resolve_render(RenderSpec.single("a red circle", 1.0, cache="first-block"))
    assert resolved.cache.threshold == preset.cache.thresholds["first-block"]
    assert resolve_render(RenderSpec.single("a red circle", 1.0, cache="mag", cache_threshold=0.0)).cache.threshold == 0


def test_a_two_expert_model_computes_the_first_step_of_each_expert(tmp_path):
    from tiny_wan import save_tiny_wan

    from videogen.models.loader import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load_model(str(save_tiny_wan(tmp_path / "a14b", "wan2.2-a14b")), device="cpu", dtype="float32")
    ran: list[int] = []  # per call of the low-noise expert: did its last block run?
    last_ffn = model.transformer_2.blocks[-1].ffn
    marks = [model.transformer_2.register_forward_pre_hook(lambda *_: ran.append(0)),
             last_ffn.register_forward_hook(lambda *_: ran.__setitem__(-1, 1))]  # fmt: skip
    encode = model.prompt_encoder.encode
    try:
        run_to_end(denoise_segment(model, cond=encode(["a red circle"]), uncond=None, latent_frames=2,
                                   latent_size=(4, 4), prefix=None, steps=STEPS, guidance=1.0, flow_shift=3.0, seed=1,
                                   cache=StepCacheConfig("mag", 0.9, retention=0.0)))  # fmt: skip
    finally:
        for mark in marks:
            mark.remove()
    assert 1 < len(ran) < STEPS  # both experts ran
    assert ran[0] == 1  # the high-noise expert's residual is never reused by the low-noise one
    assert 0 in ran  # and the low-noise expert then skips on its own residuals

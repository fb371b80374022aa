"""Step caching (`--cache first-block|mag|taylor`, `videogen.sampling.cache`): threshold 0 changes
nothing, a large threshold skips transformer blocks and stays close to the uncached output, one
call's cache never reaches the next, cancelling still stops within one block, taylor's forecast
and error estimate are exact where they should be, and bad options name themselves."""

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
from videogen.sampling.cache import StepCache
from videogen.sampling.loop import denoise_segment, run_counting, run_to_end

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


@pytest.mark.parametrize("mode", ["first-block", "mag", "taylor"])
def test_threshold_zero_computes_every_block_and_equals_the_uncached_output(builtin_model, mode):
    plain, plain_calls = _counted(builtin_model, None)
    cached, cached_calls = _counted(builtin_model, StepCacheConfig(mode, 0.0, retention=0.0))
    assert plain_calls == cached_calls == STEPS * len(builtin_model.transformer.blocks)
    assert torch.equal(plain, cached)


# Measured on this fixture (12 steps, CFG 3, fp32 CPU) with the shipped weights (round 4):
# first-block 0.3 runs 36 of 48 blocks at 38.6 dB, mag 0.02 36 at 41.2 dB (mag 0.01 only skips 8),
# taylor 0.05 36 at 44.6 dB; reusing a stale residual is a zeroth-order forecast, so those two get a
# lower bound. The bounds leave 6 dB for other CPUs' arithmetic and fail skipping too much
# (first-block 0.6: 27 blocks, 25.4 dB; mag 0.05: 24, 28.0 dB). (Round 3 measured 30.4 / 30.1 (mag
# 0.01) / 36.5 dB, the base weights 40.1 / 38.4 / 41.9 dB at the same settings.)
@pytest.mark.parametrize(("mode", "threshold", "bound"), [("first-block", 0.3, 32.0), ("mag", 0.02, 32.0),
                                                          ("taylor", 0.05, 38.0)])  # fmt: skip
def test_a_large_threshold_skips_blocks_and_stays_close(builtin_model, mode, threshold, bound):
    plain, plain_calls = _counted(builtin_model, None)
    cached, cached_calls = _counted(builtin_model, StepCacheConfig(mode, threshold))
    assert cached_calls < 0.8 * plain_calls
    assert _psnr(builtin_model, plain, cached) > bound


@pytest.mark.parametrize("mode", ["first-block", "mag", "taylor"])
def test_a_cache_never_reaches_the_next_denoise_call(builtin_model, mode):
    from videogen.models.loader import load_model

    config = StepCacheConfig(mode, {"first-block": 0.3, "mag": 0.02, "taylor": 0.05}[mode])
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
    assert out.stderr.strip().splitlines() == [
        "videogen: error: --cache=tea: must be one of off, first-block, mag, taylor"
    ]


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


class _Transformer:
    """Stands in for a transformer where only its identity matters (taylor resets on a new one)."""


def _observed(cache: StepCache, transformer, f, sigmas) -> None:
    for step, sigma in enumerate(sigmas):
        assert cache.forecast(transformer, step, sigma) is None
        cache.observe(sigma, f(sigma))


def test_taylor_forecasts_a_linear_trajectory_exactly():
    f = lambda s: torch.tensor([[1.0, -2.0], [0.5, 3.0]]) + s * torch.tensor([[2.0, 1.0], [-4.0, 0.25]])
    cache, transformer = StepCache(StepCacheConfig("taylor", 1e-6, retention=0.0), steps=10), _Transformer()
    _observed(cache, transformer, f, [1.0, 0.9, 0.8])
    forecast = cache.forecast(transformer, 3, 0.65)
    assert forecast is not None and torch.allclose(forecast, f(0.65), atol=1e-6)
    assert (cache.computed, cache.skipped) == (3, 1)


def test_taylor_error_estimate_is_newtons_remainder_on_a_quadratic():
    """For p(s) = c s^2 the line through s1, s2 misses p(s) by c (s - s1)(s - s2) exactly, which is
    what the estimate says: a threshold just above that error forecasts, just below computes."""
    c = torch.full((2, 3), 0.7)
    f = lambda s: 1.0 + c * s * s
    sigmas, target = [1.0, 0.8, 0.6], 0.45
    last = f(sigmas[-1])
    error = float(0.7 * abs((target - 0.6) * (target - 0.8)) / last.abs().mean())
    for threshold, forecast in ((error * 1.01, True), (error * 0.99, False)):
        cache, transformer = StepCache(StepCacheConfig("taylor", threshold, retention=0.0), steps=10), _Transformer()
        _observed(cache, transformer, f, sigmas)
        out = cache.forecast(transformer, 3, target)
        assert (out is not None) is forecast
        if out is not None:
            assert torch.allclose(f(target) - out, 0.7 * (target - 0.6) * (target - 0.8) * torch.ones(2, 3), atol=1e-6)


def test_taylor_keeps_retention_the_last_step_max_skips_and_a_new_transformers_first_steps():
    f = lambda s: torch.ones(4) * (2.0 + s)
    steps, sigmas = 12, [1.0 - i / 12 for i in range(12)]
    config = StepCacheConfig("taylor", 0.5, retention=0.25, max_skips=2, keep_last=1)
    cache, a, b = StepCache(config, steps=steps), _Transformer(), _Transformer()
    computed = []
    for step, sigma in enumerate(sigmas):
        transformer = a if step < 8 else b  # a two-expert switch at step 8
        if cache.forecast(transformer, step, sigma) is None:
            cache.observe(sigma, f(sigma))
            computed.append(step)
    # 0-2: retention (3 of 12) and the first three outputs; 3-4 forecast, 5 computed (max 2 in a
    # row), 6-7 forecast; 8-10: the new transformer's first three; 11: the last step.
    assert computed == [0, 1, 2, 5, 8, 9, 10, 11]
    assert (cache.computed, cache.skipped) == (8, 4)


def test_taylor_never_runs_a_forecast_steps_transformer(builtin_model):
    """A forecast step calls no part of the transformer (patch embedding, blocks, head): the saving
    is the whole call, which is what lets it beat skipping blocks alone."""
    calls = []
    handle = builtin_model.transformer.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        _, blocks = _counted(builtin_model, StepCacheConfig("taylor", 0.05))
    finally:
        handle.remove()
    assert blocks == len(calls) * len(builtin_model.transformer.blocks) < STEPS * len(builtin_model.transformer.blocks)


@pytest.mark.parametrize(("mode", "threshold"), [("taylor", 0.05), ("mag", 0.02), ("first-block", 0.3), (None, 0.0)])
def test_each_step_says_whether_the_transformer_ran_for_it(builtin_model, mode, threshold):
    """`StepProgress.evaluated` is what the health gate counts as an attempt's cost: False on the
    steps the cache forecast or whose blocks it skipped, so the evaluations reported are the
    transformer calls that ran every block."""
    cache = StepCacheConfig(mode, threshold) if mode else None
    count = FeedForwardCount(builtin_model.transformer)
    try:
        _, evals = run_counting(_denoise(builtin_model, cache))
        blocks = count.calls
    finally:
        count.close()
    n = len(builtin_model.transformer.blocks)
    if mode in (None, "taylor", "mag"):  # a skipped step runs no block at all
        assert evals * n == blocks
    else:  # first-block: a skipped step still runs block 0
        assert evals * n + (STEPS - evals) == blocks
    assert (evals == STEPS) == (mode is None)

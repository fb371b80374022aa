"""Training against the model's own errors: noised context frames and the model's own context
(`TrainConfig.context_noise`, `self_context`; videogen/training/context.py)."""

from dataclasses import replace

import torch

from videogen.models.builtin import WEIGHTS_FILE, build_fresh, load_weights
from videogen.models.codec import PixelCodec
from videogen.training.config import TrainConfig
from videogen.training.context import own_context
from videogen.training.data import make_batch
from videogen.training.loss import flow_matching_loss

BASE = TrainConfig(latent_frames=(9,), batch_tokens=2048, compile=False)


def _continuation_step(cfg: TrainConfig) -> int:
    """A step whose batch has clean-context frames (a continuation's prefix)."""
    return next(s for s in range(100) if make_batch(cfg, s, PixelCodec()).context.any())


def test_context_noise_noises_only_context_frames_and_leaves_the_base_batches_alone():
    codec = PixelCodec()
    noisy_cfg = replace(BASE, context_noise=0.3)
    noised = 0
    for step in range(12):
        base, b = make_batch(BASE, step, codec), make_batch(noisy_cfg, step, codec)
        assert torch.equal(base.latents, b.latents) and torch.equal(base.noise, b.noise)
        assert torch.equal(b.context, base.sigmas == 0)  # the context is what the base recipe held clean
        assert torch.equal(b.sigmas[~b.context], base.sigmas[~b.context])  # generated frames as before
        ctx = b.sigmas[b.context]
        assert (ctx >= 0).all() and (ctx <= 0.3).all()
        noised += int((ctx > 0).sum())
    assert noised > 0


def test_noised_context_frames_carry_no_loss():
    torch.manual_seed(0)
    transformer, encoder = build_fresh(0)
    cfg = replace(BASE, context_noise=0.3)
    step = next(
        s
        for s in range(100)
        if (make_batch(cfg, s, PixelCodec()).sigmas[make_batch(cfg, s, PixelCodec()).context] > 0).any()
    )
    b = make_batch(cfg, step, PixelCodec())
    with torch.no_grad():
        args = (transformer, encoder, b.latents, b.sigmas, b.noise, b.captions, "hybrid", 0, 0.5, b.frames)
        masked = flow_matching_loss(*args, context=b.context)
        unmasked = flow_matching_loss(*args)  # sigma > 0 counts: the noised context frames too
        # Only the generated frames' error: the same loss with the context frames' target replaced
        # by the prediction would not change; checked here as masked != unmasked and finite.
    assert torch.isfinite(masked) and not torch.isclose(masked, unmasked)


def test_own_context_replaces_only_the_context_with_the_models_prediction_deterministically():
    transformer, encoder = build_fresh(0)
    load_weights(transformer, encoder, WEIGHTS_FILE)
    cfg = replace(BASE, self_context=1.0)
    step = _continuation_step(cfg)
    batch = make_batch(cfg, step, PixelCodec())
    a = own_context(transformer, encoder, batch, cfg, step)
    b = own_context(transformer, encoder, batch, cfg, step)
    assert torch.equal(a.latents, b.latents)  # a pure function of (weights, seed, step)
    ctx = batch.context.view(*batch.context.shape[:1], 1, batch.context.shape[1], 1, 1).expand_as(batch.latents)
    assert torch.equal(a.latents[~ctx], batch.latents[~ctx])  # the targets stay the ground truth
    diff = (a.latents[ctx] - batch.latents[ctx]).abs().mean()
    # The shipped model's one-step prediction of the context from sigma 0.2-0.7: its own rendition
    # (not a copy: ragged edges, 4-frame steps) of the same scene (not noise: the clean latents
    # span [-1, 1], so a prediction unrelated to them would be ~0.5-1 off on average).
    assert 1e-3 < diff < 0.15, float(diff)
    assert transformer.training and encoder.training  # modes restored
    assert own_context(transformer, encoder, batch, replace(cfg, self_context=0.0), step) is batch

"""The built-in model's training loss (flow matching with x-prediction) and its held-out error.

Flow matching as in Wan: x_sigma = (1 - sigma) * x0 + sigma * noise, the loss is on the velocity
(noise - x0). Unlike Wan (which predicts the velocity in a VAE's 16-channel latent space), the
built-in model works on raw pixels: one token is 4x8x8x3 = 768 pixel values through a 128-wide
transformer, which cannot reproduce 768-dimensional white noise (a velocity-predicting model
stalls at the predict-nothing loss; docs/builtin-model.md). So it predicts the clean sample and
the velocity is derived from it (x-prediction with a v-loss, as in "Back to Basics: Let
Denoising Generative Models Denoise", Li & He 2025): clean pixels lie on a low-dimensional
manifold a narrow model can represent.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from videogen.models.codec import PixelCodec, uint8_to_video
from videogen.training.scenes import canonical_start, parse_caption, random_scene, render_scene


def flow_matching_loss(transformer: Any, encoder: Any, latents: torch.Tensor, sigmas: torch.Tensor, noise: torch.Tensor,
                       captions: list[str], loss: str = "hybrid", causal_chunk: int = 0, v_floor: float = 0.5,
                       frames: torch.Tensor | None = None, motion_weight: float = 0.0,
                       context: torch.Tensor | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """x-prediction: the transformer predicts the clean latents. `loss="x0"` compares them with
    the true ones; `loss="v"` compares the velocity they imply with the true one (see
    `videogen.sampling.loop.velocity_from_sample`), i.e. the x0 error weighted by 1/sigma^2 (capped at
    1/v_floor^2); "hybrid" is their sum with the x0 term weighted 4.

    `motion_weight` > 0 adds, under the same per-sample weight, the squared error of the
    frame-to-frame change inside each latent frame (the codec's 4 video frames of one token): an
    error shared by all 4 frames (a shape drawn a little off) adds nothing, while drawing the 4
    frames alike where the object moves (4 Hz stutter) is an error on every moving edge in
    every frame step.

    `context` (B, F) bool: clean-context frames (a prefix, the causal variant's clean chunks),
    which carry no loss even when noised (`TrainConfig.context_noise`); default: sigma == 0.
    `positions` (B, F): the latent frames' positions in the clip (an anchor frame's is
    `SINK_POSITION`); default 0..F-1."""
    b, c, f, h, w = latents.shape
    s = sigmas.view(b, 1, f, 1, 1)
    noisy = (1 - s) * latents + s * noise
    text = encoder.encode_train(captions)
    x0 = predict_clean(transformer, encoder, noisy, sigmas, text, frames, causal_chunk, positions)
    generated = ~context if context is not None else sigmas > 0
    weight = generated.float().view(b, 1, f, 1, 1)  # clean-context frames carry no loss
    # The velocity error is the x0 error / sigma (x_sigma - sigma v = x0 exactly), so the v-loss is
    # the x0 loss weighted 1/sigma^2; only that weight is capped, at 1/v_floor^2 (flooring sigma
    # inside the implied velocity instead would move the target below the floor, not just weight it).
    v_weight = 1 / s.clamp_min(v_floor) ** 2
    if loss == "v":
        per_sample = v_weight
    elif loss == "x0":
        per_sample = torch.ones_like(v_weight)
    elif loss == "hybrid":
        per_sample = v_weight + 4
    else:
        raise ValueError(f"loss must be 'x0', 'v' or 'hybrid', got {loss!r}")
    err = x0 - latents
    err2 = err**2
    if motion_weight:
        err2 = err2 + motion_weight * frame_step_err2(err)
    err2 = per_sample * err2
    return (err2 * weight).sum() / (weight.sum() * c * h * w).clamp_min(1)


def predict_clean(transformer: Any, encoder: Any, noisy: torch.Tensor, sigmas: torch.Tensor, text: torch.Tensor,
                  frames: torch.Tensor | None, causal_chunk: int = 0,
                  positions: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """The transformer's clean-sample prediction for `noisy` (B, C, F, h, w) at per-latent-frame
    noise levels `sigmas` (B, F), with the built-in model's conditioning channels (`frames`: the
    clock, `positions`: the positions in the clip)."""
    h, w = noisy.shape[3:]
    tokens_per_frame = (h // 2) * (w // 2)
    timestep = (sigmas * 1000).repeat_interleave(tokens_per_frame, dim=1)  # (B, N) per-token timesteps
    inputs = encoder.condition(noisy, positions, text, frames)
    if causal_chunk:
        from videogen.sampling.forward import block_causal_forward

        return block_causal_forward(transformer, inputs, timestep, text, causal_chunk)
    return transformer(hidden_states=inputs, timestep=timestep, encoder_hidden_states=text, return_dict=False)[0]


def layout_gate_loss(encoder: Any, captions: list[str]) -> torch.Tensor:
    """Cross-entropy of the `MotionLayout` slots' gates against the moving frames of the caption's
    objects' motions (`FRAME_MOTIONS`), averaged over the non-empty captions (0 when there are
    none). A one-object caption's slots both take its object's frame; a two-object caption's
    slots take its objects' frames in whichever order costs less, since which slot pools which
    object is the model's to learn (the shipped weights pool the second object into the first
    slot). With the frames held at the scenes' own motions (`MotionLayout.lock`), this makes each
    slot's channels one exact moving frame rather than a blend of frames whose phases part within
    seconds. A bouncing object takes the still frame, or the blank gate where the layout has one
    (`MotionLayout.add_blank`)."""
    from videogen.models.builtin import BLANK_GATE, FRAME_MOTIONS

    def gate(motion: str) -> int:
        if motion == "bouncing":
            return BLANK_GATE if encoder.layout.has_blank else FRAME_MOTIONS.index("still")
        return FRAME_MOTIONS.index(motion)

    named = [(b, c) for b, c in enumerate(captions) if c]
    if not named:
        return torch.zeros(())
    logp = torch.log_softmax(encoder.layout.gate_logits(encoder.encode_train(captions)), dim=-1)  # (B, S, J)
    terms = []
    for b, caption in named:
        frames = [gate(o.motion) for o in parse_caption(caption).objects]
        orders = [frames * logp.shape[1]] if len(frames) == 1 else [frames, frames[::-1]]
        costs = torch.stack([-logp[b, torch.arange(len(o)), torch.tensor(o)].mean() for o in orders])
        terms.append(costs.min())
    return torch.stack(terms).mean()


def frame_step_err2(err: torch.Tensor) -> torch.Tensor:
    """Per latent channel, the squared error of the change between consecutive video frames of
    one latent frame (`PixelCodec` layout: channels are (3, tf, s, s)); the first frame of each
    group has no earlier frame in its token and gets 0. Same shape as `err`."""
    b, c, f, h, w = err.shape
    tf = PixelCodec().temporal_factor
    e = err.view(b, 3, tf, c // (3 * tf), f, h, w)
    step = torch.cat([torch.zeros_like(e[:, :, :1]), e[:, :, 1:] - e[:, :, :-1]], dim=2)
    return (step**2).view(b, c, f, h, w)


VALIDATION_SEED = 515151  # disjoint from training's (seed * 1_000_003 + step) and the evaluator's


@torch.no_grad()
def validation_error(transformer: Any, encoder: Any, *, sigmas=(0.3, 0.6, 0.9, 1.0), clips: int = 16,
                     latent_frames: int = 9, size: int = 64) -> dict[str, dict[float, float]]:  # fmt: skip
    """x0 error (mean squared, in [-1, 1] pixel units) of fresh clips of held-out scenes at each
    noise level, for colour/shape pairs seen in training and the never-shown `HELD_OUT` pairs:
    {"seen": {sigma: error}, "unseen": {...}}. The same clips and noise every call, so two models
    (or two points of a run) compare on equal terms; cheaper and less noisy than adherence, which
    needs a rendered, detected video per prompt. High noise levels measure the layout a caption
    implies, low ones the object's shape and edges."""
    codec = PixelCodec(4, 4)
    num_frames = 4 * (latent_frames - 1) + 1
    was_training = transformer.training, encoder.training
    transformer.eval()
    encoder.eval()
    out: dict[str, dict[float, float]] = {}
    for group in ("seen", "unseen"):
        rng = random.Random(VALIDATION_SEED + (group == "unseen"))
        held_out = "only" if group == "unseen" else "exclude"
        scenes = [canonical_start(random_scene(rng, held_out=held_out, max_objects=1), rng) for _ in range(clips)]
        latents = codec.encode(torch.cat([uint8_to_video(render_scene(s, num_frames, size)) for s in scenes]))
        noise = torch.randn(latents.shape, generator=torch.Generator().manual_seed(VALIDATION_SEED))
        captions = [s.caption() for s in scenes]
        out[group] = {}
        for sigma in sigmas:
            err = 0.0
            for i in range(0, clips, 4):  # 4 clips (2,304 tokens) a forward pass
                sl = slice(i, i + 4)
                sig = torch.full((latents[sl].shape[0], latent_frames), float(sigma))
                loss = flow_matching_loss(transformer, encoder, latents[sl], sig, noise[sl], captions[sl], "x0")
                err += loss.item() * sig.shape[0]
            out[group][float(sigma)] = err / clips
    transformer.train(was_training[0])
    encoder.train(was_training[1])
    return out

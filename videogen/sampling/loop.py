"""The denoising loop for one segment, with optional clean latent prefix (continuation).

Follows diffusers' `WanPipeline` (flow-matching scheduler from the model folder, classifier-free
guidance, Wan 2.2's two-expert switch at `boundary_ratio`), with two differences:

* Continuation: the first P latent frames are the previous segment's last P latent frames, held
  clean: their tokens get timestep 0 through Wan's per-token timesteps (a (B, N) timestep tensor,
  the path Wan 2.2 TI2V and SkyReels-V2's diffusion forcing use) and are reset to the clean values
  after every scheduler step, so only the rest is denoised.
* It is a generator: it yields a `StepProgress` after every step and returns the latents. The
  caller can stop it between any two steps (closing the generator, or `cancel()` returning True),
  which is how a cancelled job stops its GPU work within one step. Every step also checks that
  the latents are finite: NaN/Inf raises `NonFiniteLatents` instead of producing garbage.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

import torch

from videogen.errors import NonFiniteLatents, RenderCancelled


@dataclass(frozen=True)
class StepProgress:
    segment: int
    step: int  # 1-based: steps done in this segment
    steps: int


def velocity_from_sample(x: torch.Tensor, x0: torch.Tensor, sigma: float, floor: float = 1e-4) -> torch.Tensor:
    """The flow velocity (noise - x0) implied by a clean-sample prediction `x0` at noise level
    `sigma`: x = (1 - sigma) x0 + sigma noise  =>  v = (x - x0) / sigma. Sampling uses the exact
    sigma (floored only against division by zero) so that an Euler step lands on the predicted
    sample. Training does not go through here: its v-loss is the x0 error weighted 1/sigma^2
    (`videogen.training.train.flow_matching_loss`)."""
    return (x - x0) / max(sigma, floor)


def guided_velocity(model, pred: torch.Tensor, latents: torch.Tensor, sigma: float, guidance: float | None) -> torch.Tensor:
    """The velocity the scheduler steps with, from the transformer's output for a (cond[, uncond])
    batch: classifier-free guidance when `guidance` is given, and for x-prediction models (the
    built-in ones) the velocity implied by the predicted clean sample at noise level `sigma`."""
    pred = pred.float()
    if guidance is not None:
        pred_cond, pred_uncond = pred.chunk(2)
        pred = pred_uncond + guidance * (pred_cond - pred_uncond)
    if model.prediction == "sample":
        pred = velocity_from_sample(latents, pred, sigma)
    return pred


def segment_noise(shape: tuple[int, ...], seed: int, segment: int) -> torch.Tensor:
    """Noise for one segment, drawn on the CPU in fp32 so that it is the same on every device and
    depends only on (seed, segment): a resumed render redraws exactly what it would have."""
    g = torch.Generator(device="cpu").manual_seed((seed * 1_000_003 + segment) % (2**63 - 1))
    return torch.randn(shape, generator=g, dtype=torch.float32)


def denoise_segment(
    model,
    *,
    cond: torch.Tensor,  # (1, L, D) prompt embeddings
    uncond: torch.Tensor | None,  # (1, L, D) negative-prompt embeddings; None = no guidance
    latent_frames: int,
    latent_size: tuple[int, int],  # (h, w) in latent pixels
    prefix: torch.Tensor | None,  # (1, C, P, h, w) clean latents, or None for a fresh segment
    steps: int,
    guidance: float,
    flow_shift: float | None,
    seed: int,
    segment: int = 0,
    cancel: Callable[[], bool] | None = None,
    time: float = 0.0,  # the first latent frame's time in its shot, in latent frames (`segment_times`)
) -> Generator[StepProgress, None, torch.Tensor]:
    device, dtype = model.device, model.dtype
    channels = model.codec.latent_channels
    h, w = latent_size
    latents = segment_noise((1, channels, latent_frames, h, w), seed, segment).to(device)
    n_prefix = 0 if prefix is None else prefix.shape[2]
    if prefix is not None:
        if prefix.shape[1] != channels or tuple(prefix.shape[3:]) != (h, w) or n_prefix >= latent_frames:
            raise ValueError(f"prefix latents {tuple(prefix.shape)} do not fit a segment of {latent_frames}x{h}x{w}")
        prefix = prefix.to(device, torch.float32)
        latents[:, :, :n_prefix] = prefix

    absolute = [time + i for i in range(latent_frames)]
    pt, ph, pw = model.patch_size
    grid = (latent_frames // pt, h // ph, w // pw)  # post-patch token grid
    tokens_per_frame = grid[1] * grid[2]
    context = model.extras.get("attention_context")
    if context is not None:
        context.grid, context.num_steps = grid, steps

    scheduler = model.make_scheduler(flow_shift)
    scheduler.set_timesteps(steps, device=device)
    timesteps = scheduler.timesteps
    boundary = None
    if model.transformer_2 is not None and model.boundary_ratio is not None:
        boundary = model.boundary_ratio * scheduler.config.num_train_timesteps
    use_cfg = uncond is not None and guidance > 1.0
    embeds = torch.cat([cond, uncond]) if use_cfg else cond
    embeds = embeds.to(device, dtype)
    batch = embeds.shape[0]
    per_token = n_prefix > 0 or model.expand_timesteps

    for i, t in enumerate(timesteps):
        if cancel is not None and cancel():
            raise RenderCancelled(f"cancelled before step {i + 1} of segment {segment}")
        if context is not None:
            context.step = i
        transformer = model.transformer if boundary is None or t >= boundary else model.transformer_2
        x = latents.to(dtype).expand(batch, -1, -1, -1, -1)
        if per_token:
            timestep = torch.full((batch, grid[0] * tokens_per_frame), float(t), device=device)
            timestep[:, : (n_prefix // pt) * tokens_per_frame] = 0.0  # prefix tokens are clean
        else:
            timestep = t.expand(batch)
        with torch.no_grad():
            pred = transformer(hidden_states=model.transformer_input(x, embeds, None, absolute), timestep=timestep, encoder_hidden_states=embeds,
                               return_dict=False)[0]  # fmt: skip
        pred = guided_velocity(model, pred, latents, float(t) / scheduler.config.num_train_timesteps, guidance if use_cfg else None)
        latents = scheduler.step(pred, t, latents, return_dict=False)[0]
        if prefix is not None:
            latents[:, :, :n_prefix] = prefix
        if not torch.isfinite(latents).all():
            raise NonFiniteLatents(
                f"segment {segment}: latents became NaN/Inf at denoising step {i + 1} of {steps}; "
                f"try --dtype float32 or fewer --guidance"
            )
        yield StepProgress(segment, i + 1, steps)
    return latents

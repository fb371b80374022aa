"""The denoising loop, once, for a segment and for a stream chunk.

Follows diffusers' `WanPipeline` (flow-matching scheduler from the model folder, classifier-free
guidance, Wan 2.2's two-expert switch at `boundary_ratio` with the low-noise expert's own guidance
scale, `guidance_scale_2`), with these additions:

* The transformer call is passed in (`videogen.sampling.forward.TransformerForward`): a whole
  segment with per-token timesteps, or one stream chunk through the KV cache.
* Continuation: a clean latent prefix (the previous segment's last P latent frames) is held: its
  tokens get timestep 0 (Wan's per-token timesteps, the path Wan 2.2 TI2V and SkyReels-V2's
  diffusion forcing use) and it is reset to the clean values after every scheduler step, so only
  the rest is denoised. For models never trained on a clean prefix (Wan 2.1 T2V) the training-free
  "renoise" continuation instead re-noises the prefix to every step's noise level and denoises the
  whole latent at one timestep (RePaint, Lugmayr et al. 2022; SDEdit): see `renoised`.
* It is a generator: it yields a `StepProgress` after every step and returns the latents. The
  caller can stop it between any two steps (closing the generator, or `cancel()` returning True);
  `cancel()` is also asked before every transformer block (`videogen.sampling.interrupt`), which is
  how a cancelled job stops its GPU work within one block. Every step also checks that the
  latents are finite: NaN/Inf raises `NonFiniteLatents` instead of producing garbage.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from videogen.config.geometry import SINK_POSITION
from videogen.config.step_cache import StepCacheConfig
from videogen.errors import NonFiniteLatents, RenderCancelled
from videogen.sampling.cache import StepCache
from videogen.sampling.forward import SegmentForward, TransformerForward
from videogen.sampling.interrupt import stop_between_blocks

Result = TypeVar("Result")


@dataclass(frozen=True)
class StepProgress:
    segment: int  # the segment (or stream chunk) being denoised
    step: int  # 1-based: steps done in this segment
    steps: int
    # The transformer ran for this step. False where the step cache forecast its output or reused
    # its blocks' residual (`videogen.sampling.cache`): such a step costs a small share of one that
    # ran. The health gate counts these evaluations, not steps, as what an attempt cost.
    evaluated: bool = True


@dataclass(frozen=True)
class Preview:
    """Yielded by `denoise` after step `step`, the first whose noise level is at or below one of
    the request's `preview_sigmas` (one per step, never after the last step): the clean latents
    the model predicted from that step's input (x0 = x - sigma v), prefix included. The health gate
    judges an attempt on them before running it further (`videogen.sampling.health.run_gate`)."""

    step: int
    latents: torch.Tensor  # (1, C, F, h, w) fp32
    last: bool = True  # the request's last look (the gate decodes it fully; earlier ones at a glance)


@dataclass(frozen=True)
class DenoiseRequest:
    """One run of the denoising loop."""

    latents: torch.Tensor  # (1, C, F, h, w) fp32 on the model's device: noise, clean prefix in place
    forward: TransformerForward
    steps: int
    guidance: float | None  # classifier-free guidance scale; None: the forward's batch is cond only
    flow_shift: float | None  # None: the scheduler's own
    unit: str = "segment"  # what is denoised, for progress and errors: "segment" | "chunk"
    index: int = 0  # its index (noise stream, progress, errors)
    prefix: torch.Tensor | None = None  # (1, C, P, h, w) fp32 clean latents re-imposed after every step
    cancel: Callable[[], bool] | None = None  # asked before every step and every transformer block: keep it cheap
    # (1, C, P, h, w) fp32: the "renoise" continuation's noise; the prefix is then re-imposed at each
    # step's noise level (`renoised`) instead of clean. None: held clean.
    prefix_noise: torch.Tensor | None = None
    # Two-expert models: the low-noise expert's guidance scale (diffusers' `guidance_scale_2`), used
    # below the boundary when `guidance` is given. None: `guidance` throughout.
    guidance_2: float | None = None
    cache: StepCacheConfig | None = None  # step caching (`videogen.sampling.cache`); None: every step computed
    # Yield a `Preview` at the first step at or below each of these noise levels (falling).
    preview_sigmas: tuple[float, ...] = ()


def velocity_from_sample(x: torch.Tensor, x0: torch.Tensor, sigma: float, floor: float = 1e-4) -> torch.Tensor:
    """The flow velocity (noise - x0) implied by a clean-sample prediction `x0` at noise level
    `sigma`: x = (1 - sigma) x0 + sigma noise  =>  v = (x - x0) / sigma. Sampling uses the exact
    sigma (floored only against division by zero) so that an Euler step lands on the predicted
    sample. Training does not go through here: its v-loss is the x0 error weighted 1/sigma^2
    (`videogen.training.loss.flow_matching_loss`)."""
    return (x - x0) / max(sigma, floor)


def guided_velocity(
    model: Any, pred: torch.Tensor, latents: torch.Tensor, sigma: float, guidance: float | None
) -> torch.Tensor:
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


def renoised(prefix: torch.Tensor, noise: torch.Tensor, sigma: float) -> torch.Tensor:
    """The clean `prefix` on the flow-matching path at noise level `sigma`:
    x_sigma = (1 - sigma) prefix + sigma noise; `prefix` itself (exactly) at sigma 0."""
    return prefix if sigma == 0 else (1 - sigma) * prefix + sigma * noise


def segment_noise(shape: tuple[int, ...], seed: int, segment: int) -> torch.Tensor:
    """Noise for one segment (or stream chunk), drawn on the CPU in fp32 so that it is the same on
    every device and depends only on (seed, segment): a resumed render redraws exactly what it would have."""
    g = torch.Generator(device="cpu").manual_seed((seed * 1_000_003 + segment) % (2**63 - 1))
    return torch.randn(shape, generator=g, dtype=torch.float32)


def denoise(model: Any, request: DenoiseRequest) -> Generator[StepProgress | Preview, None, torch.Tensor]:
    """Run `request.steps` scheduler steps from `request.latents`; yields after every step (and a
    `Preview` at `request.preview_sigmas`) and returns the denoised latents (1, C, F, h, w) fp32."""
    scheduler = model.make_scheduler(request.flow_shift)
    scheduler.set_timesteps(request.steps, device=model.device)
    n_train = scheduler.config.num_train_timesteps
    boundary = None  # Wan 2.2 A14B: the high-noise expert above it, the low-noise one below
    if model.transformer_2 is not None and model.boundary_ratio is not None:
        boundary = model.boundary_ratio * n_train
    latents, prefix, prefix_noise = request.latents, request.prefix, request.prefix_noise
    label = f"{request.unit} {request.index}"
    step_cache = StepCache(request.cache or StepCacheConfig(), request.steps)  # this call's alone
    looks = preview_steps(scheduler, request.preview_sigmas, request.steps)
    if prefix is not None and prefix_noise is not None:  # renoise: the prefix starts at the first step's level
        sigmas = [float(s) for s in scheduler.sigmas]  # (steps + 1,): each step's noise level, then 0
        latents[:, :, : prefix.shape[2]] = renoised(prefix, prefix_noise, sigmas[0])
    for i, t in enumerate(scheduler.timesteps):
        if request.cancel is not None and request.cancel():
            raise RenderCancelled(f"cancelled at step {i + 1} of {label}")
        low_noise = boundary is not None and t < boundary  # as WanPipeline: the high-noise expert at t >= boundary
        transformer = model.transformer_2 if low_noise else model.transformer
        guidance = request.guidance
        if low_noise and guidance is not None and request.guidance_2 is not None:
            guidance = request.guidance_2
        sigma = float(t) / n_train
        skipped = step_cache.skipped
        pred = step_cache.forecast(transformer, i, sigma)  # None unless `taylor` forecasts this step
        if pred is None:
            with (
                stop_between_blocks(transformer, request.cancel, f"step {i + 1} of {label}"),
                step_cache.step(transformer, i),
            ):
                pred = request.forward(transformer, latents.to(model.dtype), t, i)
            step_cache.observe(sigma, pred)
        velocity = guided_velocity(model, pred, latents, sigma, guidance)
        preview = None
        if i in looks:
            preview = latents - sigma * velocity
        latents = scheduler.step(velocity, t, latents, return_dict=False)[0]
        if prefix is not None:
            held = prefix  # the last step (and "clean" at every step): the clean prefix, exactly
            if prefix_noise is not None and i + 1 < request.steps:  # renoise: at the next step's level
                held = renoised(prefix, prefix_noise, sigmas[i + 1])
            latents[:, :, : prefix.shape[2]] = held
        if not torch.isfinite(latents).all():
            raise NonFiniteLatents(
                f"{label}: latents became NaN/Inf at denoising step {i + 1} of {request.steps}; "
                f"try --dtype float32 or fewer --guidance"
            )
        yield StepProgress(request.index, i + 1, request.steps, evaluated=step_cache.skipped == skipped)
        if preview is not None:
            if prefix is not None:
                preview[:, :, : prefix.shape[2]] = prefix
            yield Preview(i + 1, preview, last=i == looks[-1])
    return latents


def preview_steps(scheduler: Any, levels: tuple[float, ...], steps: int) -> list[int]:
    """The (0-based) steps after which `denoise` yields a `Preview` for noise `levels`: for each,
    the first step at or below it, never the last step; a step two levels share, once."""
    sigmas = [float(t) / scheduler.config.num_train_timesteps for t in scheduler.timesteps]
    at = {next((i for i, s in enumerate(sigmas) if s <= level), steps) for level in levels}
    return sorted(i for i in at if i + 1 < steps)


def run_to_end(steps: Generator[Any, None, Result]) -> Result:
    """Drive a denoising generator (or a gate over one) to its end, ignoring its events; its result."""
    return run_counting(steps)[0]


def run_counting(steps: Generator[Any, None, Result]) -> tuple[Result, int]:
    """`run_to_end`, and the transformer evaluations its steps ran (`StepProgress.evaluated`)."""
    evals = 0
    while True:
        try:
            event = next(steps)
        except StopIteration as stop:
            return stop.value, evals
        evals += isinstance(event, StepProgress) and event.evaluated


@dataclass(frozen=True)
class SegmentAnchor:
    """A clean frame of the shot's first segment that a continuing segment sees in place of its
    prefix's first latent frame (a preset's `anchor_frame`): the object's true size and shape,
    which a chain's prefix loses by compounding its own errors. The frame is encoded as a clip's
    first latent frame (one frame, as the built-in model is trained on it: `anchor_latent`)."""

    latent: torch.Tensor  # (1, C, 1, h, w)
    time: float  # its time in the shot, in latent frames (the moving frames' clock)
    prompt: str  # the prompt it was drawn under: a segment with another prompt is not anchored on it


def anchor_to_dict(anchor: SegmentAnchor | None) -> dict[str, Any] | None:
    """`anchor` as plain values (checkpoints, render tails)."""
    return None if anchor is None else {"latent": anchor.latent, "time": anchor.time, "prompt": anchor.prompt}


def anchor_from_dict(raw: dict[str, Any] | None) -> SegmentAnchor | None:
    return None if raw is None else SegmentAnchor(raw["latent"], float(raw["time"]), str(raw["prompt"]))


def anchor_latent(codec: Any, latents: torch.Tensor, frame: int) -> torch.Tensor:
    """(1, C, 1, h, w): latent frame `frame` of `latents` as its last video frame alone, encoded
    as a clip's first latent frame."""
    return codec.encode(codec.decode(latents[:, :, frame : frame + 1]))


def denoise_segment(
    model: Any,
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
    noise: torch.Tensor | None = None,  # a re-sampling's noise (`videogen.sampling.health.attempt_noise`)
    cache: StepCacheConfig | None = None,  # step caching (`videogen.sampling.cache`); None: off
    context_noise: float = 0.0,  # the handed-over prefix is held at this noise level (0: clean)
    continuation: str = "clean",  # "clean": the prefix at timestep 0; "renoise": re-noised every step (`renoised`)
    guidance_2: float | None = None,  # two-expert models: the low-noise expert's guidance; None: `guidance`
    anchor: SegmentAnchor | None = None,  # a frame of the shot's first segment in place of the prefix's first
    preview_sigmas: tuple[float, ...] = (),  # yield a `Preview` at each of these noise levels (the health gate's)
) -> Generator[StepProgress | Preview, None, torch.Tensor]:
    """Denoise one segment of `latent_frames` from its (seed, segment) noise (see the module docstring).

    `anchor` (a continuation with a prefix of 2 or more latent frames, a model trained with
    anchors): the model sees the anchor's latent frame, at `SINK_POSITION` and at its own time, in
    place of the prefix's first latent frame; the returned latents hold the clean prefix."""
    channels = model.codec.latent_channels
    h, w = latent_size
    if noise is None:
        noise = segment_noise((1, channels, latent_frames, h, w), seed, segment)
    latents = noise.to(model.device)
    n_prefix = 0 if prefix is None else prefix.shape[2]
    if anchor is not None and (n_prefix < 2 or continuation == "renoise"):
        raise ValueError("an anchor frame takes the place of a clean prefix's first latent frame: "
                         f"it needs a prefix of >= 2 latent frames held clean, got {n_prefix} ({continuation})")  # fmt: skip
    prefix_noise = None
    if prefix is not None:
        if prefix.shape[1] != channels or tuple(prefix.shape[3:]) != (h, w) or n_prefix >= latent_frames:
            raise ValueError(f"prefix latents {tuple(prefix.shape)} do not fit a segment of {latent_frames}x{h}x{w}")
        prefix = clean_prefix = prefix.to(model.device, torch.float32)
        if continuation == "renoise":
            # Training-free continuation: the prefix region is re-noised with the segment's own noise
            # there (deterministic; a re-sampling's noise re-draws it too), so the model sees one
            # timestep everywhere, as in its training, and the prefix steers the rest step by step.
            prefix_noise = latents[:, :, :n_prefix].clone()
        elif context_noise > 0:
            # Noise-augmented context: the model sees its own previous output a little blurred by
            # noise (the segment's own noise stream, so it stays deterministic) and at that noise
            # level, so it trusts the prefix's layout but not its pixel-level artefacts, which a
            # chain of segments would otherwise copy and compound (docs/builtin-model.md).
            prefix = (1 - context_noise) * prefix + context_noise * latents[:, :, :n_prefix]
        if anchor is not None:
            prefix = torch.cat([anchor.latent.to(prefix), prefix[:, :, 1:]], dim=2)
        if prefix_noise is None:
            latents[:, :, :n_prefix] = prefix
    use_cfg = uncond is not None and guidance > 1.0
    embeds = (torch.cat([cond, uncond]) if use_cfg and uncond is not None else cond).to(model.device, model.dtype)
    pt, ph, pw = model.patch_size
    held = n_prefix if prefix_noise is None else 0  # renoise: no per-token timesteps, the prefix is noised too
    absolute: list[float] = [time + i for i in range(latent_frames)]
    positions: list[int] | None = None
    if anchor is not None:
        absolute[0], positions = anchor.time, [SINK_POSITION, *range(1, latent_frames)]
    forward = SegmentForward(model, embeds, grid=(latent_frames // pt, h // ph, w // pw), prefix_frames=held,
                             num_steps=steps, absolute=absolute, positions=positions,
                             prefix_timestep=context_noise * 1000 if prefix is not None else 0.0)  # fmt: skip
    request = DenoiseRequest(
        latents,
        forward,
        steps,
        guidance if use_cfg else None,
        flow_shift,
        "segment",
        segment,
        prefix,
        cancel,
        prefix_noise=prefix_noise,
        cache=cache,
        guidance_2=guidance_2 if use_cfg else None,
        preview_sigmas=preview_sigmas,
    )
    restore = prefix is not None and (context_noise > 0 or anchor is not None)
    steps_run = denoise(model, request)
    try:
        while True:
            try:
                event = next(steps_run)
            except StopIteration as stop:
                out = stop.value
                break
            if restore and isinstance(event, Preview):  # judged as the kept frames will show it
                event.latents[:, :, :n_prefix] = clean_prefix
            yield event
    finally:
        steps_run.close()
    if restore:
        out[:, :, :n_prefix] = clean_prefix  # the prefix is the previous segment's frames, exactly
    return out

"""Streaming generation (experimental): an autoregressive-diffusion hybrid that emits frames as
it goes, for as long as it is asked to.

The video is made chunk by chunk (C latent frames each). A chunk starts as noise and is denoised
in S steps by a block-causal model (`videogen.attention.causal`) whose self-attention reads the keys and
values of earlier chunks from a `KVCache`; then one clean-context pass (the denoised chunk at
timestep 0) writes the chunk's own keys and values into the cache, and the chunk is decoded and
handed to the caller. This is CausVid / Self-Forcing's inference loop; the cache keeps sink frames
from the start plus a window of recent frames (LongLive), so memory is fixed and RoPE positions
stay within the trained range however long the stream runs.

A prompt switch (`StreamControl.switch_prompt`, or a scheduled `StreamSpec.switches`) takes
effect at the next chunk boundary: the cache is rebuilt from the cached frames' clean latents
under the new prompt (LongLive's re-cache), so the new prompt steers the next chunk at once
instead of fighting cross-attention memories of the old one, and the picture does not jump.

All state lives in one `StreamState`; `stream()` is a generator of `StreamChunk`s, so the CLI,
the API worker and the tests consume it alike.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from videogen.attention.causal import KVCache, chunk_frames_of, chunk_index, install_causal, new_cache, plan_chunk
from videogen.errors import InvalidOption, NonFiniteLatents, RenderCancelled
from videogen.sampling.loop import guided_velocity, segment_noise
from videogen.config.spec import DEFAULT_STREAM_MODEL, StreamSpec  # noqa: F401 (torch-free: the API validates with it)


# Latent frames (16 s at 16 fps) a stream's clock may run past its base before `rebase_clock`;
# the built-in causal model was trained on clocks up to ~110 latent frames.
CLOCK_PERIOD = 64


@dataclass(frozen=True)
class StreamChunk:
    index: int
    frames: np.ndarray  # (T, H, W, 3) uint8, new frames only
    first_frame: int  # stream index of frames[0]
    prompt: str
    fps: float

    @property
    def end_seconds(self) -> float:
        return (self.first_frame + len(self.frames)) / self.fps


class StreamControl:
    """Thread-safe handle on a running stream: switch its prompt or stop it. `cancel_check`, if
    given, is also asked before every denoising step (a job's "was I cancelled?" query), so a
    cancel stops the work within one step, as for `render(cancel=...)`."""

    def __init__(self, cancel_check: Callable[[], bool] | None = None) -> None:
        self._lock = threading.Lock()
        self._prompt: str | None = None
        self._cancel = False
        self._check = cancel_check

    def switch_prompt(self, prompt: str) -> None:
        if not prompt or not prompt.strip():
            raise InvalidOption("prompt", prompt, "must not be empty")
        with self._lock:
            self._prompt = prompt

    def cancel(self) -> None:
        with self._lock:
            self._cancel = True

    @property
    def cancelled(self) -> bool:
        with self._lock:
            if self._cancel:
                return True
        if self._check is not None and self._check():
            self.cancel()
            return True
        return False

    def take_prompt(self) -> str | None:
        with self._lock:
            prompt, self._prompt = self._prompt, None
            return prompt


@dataclass
class StreamState:
    """Everything a stream carries from one chunk to the next."""

    cache: KVCache
    prompt: str
    embeds: torch.Tensor  # (B, L, D): cond[, uncond]
    chunk: int = 0  # chunks made
    latent_frames: int = 0  # latent frames made
    frames: int = 0  # pixel frames emitted
    last_latent: torch.Tensor | None = None  # (1, C, 1, h, w): the previous chunk's last latent frame
    recaches: int = 0  # prompt switches
    rebases: int = 0  # clock re-bases (`rebase_clock`)


def stream(spec: StreamSpec, model=None, *, control: StreamControl | None = None) -> Iterator[StreamChunk]:
    """Generate `spec` chunk by chunk, yielding each chunk's frames as soon as they are decoded."""
    from videogen.models.codec import video_to_uint8
    from videogen.models.loader import load_model

    spec.validate()
    if model is None:
        model = load_model(spec.model, device=spec.device, dtype=spec.dtype, attention="dense", checkpoint=spec.checkpoint)
    preset = model.preset
    width, height = spec.size or preset.size
    fps = spec.fps or preset.fps
    steps = spec.steps or preset.steps
    guidance = preset.guidance if spec.guidance is None else spec.guidance
    shift = preset.flow_shift if spec.flow_shift is None else spec.flow_shift
    mw, mh = model.size_multiple
    if width % mw or height % mh:
        raise InvalidOption("size", f"{width}x{height}", f"width must be a multiple of {mw} and height of {mh}")
    codec = model.codec
    pt, ph, pw = model.patch_size
    for name in ("chunk_frames", "first_chunk_frames"):
        if getattr(spec, name) % pt:
            raise InvalidOption(name, getattr(spec, name), f"must be a multiple of the temporal patch size {pt}")
    h, w = height // codec.spatial_factor, width // codec.spatial_factor
    grid_hw = (h // ph, w // pw)
    total = None if spec.seconds is None else max(1, round(spec.seconds * fps))

    transformer = model.transformer
    ctx = install_causal(transformer)
    use_cfg = guidance > 1.0
    encode = model.prompt_encoder.encode
    uncond = encode([spec.negative_prompt]) if use_cfg else None

    def embeds_for(prompt: str) -> torch.Tensor:
        e = torch.cat([encode([prompt]), uncond]) if use_cfg else encode([prompt])
        return e.to(model.device, model.dtype)

    state = StreamState(
        cache=new_cache(transformer, batch=2 if use_cfg else 1, tokens_per_frame=grid_hw[0] * grid_hw[1],
                        sink=spec.sink_frames, window=spec.window_frames,
                        latent_shape=(codec.latent_channels, h, w), dtype=model.dtype, device=model.device),
        prompt=spec.prompt, embeds=embeds_for(spec.prompt),
    )  # fmt: skip
    switches = sorted(spec.switches)
    ctx.tokens_per_frame = grid_hw[0] * grid_hw[1]
    ctx.chunk_frames, ctx.first_chunk_frames = spec.chunk_frames, spec.first_chunk_frames
    ctx.clock_base = 0
    try:
        for index in itertools.count():
            if control is not None and control.cancelled:
                raise RenderCancelled(f"stream cancelled before chunk {index}")
            new_prompt = control.take_prompt() if control is not None else None
            while switches and switches[0][0] * fps <= state.frames:
                new_prompt = switches.pop(0)[1]
            if new_prompt is not None and new_prompt != state.prompt:
                switch_prompt(model, state, ctx, new_prompt, embeds_for(new_prompt), grid_hw)
            rebase_clock(model, state, ctx, chunk_frames_of(state.chunk, spec.chunk_frames, spec.first_chunk_frames)[0], grid_hw)
            latents = _generate_chunk(model, state, ctx, spec, steps, guidance if use_cfg else None, shift,
                                      (h, w), grid_hw, control)  # fmt: skip
            video = codec.decode(latents if state.last_latent is None else torch.cat([state.last_latent, latents], 2))
            frames = video_to_uint8(video if state.last_latent is None else video[:, :, 1:])
            state.last_latent = latents[:, :, -1:].clone()
            if total is not None:
                frames = frames[: total - state.frames]
            chunk = StreamChunk(index, frames, state.frames, state.prompt, fps)
            state.frames += len(frames)
            state.chunk += 1
            yield chunk
            if total is not None and state.frames >= total:
                return
    finally:
        ctx.mode, ctx.plan, ctx.cache, ctx.write, ctx.clock_base = None, None, None, False, 0


def _forward(model, ctx, x: torch.Tensor, t: float, embeds: torch.Tensor) -> torch.Tensor:
    batch = embeds.shape[0]
    pt, ph, pw = model.patch_size
    n = (x.shape[2] // pt) * (x.shape[3] // ph) * (x.shape[4] // pw)
    timestep = torch.full((batch, n), float(t), device=x.device)
    inputs = model.transformer_input(x.expand(batch, -1, -1, -1, -1), embeds, ctx.plan.chunk_positions, ctx.plan.frames)
    with torch.no_grad():
        return model.transformer(hidden_states=inputs, timestep=timestep, encoder_hidden_states=embeds,
                                 return_dict=False)[0]  # fmt: skip


def _write_pass(model, ctx, state: StreamState, latents: torch.Tensor, frames: list[int], grid_hw,
                replan: bool = True) -> None:  # fmt: skip
    """The clean-context pass: `latents` (1, C, n, h, w) at timestep 0 write their K/V for `frames`.
    `replan=False`: `ctx.plan` already holds these frames against this cache (the chunk just denoised)."""
    ctx.mode, ctx.cache = "cache", state.cache
    if replan:
        plan_chunk(ctx, model.transformer, frames, grid_hw)
    ctx.write = True
    try:
        _forward(model, ctx, latents.to(model.dtype), 0.0, state.embeds)
    finally:
        ctx.write = False
    state.cache.commit(frames, latents)


def _generate_chunk(model, state: StreamState, ctx, spec: StreamSpec, steps: int, guidance: float | None,
                    shift: float, hw: tuple[int, int], grid_hw, control) -> torch.Tensor:  # fmt: skip
    transformer = model.transformer
    frames = chunk_frames_of(state.chunk, spec.chunk_frames, spec.first_chunk_frames)
    c = len(frames)
    latents = segment_noise((1, model.codec.latent_channels, c, *hw), spec.seed, state.chunk).to(model.device)
    scheduler = model.make_scheduler(shift)
    scheduler.set_timesteps(steps, device=model.device)
    ctx.mode, ctx.cache = "cache", state.cache
    plan_chunk(ctx, transformer, frames, grid_hw)
    n_train = scheduler.config.num_train_timesteps
    for i, t in enumerate(scheduler.timesteps):
        if control is not None and control.cancelled:
            raise RenderCancelled(f"stream cancelled at step {i + 1} of chunk {state.chunk}")
        pred = _forward(model, ctx, latents.to(model.dtype), float(t), state.embeds)
        velocity = guided_velocity(model, pred, latents, float(t) / n_train, guidance)
        latents = scheduler.step(velocity, t, latents, return_dict=False)[0]
        if not torch.isfinite(latents).all():
            raise NonFiniteLatents(f"chunk {state.chunk}: latents became NaN/Inf at step {i + 1} of {steps}")
    _write_pass(model, ctx, state, latents, frames, grid_hw, replan=False)
    state.latent_frames += c
    return latents


def switch_prompt(model, state: StreamState, ctx, prompt: str, embeds: torch.Tensor, grid_hw) -> None:
    """Rebuild the cache from the cached frames' clean latents under `prompt` (re-cache)."""
    state.prompt, state.embeds = prompt, embeds
    recache(model, state, ctx, grid_hw)
    state.recaches += 1


def rebase_clock(model, state: StreamState, ctx, next_frame: int, grid_hw) -> bool:
    """Keep the clock that time-dependent conditioning sees (the built-in model's moving frames)
    within what the model was trained on: once the next frame is `CLOCK_PERIOD` past the clock's
    base, move the base to the oldest windowed frame (as RoPE positions are re-indexed) and
    re-write the cache on the new clock, so cached frames and new chunks agree. Measured before
    this (2-min stream, builtin-causal): the object faded out ~95 s in, at clock ~380."""
    if model.condition is None or next_frame - ctx.clock_base < CLOCK_PERIOD:
        return False
    window = [f for f in state.cache.cached_frames() if f >= state.cache.sink]
    ctx.clock_base = (min(window) if window else next_frame) - state.cache.sink
    recache(model, state, ctx, grid_hw)
    state.rebases += 1
    return True


def recache(model, state: StreamState, ctx, grid_hw) -> None:
    """Re-write the cache from the cached frames' clean latents under `state.embeds` and the
    current clock: chunk by chunk, oldest first, as they were generated."""
    cache = state.cache
    cached = cache.cached_frames()
    latents = {f: cache.latents[:, cache.slot_for(f)].clone() for f in cached}
    cache.clear()

    def chunk_of(f: int) -> int:
        return chunk_index(f, ctx.chunk_frames, ctx.first_chunk_frames)

    groups: list[list[int]] = []  # consecutive frames of one original chunk
    for f in cached:
        if groups and f == groups[-1][-1] + 1 and chunk_of(f) == chunk_of(groups[-1][0]):
            groups[-1].append(f)
        else:
            groups.append([f])
    for group in groups:
        x = torch.stack([latents[f] for f in group], dim=1).unsqueeze(0).to(model.device)
        _write_pass(model, ctx, state, x, group, grid_hw)


def block_causal_forward(transformer, x: torch.Tensor, timestep: torch.Tensor, embeds: torch.Tensor,
                         chunk_frames: int, first_chunk_frames: int = 1) -> torch.Tensor:  # fmt: skip
    """One forward over a whole sequence with block-causal self-attention (training, and the
    reference the KV-cache path must reproduce). `timestep`: (B, N) per token."""
    ctx = install_causal(transformer)
    _, _, _, hh, ww = x.shape
    _, ph, pw = transformer.config.patch_size
    ctx.mode, ctx.chunk_frames, ctx.first_chunk_frames = "full", chunk_frames, first_chunk_frames
    ctx.tokens_per_frame = (hh // ph) * (ww // pw)
    try:
        return transformer(hidden_states=x, timestep=timestep, encoder_hidden_states=embeds, return_dict=False)[0]
    finally:
        ctx.mode = None



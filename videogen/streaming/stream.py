"""Streaming generation (experimental): an autoregressive-diffusion hybrid that emits frames as
it goes, for as long as it is asked to.

The video is made chunk by chunk (C latent frames each). A chunk starts as noise and is denoised
in S steps (`videogen.sampling.loop.denoise`) by a block-causal model (`videogen.attention.causal`)
whose self-attention reads the keys and values of earlier chunks from a `KVCache`; then one
clean-context pass (the denoised chunk at timestep 0) writes the chunk's own keys and values into
the cache, and the chunk is decoded and handed to the caller. With the health gate on
(`videogen.sampling.health`) the chunk is decoded and judged *before* the write pass commits
it: a failed chunk is denoised again from its next attempt's noise (the cache is only read
meanwhile), and only the kept attempt's K/V enter the cache. This is CausVid / Self-Forcing's
inference loop; the cache keeps sink frames from the start plus a window of recent frames
(LongLive), so memory is fixed and RoPE positions stay within the trained range however long the
stream runs.

A prompt switch (`StreamControl.switch_prompt`, or a scheduled `StreamSpec.switches`) takes
effect at the next chunk boundary, re-writing the cache under the new prompt
(`videogen.streaming.recache`).

All state lives in one `StreamState`; `stream()` is a generator of `StreamChunk`s, so the CLI,
the API worker and the tests consume it alike.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from videogen.attention.causal import chunk_frames_of, new_cache
from videogen.attention.processor import ensure_self_attention
from videogen.config.geometry import geometry_of
from videogen.config.presets import HealthConfig
from videogen.config.resolve import resolve_stream
from videogen.config.spec import DEFAULT_STREAM_MODEL, StreamSpec  # noqa: F401 (torch-free: the API validates with it)
from videogen.errors import RenderCancelled
from videogen.models.lora import load_loras, lora_adapters
from videogen.sampling.forward import CachedChunkForward
from videogen.sampling.health import (
    Sampler,
    Verdict,
    attempt_noise,
    check_segment,
    gate_for,
    retry_guidance,
    retry_spare,
    run_gate,
)
from videogen.sampling.loop import DenoiseRequest, Preview, StepProgress, denoise, run_counting, run_to_end
from videogen.streaming.recache import plan_for, rebase_clock, switch_prompt, write_pass
from videogen.streaming.state import StreamChunk, StreamControl, StreamSettings, StreamState


def stream(spec: StreamSpec, model: Any = None, *, control: StreamControl | None = None) -> Iterator[StreamChunk]:
    """Generate `spec` chunk by chunk, yielding each chunk's frames as soon as they are decoded."""
    from videogen.models.loader import load_model

    spec.validate()
    if model is None:
        model = load_model(
            spec.model, device=spec.device, dtype=spec.dtype, attention="dense", checkpoint=spec.checkpoint
        )
    job = resolve_stream(spec, model.preset, geometry_of(model))  # every default, every check
    load_loras(model, job.loras)  # a LoRA that does not fit the model fails before the first chunk
    _, ph, pw = model.patch_size
    h, w = job.height // model.codec.spatial_factor, job.width // model.codec.spatial_factor
    grid_hw = (h // ph, w // pw)
    fps, total, guidance = job.fps, job.frames, job.guidance

    settings = StreamSettings(steps=job.steps, guidance=guidance if guidance > 1.0 else None, flow_shift=job.flow_shift, seed=spec.seed,
                              chunk_frames=spec.chunk_frames, first_chunk_frames=spec.first_chunk_frames,
                              latent_hw=(h, w), grid_hw=grid_hw)  # fmt: skip
    embed = _prompt_embedder(model, spec.negative_prompt, settings.guidance is not None)
    state = _start(model, spec, settings, embed(spec.prompt))
    if control is not None:
        control.attach(state)
    with lora_adapters(model, job.loras):  # the request's LoRAs for the whole stream; the base model after
        yield from _chunks(model, spec, settings, state, embed, fps, total, control, job.health)


def _prompt_embedder(model: Any, negative_prompt: str, use_cfg: bool) -> Callable[[str], torch.Tensor]:
    """prompt -> its (B, L, D) embeddings batch: cond[, uncond of `negative_prompt`]."""
    encode = model.prompt_encoder.encode
    uncond = encode([negative_prompt]) if use_cfg else None

    def embed(prompt: str) -> torch.Tensor:
        e = torch.cat([encode([prompt]), uncond]) if uncond is not None else encode([prompt])
        return e.to(model.device, model.dtype)

    return embed


def _start(model: Any, spec: StreamSpec, settings: StreamSettings, embeds: torch.Tensor) -> StreamState:
    """A fresh stream's state: an empty KV cache sized for the spec's sink and window."""
    ensure_self_attention(model.transformer)
    h, w = settings.latent_hw
    cache = new_cache(model.transformer, batch=embeds.shape[0], tokens_per_frame=settings.grid_hw[0] * settings.grid_hw[1],
                      sink=spec.sink_frames, window=spec.window_frames, latent_shape=(model.codec.latent_channels, h, w),
                      dtype=model.dtype, device=model.device)  # fmt: skip
    return StreamState(cache=cache, prompt=spec.prompt, embeds=embeds)


def _chunks(model: Any, spec: StreamSpec, settings: StreamSettings, state: StreamState, embed: Callable[[str], torch.Tensor],
            fps: float, total: int | None, control: StreamControl | None,
            health: HealthConfig) -> Iterator[StreamChunk]:  # fmt: skip
    """The stream's chunks, each after any pending prompt switch and clock re-base."""
    switches = sorted(spec.switches)
    cancel = (lambda: control.cancelled) if control is not None else None
    for index in itertools.count():
        if cancel is not None and cancel():
            raise RenderCancelled(f"stream cancelled before chunk {index}")
        new_prompt = control.take_prompt() if control is not None else None
        while switches and switches[0][0] * fps <= state.frames:
            new_prompt = switches.pop(0)[1]
        if new_prompt is not None and new_prompt != state.prompt:
            switch_prompt(model, state, settings, new_prompt, embed(new_prompt))
            state.health_anchor = state.health_previous = state.last_frame = None
            state.failing_run = 0
        rebase_clock(
            model, state, settings, chunk_frames_of(state.chunk, settings.chunk_frames, settings.first_chunk_frames)[0]
        )
        made = generate_chunk(model, state, settings, cancel, health)
        frames = made.frames
        if total is not None:
            frames = frames[: total - state.frames]
        chunk = StreamChunk(index, frames, state.frames, state.prompt, fps, made.attempts, made.failed,
                            made.reasons, made.evals, made.retry_evals)  # fmt: skip
        state.frames += len(frames)
        state.chunk += 1
        yield chunk
        if total is not None and state.frames >= total:
            return


@dataclass(frozen=True)
class MadeChunk:
    """A chunk's kept attempt: its decoded frames and how the health gate judged it."""

    latents: torch.Tensor  # (1, C, n, h, w)
    frames: np.ndarray  # (T, H, W, 3) uint8, new frames only
    attempts: int = 1
    failed: tuple[str, ...] = ()  # checks the kept attempt still fails
    reasons: tuple[tuple[str, ...], ...] = ()  # each attempt's failed checks (gate on)
    evals: int = 0  # transformer evaluations run over all attempts (`GateResult.evals`)
    retry_evals: int = 0  # of which the attempts not kept


def generate_chunk(model: Any, state: StreamState, settings: StreamSettings, cancel: Callable[[], bool] | None,
                   health: HealthConfig | None = None) -> MadeChunk:  # fmt: skip
    """Denoise the stream's next chunk against the cache and decode it; with `health` on, judge it
    and re-generate it from the next attempt's noise until it passes (or keep the best); then
    write the kept attempt's K/V (the only change to the cache)."""
    frames = chunk_frames_of(state.chunk, settings.chunk_frames, settings.first_chunk_frames)
    shape = (1, model.codec.latent_channels, len(frames), *settings.latent_hw)
    plan = plan_for(model, state, settings, frames)

    def sample(attempt: int, previews: tuple[float, ...] = ()) -> Generator[StepProgress | Preview, None, torch.Tensor]:
        noise = attempt_noise(shape, settings.seed, state.chunk, attempt)
        guidance = settings.guidance  # None: unguided (the embeddings hold no negative prompt)
        if guidance is not None and health is not None:
            guidance = retry_guidance(health, guidance, attempt)
        request = DenoiseRequest(noise.to(model.device), CachedChunkForward(model, state.embeds, plan, state.cache), settings.steps,
                                 guidance, settings.flow_shift, unit="chunk", index=state.chunk, cancel=cancel,
                                 preview_sigmas=previews)  # fmt: skip
        return denoise(model, request)

    if health is None or not health.enabled:  # the gate is off: denoise, write, decode, as always
        latents, evals = run_counting(sample(0))
        made = MadeChunk(latents, _decode(model, state, latents), evals=evals)
    else:
        made = _gated(state, health, settings.steps, sample, lambda latents: _decode(model, state, latents),
                      lambda latents: _decode(model, state, latents, glance=True))  # fmt: skip
    write_pass(model, state, settings, made.latents, frames, plan)
    state.latent_frames += len(frames)
    state.last_latent = made.latents[:, :, -1:].clone()
    return made


def _gated(state: StreamState, health: HealthConfig, steps: int, sample: Sampler,
           decode: Callable[[torch.Tensor], np.ndarray], glance: Callable[[torch.Tensor], np.ndarray]) -> MadeChunk:  # fmt: skip
    """Run the health gate over a chunk's attempts (`glance`: the decode its previews are judged
    on); the previous chunk's last frame leads each attempt's frames, so the seam into the chunk
    is judged too."""
    lead = state.last_frame

    def judge(frames: np.ndarray) -> Verdict:
        shown = frames if lead is None else np.concatenate([lead[None], frames])
        return check_segment(shown, 0 if lead is None else 1, state.health_previous, state.health_anchor, health)

    config = gate_for(health, state.failing_run)
    spare = retry_spare(config, steps, state.kept_evals, state.retry_evals)
    result = run_to_end(run_gate(sample, decode, judge, config, spare, glance))
    state.failing_run = state.failing_run + 1 if result.failed else 0
    stats = result.verdicts[result.chosen].stats
    state.health_anchor = state.health_anchor or stats
    state.health_previous = stats
    state.last_frame = result.frames[-1].copy() if len(result.frames) else lead
    state.retries += result.attempts - 1
    state.retry_evals += result.retry_evals
    state.kept_evals += result.evals - result.retry_evals
    return MadeChunk(result.latents, result.frames, result.attempts, result.failed,
                     tuple(v.failed for v in result.verdicts), result.evals, result.retry_evals)  # fmt: skip


def _decode(model: Any, state: StreamState, latents: torch.Tensor, glance: bool = False) -> np.ndarray:
    """A chunk's new frames (T, H, W, 3) uint8 (`glance`: through the codec's cheapest decode, for
    a gate preview). The previous chunk's last latent frame is decoded with it (and its frames
    dropped) so the VAE's temporal context carries across chunks. It changes no state: an attempt
    the gate rejects leaves no trace."""
    from videogen.models.codec import video_to_uint8

    previous = state.last_latent
    both = latents if previous is None else torch.cat([previous, latents], 2)
    video = model.codec.glance(both) if glance else model.codec.decode(both)
    return video_to_uint8(video if previous is None else video[:, :, 1:])

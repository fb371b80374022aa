"""Writing a stream's KV cache: the clean-context pass after each chunk, and re-writing the whole
cache under a new prompt (LongLive's re-cache) or on a re-based clock.

A prompt switch re-writes the cache from the cached frames' clean latents under the new prompt,
so the new prompt steers the next chunk at once instead of fighting cross-attention memories of
the old one, and the picture does not jump.
"""

from __future__ import annotations

from typing import Any

import torch

from videogen.attention.causal import ChunkPlan, chunk_index, plan_chunk
from videogen.sampling.forward import CachedChunkForward
from videogen.streaming.state import StreamSettings, StreamState

# Latent frames (16 s at 16 fps) a stream's clock may run past its base before `rebase_clock`;
# the built-in causal model was trained on clocks up to ~110 latent frames.
CLOCK_PERIOD = 64


def plan_for(model: Any, state: StreamState, settings: StreamSettings, frames: list[int]) -> ChunkPlan:
    """The plan of the chunk holding latent `frames` against the stream's cache and clock."""
    return plan_chunk(state.cache, model.transformer, frames, settings.grid_hw, state.clock_base)


def write_pass(model: Any, state: StreamState, settings: StreamSettings, latents: torch.Tensor, frames: list[int],
               plan: ChunkPlan | None = None) -> None:  # fmt: skip
    """The clean-context pass: `latents` (1, C, n, h, w) at timestep 0 write their K/V for `frames`.
    `plan`: already made for these frames against this cache (the chunk just denoised)."""
    plan = plan if plan is not None else plan_for(model, state, settings, frames)
    forward = CachedChunkForward(model, state.embeds, plan, state.cache, write=True)
    forward(model.transformer, latents.to(model.dtype), torch.zeros(()), 0)
    state.cache.commit(frames, latents)


def switch_prompt(model: Any, state: StreamState, settings: StreamSettings, prompt: str, embeds: torch.Tensor) -> None:
    """Rebuild the cache from the cached frames' clean latents under `prompt` (re-cache)."""
    state.prompt, state.embeds = prompt, embeds
    recache(model, state, settings)
    state.recaches += 1


def rebase_clock(model: Any, state: StreamState, settings: StreamSettings, next_frame: int) -> bool:
    """Keep the clock that time-dependent conditioning sees (the built-in model's moving frames)
    within what the model was trained on: once the next frame is `CLOCK_PERIOD` past the clock's
    base, move the base to the oldest windowed frame (as RoPE positions are re-indexed) and
    re-write the cache on the new clock, so cached frames and new chunks agree. Without it a long
    stream's object fades out once the clock runs far past the trained range (docs/architecture.md)."""
    if model.condition is None or next_frame - state.clock_base < CLOCK_PERIOD:
        return False
    window = [f for f in state.cache.cached_frames() if f >= state.cache.sink]
    state.clock_base = (min(window) if window else next_frame) - state.cache.sink
    recache(model, state, settings)
    state.rebases += 1
    return True


def recache(model: Any, state: StreamState, settings: StreamSettings) -> None:
    """Re-write the cache from the cached frames' clean latents under `state.embeds` and the
    current clock: chunk by chunk, oldest first, as they were generated."""
    cache = state.cache
    cached = cache.cached_frames()
    latents = {f: cache.latents[:, cache.slot_for(f)].clone() for f in cached}  # f -> (C, h, w)
    cache.clear()

    def chunk_of(f: int) -> int:
        return chunk_index(f, settings.chunk_frames, settings.first_chunk_frames)

    groups: list[list[int]] = []  # consecutive frames of one original chunk
    for f in cached:
        if groups and f == groups[-1][-1] + 1 and chunk_of(f) == chunk_of(groups[-1][0]):
            groups[-1].append(f)
        else:
            groups.append([f])
    for group in groups:
        x = torch.stack([latents[f] for f in group], dim=1).unsqueeze(0).to(model.device)  # (1, C, n, h, w)
        write_pass(model, state, settings, x, group)

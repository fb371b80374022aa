"""Block-causal self-attention for the Wan transformer, and the KV cache that streams it.

Autoregressive-diffusion hybrids (CausVid, Self-Forcing, LongLive) cut the latent video into
chunks of C latent frames: every token attends to all tokens of its own chunk and of earlier
chunks, never to later ones. Trained that way, the model generates chunk by chunk: the chunks
already made are represented only by their keys/values, computed once by a clean-context pass
(the denoised chunk at timestep 0) and kept in a `KVCache`.

The self-attention processor (`videogen.attention.processor`) runs the functions here when the
call's `AttentionCall.causal` asks for it (a `CausalCall`):

    mode "full"   block-causal mask over the whole sequence (training; the reference the cache
                  must reproduce): `block_causal_attention`
    mode "cache"  the call holds one chunk; it attends to the cached frames plus itself and, when
                  `write` is set (the clean-context pass), stores its keys/values afterwards:
                  `cached_attention`

The cache is a preallocated ring buffer (memory is fixed however long the stream runs): `sink`
slots hold the first latent frames of the stream for good (attention sinks, as in StreamingLLM
and LongLive), `window` slots hold the most recent frames and are overwritten oldest first. Keys
are stored *before* RoPE and rotated at attention time, so positions are re-indexed within what
is cached: sinks keep positions 0..S-1 and the window sits right after them, whatever the
absolute frame number. A stream of any length therefore uses positions the model was trained on
(S + W + C latent frames at most).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F

from videogen.attention.rope import apply_rotary, rope_for_frames


@dataclass
class KVCache:
    """Self-attention keys/values of cached latent frames, per layer, in fixed slots.

    Slot s holds latent frame `frame_of_slot[s]` (-1 = empty). Frame f goes to slot f if f < sink,
    else to sink + (f - sink) % window. `latents` keeps each slot's clean latents so the cache can
    be rebuilt under a new prompt (`videogen.streaming.recache`)."""

    layers: int
    batch: int
    heads: int
    head_dim: int
    tokens_per_frame: int
    sink: int
    window: int
    latent_shape: tuple[int, int, int]  # (C, h, w) of one latent frame
    dtype: torch.dtype = torch.float32
    device: torch.device | str = "cpu"
    k: torch.Tensor = field(init=False, repr=False)
    v: torch.Tensor = field(init=False, repr=False)
    latents: torch.Tensor = field(init=False, repr=False)
    frame_of_slot: list[int] = field(init=False)

    def __post_init__(self) -> None:
        if self.window < 1 or self.sink < 0:
            raise ValueError(f"KVCache needs window >= 1 and sink >= 0, got window={self.window}, sink={self.sink}")
        slots = self.sink + self.window
        shape = (self.layers, self.batch, slots * self.tokens_per_frame, self.heads, self.head_dim)
        self.k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        c, h, w = self.latent_shape
        self.latents = torch.zeros((c, slots, h, w), dtype=torch.float32, device=self.device)
        self.frame_of_slot = [-1] * slots

    @property
    def slots(self) -> int:
        return self.sink + self.window

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v, self.latents))

    def slot_for(self, frame: int) -> int:
        return frame if frame < self.sink else self.sink + (frame - self.sink) % self.window

    def cached_frames(self) -> list[int]:
        return sorted(f for f in self.frame_of_slot if f >= 0)

    def clear(self) -> None:
        self.frame_of_slot = [-1] * self.slots

    def token_index(self, slots: list[int]) -> torch.Tensor:
        t = self.tokens_per_frame
        idx = [s * t + i for s in slots for i in range(t)]
        return torch.tensor(idx, dtype=torch.long, device=self.device)

    def commit(self, frames: list[int], latents: torch.Tensor | None) -> None:
        """Record that `frames` were written (their K/V by the processors during the pass)."""
        for i, f in enumerate(frames):
            s = self.slot_for(f)
            self.frame_of_slot[s] = f
            if latents is not None:
                self.latents[:, s] = latents[0, :, i].float()


@dataclass(frozen=True)
class ChunkPlan:
    """Where one chunk sits against a `KVCache`: what it sees and at which positions."""

    cache_tokens: torch.Tensor  # token indices of the visible cached frames, in slot order
    cache_rope: tuple[torch.Tensor, torch.Tensor] | None  # their (cos, sin); None: nothing cached is visible
    chunk_rope: tuple[torch.Tensor, torch.Tensor]
    write_tokens: torch.Tensor  # where the chunk's K/V go
    chunk_positions: list[int]  # the chunk's re-indexed temporal positions (RoPE, position channels)
    frames: list[int]  # the chunk's latent frames on the stream's clock (time-dependent conditioning)


def chunk_index(frame, chunk_frames: int, first_chunk_frames: int):
    """The chunk a latent frame belongs to: frames [0, first) are chunk 0, then chunks of
    `chunk_frames` (ints or an integer tensor)."""
    if isinstance(frame, torch.Tensor):
        return torch.where(frame < first_chunk_frames, 0, 1 + (frame - first_chunk_frames) // chunk_frames)
    return 0 if frame < first_chunk_frames else 1 + (frame - first_chunk_frames) // chunk_frames


def chunk_frames_of(index: int, chunk_frames: int, first_chunk_frames: int) -> list[int]:
    """The latent frames of chunk `index`."""
    if index == 0:
        return list(range(first_chunk_frames))
    start = first_chunk_frames + (index - 1) * chunk_frames
    return list(range(start, start + chunk_frames))


def plan_chunk(
    cache: KVCache, transformer: Any, frames: list[int], grid_hw: tuple[int, int], clock_base: int = 0
) -> ChunkPlan:
    """The plan for forward passes over the chunk holding latent `frames` (consecutive): which
    cached tokens it sees and the re-indexed RoPE positions of both. Frames at or past the sinks
    reach time-dependent conditioning as f - `clock_base` (a long stream re-bases its clock,
    `videogen.streaming.recache.rebase_clock`)."""
    visible = [f for f in cache.cached_frames() if f not in frames]
    rest = [f for f in visible + list(frames) if f >= cache.sink]
    base = min(rest) if rest else cache.sink

    def pos(f: int) -> int:
        return f if f < cache.sink else cache.sink + (f - base)

    slots = [cache.slot_for(f) for f in visible]
    rope = transformer.rope
    return ChunkPlan(
        cache_tokens=cache.token_index(slots),
        cache_rope=rope_for_frames(rope, [pos(f) for f in visible], grid_hw) if visible else None,
        chunk_rope=rope_for_frames(rope, [pos(f) for f in frames], grid_hw),
        write_tokens=cache.token_index([cache.slot_for(f) for f in frames]),
        chunk_positions=[pos(f) for f in frames],
        frames=[f if f < cache.sink else f - clock_base for f in frames],
    )


@dataclass(frozen=True)
class CausalCall:
    """A block-causal call (CausVid / Self-Forcing; see `videogen.attention.causal`).

    mode "full":  the whole sequence under a block-causal mask (training, and the reference the
                  cache must reproduce): every token sees its own chunk and earlier ones
    mode "cache": the call holds one chunk (`plan`); it attends to the frames cached in `cache`
                  plus itself and, when `write` is set (the clean-context pass), stores its
                  keys/values in `cache` afterwards
    """

    mode: Literal["full", "cache"]
    chunk_frames: int = 3  # latent frames per chunk ("full")
    first_chunk_frames: int = 1  # the first chunk's length (1: the first frame alone, as Wan's VAE has it)
    tokens_per_frame: int = 0  # post-patch tokens of one latent frame ("full")
    plan: ChunkPlan | None = None  # ("cache")
    cache: KVCache | None = None  # ("cache")
    write: bool = False  # ("cache") store this chunk's keys/values

    def __post_init__(self) -> None:
        if self.mode == "full" and self.tokens_per_frame < 1:
            raise ValueError(f"a 'full' CausalCall needs tokens_per_frame >= 1, got {self.tokens_per_frame}")
        if self.mode == "cache" and (self.plan is None or self.cache is None):
            raise ValueError("a 'cache' CausalCall needs a plan and a cache")
        if self.mode not in ("full", "cache"):
            raise ValueError(f"CausalCall.mode must be 'full' or 'cache', got {self.mode!r}")


def block_causal_mask(n_tokens: int, call: CausalCall, device: torch.device) -> torch.Tensor:
    """(N, N) bool, True = may attend: key chunk <= query chunk."""
    frame = torch.arange(n_tokens, device=device) // call.tokens_per_frame
    chunk = chunk_index(frame, call.chunk_frames, call.first_chunk_frames)
    return chunk[None, :] <= chunk[:, None]


def block_causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           rotary_emb: tuple[torch.Tensor, torch.Tensor], call: CausalCall) -> torch.Tensor:  # fmt: skip
    """Mode "full": `query`/`key`/`value` (B, N, heads, d) before RoPE -> (B, heads, N, d)."""
    q, k = apply_rotary(query, *rotary_emb), apply_rotary(key, *rotary_emb)
    mask = block_causal_mask(q.shape[1], call, q.device)
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), value.transpose(1, 2), attn_mask=mask)


def cached_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer: int, call: CausalCall
) -> torch.Tensor:
    """Mode "cache": one chunk's `query`/`key`/`value` (B, n, heads, d) before RoPE attend to the
    visible cached frames of `layer` plus the chunk -> (B, heads, n, d); with `call.write` the
    chunk's keys/values are stored, un-rotated (positions are assigned when they are read)."""
    plan, cache = call.plan, call.cache
    assert plan is not None and cache is not None  # CausalCall checks this on construction
    q, k = apply_rotary(query, *plan.chunk_rope), apply_rotary(key, *plan.chunk_rope)
    v = value
    if plan.cache_rope is not None:
        ck = cache.k[layer][:, plan.cache_tokens].to(key.dtype)  # (B, cached tokens, heads, d)
        cv = cache.v[layer][:, plan.cache_tokens].to(value.dtype)
        k = torch.cat([apply_rotary(ck, *plan.cache_rope), k], dim=1)
        v = torch.cat([cv, v], dim=1)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    if call.write:
        cache.k[layer][:, plan.write_tokens] = key.to(cache.dtype)
        cache.v[layer][:, plan.write_tokens] = value.to(cache.dtype)
    return out


def new_cache(transformer: Any, *, batch: int, tokens_per_frame: int, sink: int, window: int,
              latent_shape: tuple[int, int, int], dtype: torch.dtype, device: torch.device | str) -> KVCache:  # fmt: skip
    cfg = transformer.config
    return KVCache(
        layers=cfg.num_layers, batch=batch, heads=cfg.num_attention_heads, head_dim=cfg.attention_head_dim,
        tokens_per_frame=tokens_per_frame, sink=sink, window=window, latent_shape=latent_shape,
        dtype=dtype, device=device,
    )  # fmt: skip

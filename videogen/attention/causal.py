"""Block-causal self-attention for the Wan transformer, and the KV cache that streams it.

Autoregressive-diffusion hybrids (CausVid, Self-Forcing, LongLive) cut the latent video into
chunks of C latent frames: every token attends to all tokens of its own chunk and of earlier
chunks, never to later ones. Trained that way, the model generates chunk by chunk: the chunks
already made are represented only by their keys/values, computed once by a clean-context pass
(the denoised chunk at timestep 0) and kept in a `KVCache`.

`CausalSelfAttnProcessor` replaces `attn1` of every block; one shared `CausalContext` tells it
what to do on each call (diffusers' forward has no channel for it):

    mode None     what was installed before (dense or sparse): the model is unchanged
    mode "full"   block-causal mask over the whole sequence (training; the reference the cache
                  must reproduce)
    mode "cache"  the call holds one chunk; it attends to the cached frames plus itself and, when
                  `write` is set (the clean-context pass), stores its keys/values afterwards

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

import torch
import torch.nn.functional as F

from videogen.attention.sparse import apply_rotary


@dataclass
class KVCache:
    """Self-attention keys/values of cached latent frames, per layer, in fixed slots.

    Slot s holds latent frame `frame_of_slot[s]` (-1 = empty). Frame f goes to slot f if f < sink,
    else to sink + (f - sink) % window. `latents` keeps each slot's clean latents so the cache can
    be rebuilt under a new prompt (`videogen.streaming.stream` re-caching)."""

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


@dataclass
class _ChunkPlan:
    cache_tokens: torch.Tensor  # token indices of the visible cached frames, in slot order
    cache_rope: tuple[torch.Tensor, torch.Tensor] | None
    chunk_rope: tuple[torch.Tensor, torch.Tensor]
    write_tokens: torch.Tensor  # where the chunk's K/V go
    chunk_positions: list[int]  # the chunk's re-indexed temporal positions (RoPE, position channels)
    frames: list[int]  # the chunk's latent frames on the stream's clock (time-dependent conditioning)


@dataclass
class CausalContext:
    mode: str | None = None  # None | "full" | "cache"
    chunk_frames: int = 3  # latent frames per chunk ("full" mode)
    first_chunk_frames: int = 1  # the first chunk's length (1: the first frame alone, as Wan's VAE has it)
    tokens_per_frame: int = 0
    cache: KVCache | None = None
    write: bool = False
    plan: _ChunkPlan | None = None
    # Frames at or past the sinks reach time-dependent conditioning (`_ChunkPlan.frames`) as
    # f - clock_base: a long stream re-bases its clock (and re-writes its cache) to stay within
    # the clock range the model was trained on (`videogen.streaming.stream.CLOCK_PERIOD`).
    clock_base: int = 0

    def block_causal_mask(self, n_tokens: int, device) -> torch.Tensor:
        """(N, N) bool, True = may attend: key chunk <= query chunk."""
        frame = torch.arange(n_tokens, device=device) // self.tokens_per_frame
        chunk = chunk_index(frame, self.chunk_frames, self.first_chunk_frames)
        return chunk[None, :] <= chunk[:, None]


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


def rope_for_frames(rope, positions: list[int], grid_hw: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Wan's 3D RoPE (cos, sin), shaped (1, n*h*w, 1, d), for latent frames at temporal
    `positions` (any integers) on an h x w token grid; the same tables as `WanRotaryPosEmbed`."""
    h, w = grid_hw
    split = [rope.t_dim, rope.h_dim, rope.w_dim]
    pos = torch.tensor(positions, dtype=torch.long, device=rope.freqs_cos.device)
    out = []
    for table in (rope.freqs_cos, rope.freqs_sin):
        ft, fh, fw = table.split(split, dim=1)
        n = len(positions)
        parts = [
            ft[pos].view(n, 1, 1, -1).expand(n, h, w, -1),
            fh[:h].view(1, h, 1, -1).expand(n, h, w, -1),
            fw[:w].view(1, 1, w, -1).expand(n, h, w, -1),
        ]
        out.append(torch.cat(parts, dim=-1).reshape(1, n * h * w, 1, -1))
    return out[0], out[1]


def plan_chunk(ctx: CausalContext, transformer, frames: list[int], grid_hw: tuple[int, int]) -> None:
    """Prepare `ctx` for forward passes over the chunk holding latent `frames` (consecutive):
    which cached tokens it sees and the re-indexed RoPE positions of both."""
    cache = ctx.cache
    visible = [f for f in cache.cached_frames() if f not in frames]
    rest = [f for f in visible + list(frames) if f >= cache.sink]
    base = min(rest) if rest else cache.sink

    def pos(f: int) -> int:
        return f if f < cache.sink else cache.sink + (f - base)

    slots = [cache.slot_for(f) for f in visible]
    rope = transformer.rope
    ctx.plan = _ChunkPlan(
        cache_tokens=cache.token_index(slots),
        cache_rope=rope_for_frames(rope, [pos(f) for f in visible], grid_hw) if visible else None,
        chunk_rope=rope_for_frames(rope, [pos(f) for f in frames], grid_hw),
        write_tokens=cache.token_index([cache.slot_for(f) for f in frames]),
        chunk_positions=[pos(f) for f in frames],
        frames=[f if f < cache.sink else f - ctx.clock_base for f in frames],
    )


class CausalSelfAttnProcessor:
    """Wan self-attention, block-causal or through a `KVCache` (see the module docstring)."""

    def __init__(self, layer: int, context: CausalContext, fallback) -> None:
        self.layer = layer
        self.context = context
        self.fallback = fallback

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        ctx = self.context
        if ctx.mode is None:
            return self.fallback(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)
        from diffusers.models.transformers.transformer_wan import _get_qkv_projections

        query, key, value = _get_qkv_projections(attn, hidden_states, None)
        query, key = attn.norm_q(query), attn.norm_k(key)
        query = query.unflatten(2, (attn.heads, -1))  # (B, N, heads, d)
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))
        if ctx.mode == "full":
            q, k = apply_rotary(query, *rotary_emb), apply_rotary(key, *rotary_emb)
            mask = ctx.block_causal_mask(q.shape[1], q.device)
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), value.transpose(1, 2), attn_mask=mask)
        elif ctx.mode == "cache":
            plan, cache = ctx.plan, ctx.cache
            q, k = apply_rotary(query, *plan.chunk_rope), apply_rotary(key, *plan.chunk_rope)
            v = value
            if plan.cache_rope is not None:
                ck = cache.k[self.layer][:, plan.cache_tokens].to(key.dtype)
                cv = cache.v[self.layer][:, plan.cache_tokens].to(value.dtype)
                k = torch.cat([apply_rotary(ck, *plan.cache_rope), k], dim=1)
                v = torch.cat([cv, v], dim=1)
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            if ctx.write:  # keys stored un-rotated: positions are assigned when they are read
                cache.k[self.layer][:, plan.write_tokens] = key.to(cache.dtype)
                cache.v[self.layer][:, plan.write_tokens] = value.to(cache.dtype)
        else:
            raise ValueError(f"CausalContext.mode must be None, 'full' or 'cache', got {ctx.mode!r}")
        out = out.transpose(1, 2).flatten(2, 3).type_as(query)  # (B, N, heads*d)
        out = attn.to_out[0](out)
        return attn.to_out[1](out)


def install_causal(transformer) -> CausalContext:
    """Put a `CausalSelfAttnProcessor` on every `attn1` (once; later calls return the same context).
    With `context.mode = None` the model behaves exactly as before."""
    existing = getattr(transformer, "_videogen_causal", None)
    if existing is not None:
        return existing
    context = CausalContext()
    for i, block in enumerate(transformer.blocks):
        block.attn1.set_processor(CausalSelfAttnProcessor(i, context, block.attn1.processor))
    transformer._videogen_causal = context
    return context


def new_cache(transformer, *, batch: int, tokens_per_frame: int, sink: int, window: int,
              latent_shape: tuple[int, int, int], dtype: torch.dtype, device) -> KVCache:  # fmt: skip
    cfg = transformer.config
    return KVCache(
        layers=cfg.num_layers, batch=batch, heads=cfg.num_attention_heads, head_dim=cfg.attention_head_dim,
        tokens_per_frame=tokens_per_frame, sink=sink, window=window, latent_shape=latent_shape,
        dtype=dtype, device=device,
    )  # fmt: skip

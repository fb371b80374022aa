"""How the sampling loop calls the transformer: one `TransformerForward` per kind of call.

The denoising loop (`videogen.sampling.loop.denoise`) is the same for a segment and a stream
chunk; what differs is the transformer call, passed in as a `TransformerForward`:

* `SegmentForward`: the whole segment at once, bidirectional, with Wan's per-token timesteps when
  a clean prefix is held (its tokens at timestep 0) or the model always expands them (Wan 2.2 TI2V);
  the post-patch grid and the step reach the attention backend (sparsity policy).
* `CachedChunkForward`: one stream chunk through the KV cache (`videogen.attention.causal`), at
  re-indexed positions; with `write` it is the clean-context pass that stores the chunk's K/V.

`block_causal_forward` is the training forward over a whole sequence with a block-causal mask,
the reference the cached path reproduces. Each call hands its attention facts down as an
`AttentionCall` (`videogen.attention.call`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from videogen.attention.call import AttentionCall, attention_call
from videogen.attention.causal import CausalCall, ChunkPlan, KVCache
from videogen.attention.processor import ensure_self_attention


class TransformerForward(Protocol):
    def __call__(self, transformer: Any, latents: torch.Tensor, t: torch.Tensor, step: int) -> torch.Tensor:
        """The transformer's prediction for `latents` (1, C, F, h, w) in the model's dtype at
        scheduler timestep `t` (0-d), denoising step `step` (0-based): (B, C, F, h, w), B = the
        prompt batch (cond[, uncond])."""
        ...


def call_transformer(transformer: Any, hidden_states: torch.Tensor, timestep: torch.Tensor, embeds: torch.Tensor,
                     call: AttentionCall) -> torch.Tensor:  # fmt: skip
    """One inference call of a diffusers Wan transformer with `call` as its attention context."""
    with torch.no_grad(), attention_call(call):
        return transformer(
            hidden_states=hidden_states, timestep=timestep, encoder_hidden_states=embeds, return_dict=False
        )[0]


@dataclass(frozen=True)
class SegmentForward:
    """A whole segment per call; the first `prefix_frames` latent frames are clean (timestep 0)."""

    model: Any  # videogen.models.loader.VideoModel
    embeds: torch.Tensor  # (B, L, D): cond[, uncond]
    grid: tuple[int, int, int]  # (F, H, W) tokens after patching
    prefix_frames: int
    num_steps: int
    absolute: list[float]  # the latent frames' times in their shot (time-dependent conditioning)
    prefix_timestep: float = 0.0  # the prefix's noise level x 1000 (`context_noise`; 0: clean)
    # the latent frames' positions in the clip (position-conditioned models; an anchor frame sits
    # at `SINK_POSITION`); None: 0..F-1
    positions: list[int] | None = None

    def __call__(self, transformer: Any, latents: torch.Tensor, t: torch.Tensor, step: int) -> torch.Tensor:
        model, batch = self.model, self.embeds.shape[0]
        x = latents.expand(batch, -1, -1, -1, -1)  # (B, C, F, h, w)
        if self.prefix_frames > 0 or model.expand_timesteps:
            tokens_per_frame = self.grid[1] * self.grid[2]
            timestep = torch.full((batch, self.grid[0] * tokens_per_frame), float(t), device=model.device)  # (B, N)
            # prefix tokens are clean (or at the small `context_noise` level)
            timestep[:, : (self.prefix_frames // model.patch_size[0]) * tokens_per_frame] = self.prefix_timestep
        else:
            timestep = t.expand(batch)
        inputs = model.transformer_input(x, self.embeds, self.positions, self.absolute)
        return call_transformer(
            transformer, inputs, timestep, self.embeds, AttentionCall(self.grid, step, self.num_steps)
        )


@dataclass(frozen=True)
class CachedChunkForward:
    """One stream chunk against a KV cache; `write`: store its keys/values (the clean-context pass)."""

    model: Any  # videogen.models.loader.VideoModel
    embeds: torch.Tensor  # (B, L, D): cond[, uncond]
    plan: ChunkPlan
    cache: KVCache
    write: bool = False

    def __call__(self, transformer: Any, latents: torch.Tensor, t: torch.Tensor, step: int) -> torch.Tensor:
        model, batch = self.model, self.embeds.shape[0]
        pt, ph, pw = model.patch_size
        n = (latents.shape[2] // pt) * (latents.shape[3] // ph) * (latents.shape[4] // pw)
        timestep = torch.full((batch, n), float(t), device=latents.device)  # (B, n) per token
        x = latents.expand(batch, -1, -1, -1, -1)  # (B, C, n_frames, h, w)
        inputs = model.transformer_input(x, self.embeds, self.plan.chunk_positions, self.plan.frames)
        call = AttentionCall(causal=CausalCall("cache", plan=self.plan, cache=self.cache, write=self.write))
        return call_transformer(transformer, inputs, timestep, self.embeds, call)


def block_causal_forward(transformer: Any, x: torch.Tensor, timestep: torch.Tensor, embeds: torch.Tensor,
                         chunk_frames: int, first_chunk_frames: int = 1) -> torch.Tensor:  # fmt: skip
    """One forward over a whole sequence `x` (B, C, F, h, w) with block-causal self-attention
    (training, with gradients, and the reference the KV-cache path must reproduce).
    `timestep`: (B, N) per token."""
    ensure_self_attention(transformer)
    _, ph, pw = transformer.config.patch_size
    tokens_per_frame = (x.shape[3] // ph) * (x.shape[4] // pw)
    causal = CausalCall(
        "full", chunk_frames=chunk_frames, first_chunk_frames=first_chunk_frames, tokens_per_frame=tokens_per_frame
    )
    with attention_call(AttentionCall(causal=causal)):
        return transformer(hidden_states=x, timestep=timestep, encoder_hidden_states=embeds, return_dict=False)[0]

"""Attention backends for the Wan transformer, chosen once at load time.

Only self-attention (`attn1` of every block) is replaced; cross-attention stays diffusers' dense
processor. Backends:

    dense          torch SDPA (diffusers' own processor, untouched)
    sparse         top-k tile-sparse attention, `kernels` backend "auto" (Triton on CUDA, CPU path elsewhere)
    sparse-triton  the Triton kernel (CUDA, or the Triton interpreter)
    sparse-cpu     the CPU path
    reference      the fp32 masked-dense reference of the sparse semantics (tests only: slow)

A `SparsityPolicy` keeps the first denoising steps (a fraction) and listed layers dense: early
steps fix the layout of the scene and are the most sensitive to dropped attention (Sparse
VideoGen, Radial and SpargeAttn keep ~20% of steps dense).

The pipeline tells the processors the post-patch latent grid and the current step through one
shared `AttentionContext` per model; diffusers' forward has no channel for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from videogen.config.presets import ATTENTION_BACKENDS

_KERNEL_BACKEND = {"sparse": "auto", "sparse-triton": "triton", "sparse-cpu": "cpu", "reference": "reference"}


@dataclass
class SparsityPolicy:
    density: float = 0.125  # fraction of key tiles each query tile attends to
    tile: tuple[int, int, int] = (4, 4, 4)  # (frames, height, width) tokens per tile
    dense_step_fraction: float = 0.2  # the first 20% of denoising steps run dense
    dense_layers: tuple[int, ...] = (0,)  # layer indices that always run dense


@dataclass
class AttentionContext:
    """Set by the pipeline before each transformer call."""

    grid: tuple[int, int, int] | None = None  # (F, H, W) after patching
    step: int = 0
    num_steps: int = 1
    policy: SparsityPolicy = field(default_factory=SparsityPolicy)

    def sparse_now(self, layer: int) -> bool:
        if self.grid is None or layer in self.policy.dense_layers:
            return False
        return self.step >= self.policy.dense_step_fraction * self.num_steps


class SparseSelfAttnProcessor:
    """Wan self-attention with tile-sparse attention; falls back to SDPA where the policy says dense."""

    def __init__(self, layer: int, context: AttentionContext, kernel_backend: str) -> None:
        self.layer = layer
        self.context = context
        self.kernel_backend = kernel_backend

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        from diffusers.models.transformers.transformer_wan import _get_qkv_projections

        query, key, value = _get_qkv_projections(attn, hidden_states, None)
        query, key = attn.norm_q(query), attn.norm_k(key)
        query = query.unflatten(2, (attn.heads, -1))  # (B, N, heads, d)
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))
        if rotary_emb is not None:
            query = apply_rotary(query, *rotary_emb)
            key = apply_rotary(key, *rotary_emb)
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # (B, heads, N, d)
        if self.context.sparse_now(self.layer):
            from videogen.kernels import sparse_video_attention

            pol = self.context.policy
            grid = self.context.grid
            tile = tuple(min(t, g) for t, g in zip(pol.tile, grid))  # small grids: one tile spans the axis
            out = sparse_video_attention(q, k, v, grid=grid, tile=tile, density=pol.density, backend=self.kernel_backend)
        else:
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        out = out.transpose(1, 2).flatten(2, 3).type_as(query)  # (B, N, heads*d)
        out = attn.to_out[0](out)
        return attn.to_out[1](out)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Wan's interleaved RoPE on (B, N, heads, d), the same arithmetic as diffusers' processor."""
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x1 * s + x2 * c
    return out.type_as(x)


def install_attention(model, name: str, policy: SparsityPolicy | None = None) -> str:
    """Install backend `name` on every self-attention of `model.transformer` (and transformer_2)."""
    from videogen.errors import InvalidOption

    if name not in ATTENTION_BACKENDS:
        raise InvalidOption("attention", name, f"must be one of {', '.join(ATTENTION_BACKENDS)}")
    context = AttentionContext(policy=policy or SparsityPolicy())
    model.extras["attention_context"] = context
    if name == "dense":
        return name
    if name == "sparse-triton" and model.device.type != "cuda":
        import os

        if os.environ.get("TRITON_INTERPRET") != "1":
            raise InvalidOption("attention", name, "the Triton kernel needs a CUDA device (or TRITON_INTERPRET=1)")
    for transformer in (model.transformer, model.transformer_2):
        if transformer is None:
            continue
        for i, block in enumerate(transformer.blocks):
            block.attn1.set_processor(SparseSelfAttnProcessor(i, context, _KERNEL_BACKEND[name]))
    return name

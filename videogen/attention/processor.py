"""One self-attention processor for the Wan transformer's blocks (`attn1`), its backend chosen at load.

`WanSelfAttnProcessor` does the arithmetic of diffusers' `WanAttnProcessor` around the attention
itself, written once here: q/k/v projections (one fused `to_qkv` when `attn.fused_projections`),
the q/k RMS norms, the head split, RoPE and the output projection. In between runs:

* for a block-causal call (`AttentionCall.causal`, `videogen.attention.causal`): the block-causal
  mask over the whole sequence, or one chunk against the KV cache;
* otherwise the backend `install_attention` chose when the model was loaded (nothing switches it
  later; a model with causal weights runs it whenever a call is not block-causal):

    dense          torch SDPA, as diffusers' processor computes it (equal outputs)
    sparse         top-k tile-sparse attention, `kernels` backend "auto" (Triton on CUDA, CPU path elsewhere)
    sparse-triton  the Triton kernel (CUDA, or the Triton interpreter)
    sparse-cpu     the CPU path
    reference      the fp32 masked-dense reference of the sparse semantics (tests only: slow)

Cross-attention (`attn2`) keeps diffusers' processor.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from videogen.attention.call import AttentionCall, current_attention_call
from videogen.attention.causal import block_causal_attention, cached_attention
from videogen.attention.rope import apply_rotary
from videogen.attention.sparse import KERNEL_BACKENDS, SparsityPolicy, TileSparseAttention
from videogen.config.presets import ATTENTION_BACKENDS
from videogen.errors import InvalidOption


class SelfAttentionBackend(Protocol):
    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, call: AttentionCall | None
    ) -> torch.Tensor:
        """`q`, `k`, `v`: (B, heads, N, d) after RoPE -> (B, heads, N, d)."""
        ...


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, call: AttentionCall | None
) -> torch.Tensor:
    """The dense backend: torch SDPA over the whole sequence."""
    return F.scaled_dot_product_attention(q, k, v)


def project_qkv(attn: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`hidden_states` (B, N, D) -> normed query, key and value, each (B, N, heads, d), before RoPE."""
    if attn.fused_projections:  # `attn.fuse_projections()` replaced to_q/k/v by one linear
        query, key, value = attn.to_qkv(hidden_states).chunk(3, dim=-1)
    else:
        query, key, value = attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)
    query, key = attn.norm_q(query), attn.norm_k(key)
    return (
        query.unflatten(2, (attn.heads, -1)),
        key.unflatten(2, (attn.heads, -1)),
        value.unflatten(2, (attn.heads, -1)),
    )


class WanSelfAttnProcessor:
    """Wan self-attention with a load-time backend and per-call block-causal modes (module docstring)."""

    def __init__(self, layer: int, backend: SelfAttentionBackend) -> None:
        self.layer = layer
        self.backend = backend

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:  # fmt: skip
        if encoder_hidden_states is not None or attention_mask is not None:
            raise ValueError("WanSelfAttnProcessor is for self-attention (attn1): no encoder states, no mask")
        call = current_attention_call()
        query, key, value = project_qkv(attn, hidden_states)  # (B, N, heads, d) each
        causal = call.causal if call is not None else None
        if causal is not None and causal.mode == "full":
            if rotary_emb is None:
                raise ValueError("a block-causal call needs the transformer's rotary embedding")
            out = block_causal_attention(query, key, value, rotary_emb, causal)
        elif causal is not None:
            out = cached_attention(query, key, value, self.layer, causal)
        else:
            if rotary_emb is not None:
                query, key = apply_rotary(query, *rotary_emb), apply_rotary(key, *rotary_emb)
            out = self.backend(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), self.layer, call)
        out = out.transpose(1, 2).flatten(2, 3).type_as(query)  # (B, heads, N, d) -> (B, N, heads*d)
        out = attn.to_out[0](out)
        return attn.to_out[1](out)


def install_self_attention(transformer: Any, backend: SelfAttentionBackend) -> None:
    """Put a `WanSelfAttnProcessor` with `backend` on every block's `attn1`."""
    for i, block in enumerate(transformer.blocks):
        block.attn1.set_processor(WanSelfAttnProcessor(i, backend))


def has_self_attention(transformer: Any) -> bool:
    """Whether every `attn1` of `transformer` has our processor (block-causal calls need it)."""
    return all(isinstance(block.attn1.processor, WanSelfAttnProcessor) for block in transformer.blocks)


def ensure_self_attention(transformer: Any) -> None:
    """Give a transformer built outside `load_model` (training, tests) the dense backend, once;
    a loaded model already has its backend and keeps it."""
    if not has_self_attention(transformer):
        install_self_attention(transformer, dense_attention)


def attention_backend(name: str, device: torch.device, policy: SparsityPolicy | None = None) -> SelfAttentionBackend:
    """The backend called `name` (one of `ATTENTION_BACKENDS`) for a model on `device`."""
    if name not in ATTENTION_BACKENDS:
        raise InvalidOption("attention", name, f"must be one of {', '.join(ATTENTION_BACKENDS)}")
    if name == "dense":
        return dense_attention
    if name == "sparse-triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise InvalidOption("attention", name, "the Triton kernel needs a CUDA device (or TRITON_INTERPRET=1)")
    return TileSparseAttention(KERNEL_BACKENDS[name], policy or SparsityPolicy())


def install_attention(model: Any, name: str, policy: SparsityPolicy | None = None) -> str:
    """Install backend `name` on every self-attention of `model.transformer` (and transformer_2)."""
    backend = attention_backend(name, model.device, policy)
    for transformer in (model.transformer, model.transformer_2):
        if transformer is not None:
            install_self_attention(transformer, backend)
    return name

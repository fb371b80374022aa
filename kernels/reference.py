"""Masked dense attention: the plain-PyTorch oracle for the sparse backends.

Builds the full boolean mask that the tile selection implies (query token n may see
key token m iff m's tile is among the selected key tiles of n's tile, and m is a real
token) and runs ordinary softmax attention in ``compute_dtype`` (fp32 by default).
This is the "fp32 masked-dense torch reference" that VSA- and FlexAttention-style
kernels are tested against; running it in bf16/fp16 gives the error budget that the
tests allow the fast backends (see ``tests/kernels/conftest.py``).
"""

from __future__ import annotations

import torch
from einops import rearrange

from .tile_layout import TileLayout


def selection_mask(
    kv_indices: torch.Tensor, query_tiles: torch.Tensor, key_tiles: torch.Tensor, num_tiles: int
) -> torch.Tensor:
    """Boolean ``(B, heads, Nq, Nk)``: may query token i (in tile ``query_tiles[i]``) see key j?

    ``kv_indices`` is ``(B, heads, n_tiles, k_sel)``; a key with ``key_tiles[j] < 0``
    (padding) is never visible.
    """
    B, Hd, T, _ = kv_indices.shape
    allowed = torch.zeros(B, Hd, T, num_tiles + 1, dtype=torch.bool, device=kv_indices.device)
    allowed.scatter_(-1, kv_indices.long(), True)  # (B, heads, n_tiles, n_tiles + 1); last column: padding
    key_cols = torch.where(key_tiles < 0, num_tiles, key_tiles)  # padding -> never-set column
    return allowed[:, :, query_tiles][..., key_cols]  # (B, heads, Nq, Nk)


def masked_dense_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Softmax attention of ``(B, heads, Nq, d)`` q over ``(B, heads, Nk, d)`` k, v where ``mask`` is True.

    Every step (QK^T, softmax, PV) runs in ``compute_dtype``; returns ``(B, heads, Nq, d)``
    in ``compute_dtype``. Every query row must see at least one key.
    """
    q, k, v = (t.to(compute_dtype) for t in (q, k, v))
    scores = (q @ k.transpose(-1, -2)) * scale  # (B, heads, Nq, Nk)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, heads, Nq, d)


def reference_sparse_video_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: TileLayout,
    kv_indices: torch.Tensor,
    query_tokens: torch.Tensor | None = None,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Sparse video attention in raster token order via the full mask.

    ``q, k, v``: ``(B, heads, N, d)``. ``query_tokens`` (optional, int64 ``(Nq,)``)
    restricts the computation to those query rows, so a 32k-token check stays cheap.
    Returns ``(B, heads, Nq, d)`` in ``compute_dtype``.
    """
    if query_tokens is None:
        query_tokens = torch.arange(layout.num_tokens, device=q.device)
    mask = selection_mask(
        kv_indices, layout.tile_of_token[query_tokens], layout.tile_of_token, layout.num_tiles
    )  # (B, heads, Nq, N)
    q_sub = q[:, :, query_tokens]  # (B, heads, Nq, d)
    return masked_dense_attention(q_sub, k, v, mask, q.shape[-1] ** -0.5, compute_dtype)


def reference_block_sparse_attention(
    q_tiles: torch.Tensor,
    k_tiles: torch.Tensor,
    v_tiles: torch.Tensor,
    kv_indices: torch.Tensor,
    valid_counts: torch.Tensor,
    scale: float,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The same oracle on padded tile-ordered ``(B, heads, n_tiles, tile_volume, d)`` tensors.

    Returns that shape in ``compute_dtype`` with padding rows zeroed.
    """
    T, V = q_tiles.shape[2:4]
    ranks = torch.arange(V, device=q_tiles.device)
    valid = ranks[None, :] < valid_counts.to(q_tiles.device)[:, None]  # (n_tiles, V)
    slot_tile = torch.arange(T, device=q_tiles.device).repeat_interleave(V)  # (n_tiles*V,)
    key_tiles = torch.where(valid.view(-1), slot_tile, -1)  # padding keys -> -1
    mask = selection_mask(kv_indices, slot_tile, key_tiles, T)  # (B, heads, T*V, T*V)
    q, k, v = (rearrange(t, "b h t v d -> b h (t v) d") for t in (q_tiles, k_tiles, v_tiles))
    out = masked_dense_attention(q, k, v, mask, scale, compute_dtype)  # (B, heads, T*V, d)
    return rearrange(out, "b h (t v) d -> b h t v d", t=T) * valid[..., None]

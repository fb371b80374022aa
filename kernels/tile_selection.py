"""Pooled tile scoring and top-k key-tile selection.

Follows the coarse stage of VSA (FastVideo, "Video Sparse Attention"), without its
learned gate: the score of query tile i against key tile j (per batch and head) is
``mean_i(q) . mean_j(k) / sqrt(d)``, means taken over each tile's valid tokens only.
Each query tile keeps exactly ``ceil(density * n_tiles)`` key tiles, the highest
scores, ties going to the lower tile index. Every backend uses this one function.
"""

from __future__ import annotations

import math

import torch

from .tile_layout import TileLayout


def num_selected_tiles(density: float, num_tiles: int) -> int:
    """``ceil(density * num_tiles)``, clamped to ``[1, num_tiles]``.

    The product is rounded to 9 decimals first so that float noise such as
    ``0.07 * 100 = 7.000000000000001`` does not add a tile.
    """
    return max(1, min(num_tiles, math.ceil(round(density * num_tiles, 9))))


def tile_scores(q: torch.Tensor, k: torch.Tensor, layout: TileLayout) -> torch.Tensor:
    """Pooled fp32 scores ``(B, heads, n_tiles_q, n_tiles_k)`` of ``(B, heads, N, d)`` q and k."""
    q_mean = layout.tile_means(q)  # (B, heads, n_tiles, d) fp32
    k_mean = layout.tile_means(k)  # (B, heads, n_tiles, d) fp32
    return (q_mean @ k_mean.transpose(-1, -2)) * (q.shape[-1] ** -0.5)


def select_topk_tiles(q: torch.Tensor, k: torch.Tensor, layout: TileLayout, density: float) -> torch.Tensor:
    """Key tiles each query tile attends to: int64 ``(B, heads, n_tiles, k_sel)``.

    ``k_sel = ceil(density * n_tiles)``. Row ``[b, h, i]`` lists the selected key tiles
    of query tile ``i`` from highest to lowest score; equal scores keep ascending tile
    order (a stable descending sort), so the selection is deterministic.
    """
    scores = tile_scores(q, k, layout)  # (B, heads, n_tiles, n_tiles)
    k_sel = num_selected_tiles(density, layout.num_tiles)
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    return order[..., :k_sel].contiguous()  # (B, heads, n_tiles, k_sel)

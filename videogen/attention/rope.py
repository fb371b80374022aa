"""Wan's 3D rotary position embedding: applying it, and building its tables for any frame positions.

`apply_rotary` is the arithmetic of diffusers' `WanAttnProcessor` (interleaved pairs), so a
processor using it matches diffusers bit for bit; `rope_for_frames` builds the same (cos, sin)
tables as `WanRotaryPosEmbed` for arbitrary temporal positions (the KV cache re-indexes them).
"""

from __future__ import annotations

from typing import Any

import torch


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Wan's interleaved RoPE on `x` (B, N, heads, d), with `cos`/`sin` broadcastable to it."""
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)  # (B, N, heads, d/2) each
    c, s = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x1 * s + x2 * c
    return out.type_as(x)


def rope_for_frames(rope: Any, positions: list[int], grid_hw: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Wan's 3D RoPE (cos, sin), shaped (1, n*h*w, 1, d), for latent frames at temporal
    `positions` (any integers) on an h x w token grid; `rope` is the transformer's `WanRotaryPosEmbed`."""
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
        out.append(torch.cat(parts, dim=-1).reshape(1, n * h * w, 1, -1))  # (1, n*h*w, 1, d)
    return out[0], out[1]

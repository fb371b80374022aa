"""Tile-sparse self-attention for the Wan transformer: the `SparsityPolicy` and its backend.

The backend runs `videogen.kernels.sparse_video_attention` (top-k tiles of the post-patch token
grid) where the policy allows and torch SDPA elsewhere. The policy keeps the first denoising
steps (a fraction) and listed layers dense: early steps fix the layout of the scene and are the
most sensitive to dropped attention (Sparse VideoGen, Radial and SpargeAttn keep ~20% of steps
dense). The grid and the step come with each call (`videogen.attention.call.AttentionCall`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

import videogen.kernels as kernels
from videogen.attention.call import AttentionCall

# attention backend name -> `sparse_video_attention`'s kernel backend
KERNEL_BACKENDS = {"sparse": "auto", "sparse-triton": "triton", "sparse-cpu": "cpu", "reference": "reference"}


@dataclass(frozen=True)
class SparsityPolicy:
    density: float = 0.125  # fraction of key tiles each query tile attends to
    tile: tuple[int, int, int] = (4, 4, 4)  # (frames, height, width) tokens per tile
    dense_step_fraction: float = 0.2  # the first 20% of denoising steps run dense
    dense_layers: tuple[int, ...] = (0,)  # layer indices that always run dense

    def sparse_now(self, layer: int, call: AttentionCall | None) -> bool:
        """Whether `layer` runs sparse in `call` (dense without a known token grid)."""
        if call is None or call.grid is None or layer in self.dense_layers:
            return False
        return call.step >= self.dense_step_fraction * call.num_steps


@dataclass(frozen=True)
class TileSparseAttention:
    """Self-attention backend: tile-sparse where `policy` allows, SDPA elsewhere."""

    kernel_backend: str  # a value of `KERNEL_BACKENDS`
    policy: SparsityPolicy

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, call: AttentionCall | None
    ) -> torch.Tensor:
        """`q`, `k`, `v`: (B, heads, N, d) after RoPE -> (B, heads, N, d)."""
        if call is None or call.grid is None or not self.policy.sparse_now(layer, call):
            return F.scaled_dot_product_attention(q, k, v)
        grid, pol = call.grid, self.policy
        tile = (
            min(pol.tile[0], grid[0]),
            min(pol.tile[1], grid[1]),
            min(pol.tile[2], grid[2]),
        )  # small grids: one tile spans the axis
        return kernels.sparse_video_attention(  # an attribute look-up per call: tests count the calls
            q, k, v, grid=grid, tile=tile, density=pol.density, backend=self.kernel_backend
        )

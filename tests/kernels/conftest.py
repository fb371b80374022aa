"""Shared helpers for the kernels tests.

Triton without a GPU: ``test_sparse_attention_triton.py`` needs CUDA or ``TRITON_INTERPRET=1``
set before its kernel is decorated. Setting the variable here would switch every Triton
user in a full-suite process to the interpreter, so instead
``test_triton_interpreter.py`` re-runs that module in a subprocess with the variable set
(and skips itself where CUDA is present, since the module then runs in-process on the GPU).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from videogen.kernels import TileLayout, select_topk_tiles
from videogen.kernels.reference import reference_sparse_video_attention

# Slack on top of the reference's own low-precision error: fp32 backends differ from the
# fp32 reference only by summation order (~1e-7 measured), low-precision ones by rounding.
ATOL = {torch.float32: 1e-5, torch.bfloat16: 1e-3, torch.float16: 1e-3}


def random_qkv(
    grid: tuple[int, int, int], batch: int, heads: int, d: int, dtype: torch.dtype, device: str = "cpu", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three ``(batch, heads, F*H*W, d)`` standard-normal tensors, fixed seed."""
    gen = torch.Generator().manual_seed(seed)
    n = grid[0] * grid[1] * grid[2]
    return tuple(torch.randn(batch, heads, n, d, generator=gen).to(device=device, dtype=dtype) for _ in range(3))


def reference_with_tolerance(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grid: tuple[int, int, int],
    tile: tuple[int, int, int],
    density: float,
) -> tuple[torch.Tensor, float]:
    """fp32 masked-dense reference output and the error a backend may have against it.

    tol = 2 x (error of the same plain-PyTorch attention run in q's dtype vs fp32) + ATOL,
    the test rule of the best published kernels: a backend may be at most twice as far
    from the truth as PyTorch itself is at that precision.
    """
    layout = TileLayout.build(grid, tile, q.device)
    kv_indices = select_topk_tiles(q, k, layout, density)
    ref = reference_sparse_video_attention(q, k, v, layout, kv_indices)  # fp32
    tol = ATOL[q.dtype]
    if q.dtype != torch.float32:
        low = reference_sparse_video_attention(q, k, v, layout, kv_indices, compute_dtype=q.dtype)
        tol += 2.0 * (low.float() - ref).abs().max().item()
    return ref, tol


@pytest.fixture(autouse=True)
def _single_cpu_thread():
    """Run each kernels test on one intra-op thread, restoring the setting afterwards.

    The test shapes are tiny (hundreds of tokens), where every op costs more in OpenMP
    hand-offs than in work; on the shared 2-core box that overhead dominated the run.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def make_qkv() -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``random_qkv`` as a fixture: test modules never import ``conftest`` (in a full-suite
    run another directory's ``conftest`` module may own that name)."""
    return random_qkv


@pytest.fixture
def assert_matches_reference() -> Callable[..., None]:
    """``check(out, q, k, v, grid, tile, density)``: ``out`` is within tolerance of the fp32 reference."""

    def check(out, q, k, v, grid, tile, density) -> None:
        assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
        ref, tol = reference_with_tolerance(q, k, v, grid, tile, density)
        err = (out.float() - ref).abs().max().item()
        assert err <= tol, f"max |out - reference| = {err:.3g} > tol {tol:.3g} ({q.dtype})"

    return check

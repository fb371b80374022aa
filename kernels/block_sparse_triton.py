"""Triton block-sparse flash-attention forward over padded tile-ordered tokens.

Structure follows Triton's fused-attention tutorial / FlashAttention-2 (one kernel
plus an inner-loop helper; online softmax, fp32 accumulation, ``exp2`` with the scale
folded into ``log2(e)/sqrt(d)``), with the key loop replaced by VSA's fine stage: each
program owns one block of query rows of one query tile and walks only that tile's
selected key tiles, reading each key tile's valid count so that padding is neither
loaded nor weighted.

Tensors are ``(B*heads, n_tiles, tile_volume, d)`` contiguous; ``tile_volume`` need
not be a power of two (blocks are masked by the valid counts).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from einops import rearrange

LOG2_E = 1.4426950408889634


@triton.jit
def _attend_key_block(
    acc,
    l_i,
    m_i,
    q,  # running output (BLOCK_M, HEAD_DIM) fp32, row sums, row maxima; query block
    K,
    V,
    kv_base,
    n_start,
    kv_count,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Online-softmax update with key rows [n_start, n_start + BLOCK_N) of one key tile."""
    offs_d = tl.arange(0, HEAD_DIM)
    cols = n_start + tl.arange(0, BLOCK_N)
    kv_cols = cols < kv_count  # padding slots are neither loaded nor weighted
    k = tl.load(K + kv_base + cols[None, :] * HEAD_DIM + offs_d[:, None], mask=kv_cols[None, :], other=0.0)
    if UPCAST_DOT:  # exact: bf16 x bf16 products fit fp32, as on tensor cores
        qk = tl.dot(q.to(tl.float32), k.to(tl.float32), input_precision="ieee")
    else:
        qk = tl.dot(q, k, input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N) fp32
    qk = tl.where(kv_cols[None, :], qk * qk_scale, float("-inf"))
    # Every key tile has >= 1 valid key, so m_new is finite and, on the first block,
    # alpha = exp2(-inf) = 0 wipes the empty initial state: no NaN.
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(V + kv_base + cols[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_cols[:, None], other=0.0)
    p = p.to(v.dtype)  # P rounded to the input dtype, as in FlashAttention
    if UPCAST_DOT:
        acc = tl.dot(p.to(tl.float32), v.to(tl.float32), acc * alpha[:, None], input_precision="ieee")
    else:
        acc = tl.dot(p, v, acc * alpha[:, None], input_precision=DOT_PRECISION)
    return acc, l_i, m_new


@triton.jit
def _block_sparse_attention_fwd(
    Q,  # (BH, n_tiles, tile_volume, HEAD_DIM)
    K,  # (BH, n_tiles, tile_volume, HEAD_DIM)
    V,  # (BH, n_tiles, tile_volume, HEAD_DIM)
    Out,  # (BH, n_tiles, tile_volume, HEAD_DIM)
    KV_IDX,  # (BH, n_tiles, k_sel) int32
    COUNTS,  # (n_tiles,) int32 valid tokens per tile
    qk_scale,  # log2(e) / sqrt(d)
    num_tiles,
    k_sel,
    tile_volume,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ONE_BLOCK_PER_TILE: tl.constexpr,  # tile_volume <= BLOCK_N
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    pid_m = tl.program_id(0)  # query tile * m_splits + row block
    bh = tl.program_id(1)
    m_splits = tl.cdiv(tile_volume, BLOCK_M)
    q_tile = pid_m // m_splits
    q_count = tl.load(COUNTS + q_tile)
    tile_stride = tile_volume * HEAD_DIM
    bh_offset = bh.to(tl.int64) * num_tiles * tile_stride

    offs_m = (pid_m % m_splits) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_rows = offs_m < q_count
    q_base = bh_offset + q_tile.to(tl.int64) * tile_stride
    q = tl.load(Q + q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=q_rows[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    kv_idx_row = KV_IDX + (bh.to(tl.int64) * num_tiles + q_tile) * k_sel
    if ONE_BLOCK_PER_TILE:
        # The common case (4x4x4 tiles, BLOCK_N = 64): one flat loop over the selected
        # tiles, which Triton's software pipeliner can overlap across tiles.
        for s in range(0, k_sel):
            kv_tile = tl.load(kv_idx_row + s)
            kv_count = tl.load(COUNTS + kv_tile)
            kv_base = bh_offset + kv_tile.to(tl.int64) * tile_stride
            acc, l_i, m_i = _attend_key_block(
                acc,
                l_i,
                m_i,
                q,
                K,
                V,
                kv_base,
                0,
                kv_count,
                qk_scale,
                HEAD_DIM,
                BLOCK_N,
                DOT_PRECISION,
                UPCAST_DOT,
            )
    else:
        for s in range(0, k_sel):
            kv_tile = tl.load(kv_idx_row + s)
            kv_count = tl.load(COUNTS + kv_tile)
            kv_base = bh_offset + kv_tile.to(tl.int64) * tile_stride
            for n_start in range(0, kv_count, BLOCK_N):  # only the valid part of the tile
                acc, l_i, m_i = _attend_key_block(
                    acc,
                    l_i,
                    m_i,
                    q,
                    K,
                    V,
                    kv_base,
                    n_start,
                    kv_count,
                    qk_scale,
                    HEAD_DIM,
                    BLOCK_N,
                    DOT_PRECISION,
                    UPCAST_DOT,
                )

    acc = acc / l_i[:, None]
    out_ptrs = Out + q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(out_ptrs, acc.to(Out.dtype.element_ty), mask=q_rows[:, None])


# Launch configs autotuned on CUDA; benchmarks/gpu_check.sh reports the winner and its throughput
# (docs/kernels.md has no GPU figures yet). The interpreter runs the bare kernel.
_CONFIGS = [triton.Config({}, num_warps=w, num_stages=s) for w in (4, 8) for s in (2, 3)]
_block_sparse_attention_fwd_tuned = triton.autotune(
    _CONFIGS, key=["HEAD_DIM", "BLOCK_M", "BLOCK_N", "ONE_BLOCK_PER_TILE", "DOT_PRECISION", "k_sel"]
)(_block_sparse_attention_fwd)


def is_interpreting() -> bool:
    """True when Triton runs kernels on the CPU (``TRITON_INTERPRET=1``).

    The only place in ``kernels`` that looks at the environment: recent Triton (3.9
    here) exposes it as ``triton.knobs``; for older releases (pyproject allows >= 3.2)
    the variable is read directly.
    """
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _block_size(tile_volume: int) -> int:
    # tl.dot needs every dimension >= 16; 64 matches a 4x4x4 tile exactly.
    return max(16, min(64, triton.next_power_of_2(tile_volume)))


def block_sparse_attention_triton(
    q_tiles: torch.Tensor,
    k_tiles: torch.Tensor,
    v_tiles: torch.Tensor,
    kv_indices: torch.Tensor,
    valid_counts: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Launch the kernel; inputs already validated by ``kernels.attention``.

    ``q_tiles, k_tiles, v_tiles``: ``(B, heads, n_tiles, tile_volume, d)``;
    ``kv_indices``: ``(B, heads, n_tiles, k_sel)``; ``valid_counts``: ``(n_tiles,)``.
    Returns ``(B, heads, n_tiles, tile_volume, d)`` in the input dtype, padding rows zero.
    """
    B, Hd, T, Vol, d = q_tiles.shape
    k_sel = kv_indices.shape[-1]
    q, k, v = (rearrange(t, "b h t v d -> (b h) t v d").contiguous() for t in (q_tiles, k_tiles, v_tiles))
    idx = rearrange(kv_indices, "b h t s -> (b h) t s").to(torch.int32).contiguous()  # (BH, n_tiles, k_sel)
    counts = valid_counts.to(device=q.device, dtype=torch.int32).contiguous()
    out = torch.zeros_like(q)
    block = _block_size(Vol)
    grid = (T * triton.cdiv(Vol, block), B * Hd)
    kernel_args = (q, k, v, out, idx, counts, scale * LOG2_E, T, k_sel, Vol)
    meta = dict(
        HEAD_DIM=d,
        BLOCK_M=block,
        BLOCK_N=block,
        ONE_BLOCK_PER_TILE=Vol <= block,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        # Triton 3.9's interpreter returns garbage from tl.dot on bf16 operands (fp16 and
        # fp32 are fine); upcasting there is exact and changes nothing on the GPU.
        UPCAST_DOT=is_interpreting() and q.dtype == torch.bfloat16,
    )
    if is_interpreting():
        _block_sparse_attention_fwd[grid](*kernel_args, **meta)
    else:
        _block_sparse_attention_fwd_tuned[grid](*kernel_args, **meta)
    return rearrange(out, "(b h) t v d -> b h t v d", b=B)

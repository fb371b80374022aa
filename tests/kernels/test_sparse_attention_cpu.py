"""CPU backend (gather + batched GEMM) against the fp32 masked-dense reference."""

import pytest
import torch
import torch.nn.functional as F

from videogen.kernels import (
    TileLayout,
    block_sparse_attention,
    block_sparse_cpu,
    select_topk_tiles,
    sparse_video_attention,
)
from videogen.kernels.reference import reference_block_sparse_attention

RAGGED_GRIDS = [(5, 6, 7), (3, 5, 9), (6, 8, 13)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("density", [0.125, 0.25, 1.0])
@pytest.mark.parametrize("d", [32, 64, 128])
@pytest.mark.parametrize("grid", RAGGED_GRIDS)
def test_cpu_matches_reference_on_ragged_grids(grid, d, density, dtype, assert_matches_reference, make_qkv):
    q, k, v = make_qkv(grid, batch=1, heads=2, d=d, dtype=dtype)
    out = sparse_video_attention(q, k, v, grid=grid, tile=(4, 4, 4), density=density, backend="cpu")
    assert_matches_reference(out, q, k, v, grid, (4, 4, 4), density)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_handles_several_batches_and_heads(dtype, assert_matches_reference, make_qkv):
    grid = (6, 8, 13)
    q, k, v = make_qkv(grid, batch=2, heads=3, d=64, dtype=dtype)
    out = sparse_video_attention(q, k, v, grid=grid, density=0.25, backend="cpu")
    assert_matches_reference(out, q, k, v, grid, (4, 4, 4), 0.25)


@pytest.mark.parametrize(
    "grid,tile",
    [((5, 7, 9), (2, 3, 4)), ((5, 6, 9), (4, 4, 8)), ((4, 4, 4), (4, 4, 4)), ((1, 7, 11), (1, 3, 5))],
)
def test_cpu_matches_reference_for_other_tile_shapes(grid, tile, assert_matches_reference, make_qkv):
    q, k, v = make_qkv(grid, batch=1, heads=2, d=48, dtype=torch.float32)
    out = sparse_video_attention(q, k, v, grid=grid, tile=tile, density=0.3, backend="cpu")
    assert_matches_reference(out, q, k, v, grid, tile, 0.3)


def test_cpu_chunking_does_not_change_the_result(monkeypatch, assert_matches_reference, make_qkv):
    grid = (6, 8, 13)
    q, k, v = make_qkv(grid, batch=2, heads=2, d=32, dtype=torch.float32)
    monkeypatch.setattr(block_sparse_cpu, "CHUNK_ELEMENTS", 1)  # one item per chunk
    monkeypatch.setattr(block_sparse_cpu, "INDEX_GROUP_ITEMS", 3)
    out = sparse_video_attention(q, k, v, grid=grid, density=0.25, backend="cpu")
    assert_matches_reference(out, q, k, v, grid, (4, 4, 4), 0.25)


@pytest.mark.parametrize("backend", ["cpu", "reference", "auto"])
def test_density_one_is_dense_attention(backend, make_qkv):
    grid = (3, 5, 9)
    q, k, v = make_qkv(grid, batch=2, heads=2, d=64, dtype=torch.float32)
    out = sparse_video_attention(q, k, v, grid=grid, density=1.0, backend=backend)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_padding_slots_receive_no_weight(backend, make_qkv):
    grid, tile = (5, 6, 7), (4, 4, 4)
    layout = TileLayout.build(grid, tile)
    q, k, v = make_qkv(grid, batch=1, heads=2, d=32, dtype=torch.float32)
    kv = select_topk_tiles(q, k, layout, 0.5)
    clean = [layout.to_tiles(t) for t in (q, k, v)]
    # Keys that would dominate every softmax and values that would dominate every output.
    poisoned = [layout.to_tiles(q), layout.to_tiles(k, pad_value=1e4), layout.to_tiles(v, pad_value=1e6)]
    out = block_sparse_attention(*poisoned, kv, layout.valid_counts, backend=backend)
    expected = reference_block_sparse_attention(*clean, kv, layout.valid_counts, scale=32**-0.5)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert torch.all(out[:, :, ~layout.valid_slot_mask()] == 0)


def test_block_sparse_attention_on_tiles_matches_sparse_video_attention(make_qkv):
    grid = (6, 8, 13)
    layout = TileLayout.build(grid, (4, 4, 4))
    q, k, v = make_qkv(grid, batch=1, heads=2, d=32, dtype=torch.float32)
    kv = select_topk_tiles(q, k, layout, 0.25)
    tiles = block_sparse_attention(*(layout.to_tiles(t) for t in (q, k, v)), kv, layout.valid_counts, backend="cpu")
    expected = sparse_video_attention(q, k, v, grid=grid, density=0.25, backend="cpu")
    torch.testing.assert_close(layout.from_tiles(tiles), expected, atol=1e-6, rtol=1e-6)


def test_non_contiguous_inputs_give_the_same_result(make_qkv):
    grid = (5, 6, 7)
    q, k, v = make_qkv(grid, batch=2, heads=3, d=32, dtype=torch.float32)
    # (B, N, heads, d) storage seen as (B, heads, N, d), as attention processors produce it.
    strided = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]
    assert not strided[0].is_contiguous()
    expected = sparse_video_attention(q, k, v, grid=grid, density=0.25, backend="cpu")
    torch.testing.assert_close(sparse_video_attention(*strided, grid=grid, density=0.25, backend="cpu"), expected)


@pytest.mark.parametrize("threads", [2, 3])
def test_cpu_split_across_threads_matches_reference_and_restores_the_thread_count(
    threads, assert_matches_reference, make_qkv
):
    """With several torch threads the work is split over Python threads (one per core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        grid = (6, 8, 13)
        q, k, v = make_qkv(grid, batch=2, heads=3, d=64, dtype=torch.float32)
        out = sparse_video_attention(q, k, v, grid=grid, density=0.125, backend="cpu")
        assert_matches_reference(out, q, k, v, grid, (4, 4, 4), 0.125)
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)

"""Bad input raises ValueError naming the argument and showing the values."""

import pytest
import torch

from videogen.kernels import TileLayout, block_sparse_attention, sparse_video_attention
from videogen.kernels.block_sparse_triton import is_interpreting


def _qkv(n=210, d=32, dtype=torch.float32):
    return tuple(torch.randn(1, 2, n, d, dtype=dtype) for _ in range(3))


def test_grid_whose_product_is_not_n():
    q, k, v = _qkv(n=200)
    with pytest.raises(ValueError, match=r"`grid` \(5, 6, 7\) has 210 tokens but q has N=200"):
        sparse_video_attention(q, k, v, grid=(5, 6, 7))


@pytest.mark.parametrize("grid", [(5, 42), (5, 6, 7, 1), (0, 6, 35), (5.0, 6, 7), "567"])
def test_grid_that_is_not_three_positive_integers(grid):
    with pytest.raises(ValueError, match="`grid` must be 3 positive integers"):
        sparse_video_attention(*_qkv(), grid=grid)


@pytest.mark.parametrize("density", [0, 0.0, -0.1, 1.5, float("nan")])
def test_density_outside_zero_one(density):
    with pytest.raises(ValueError, match=r"`density` must be in \(0, 1\] but is"):
        sparse_video_attention(*_qkv(), grid=(5, 6, 7), density=density)


def test_tile_larger_than_the_grid():
    with pytest.raises(ValueError, match=r"`tile` \(8, 8, 8\) is larger than `grid` \(5, 6, 7\)"):
        sparse_video_attention(*_qkv(), grid=(5, 6, 7), tile=(8, 8, 8))


def test_tile_longer_than_one_grid_dimension_is_a_ragged_tile_not_an_error():
    out = sparse_video_attention(*_qkv(n=135), grid=(3, 5, 9), tile=(4, 4, 4), backend="cpu")
    assert out.shape == (1, 2, 135, 32)


@pytest.mark.parametrize("tile", [(4, 4), (4, 0, 4), (4, -1, 4)])
def test_tile_that_is_not_three_positive_integers(tile):
    with pytest.raises(ValueError, match="`tile` must be 3 positive integers"):
        sparse_video_attention(*_qkv(), grid=(5, 6, 7), tile=tile)


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"`backend` must be one of .* but is 'cuda'"):
        sparse_video_attention(*_qkv(), grid=(5, 6, 7), backend="cuda")


def test_mismatched_shapes():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"`k` shape \(1, 2, 210, 16\) must equal `q` shape \(1, 2, 210, 32\)"):
        sparse_video_attention(q, k[..., :16], v, grid=(5, 6, 7))


def test_wrong_rank():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"`q` must have shape \(B, heads, N, d\) but has shape \(2, 210, 32\)"):
        sparse_video_attention(q[0], k[0], v[0], grid=(5, 6, 7))


def test_mismatched_dtypes():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"`v` dtype torch\.float16 must equal `q` dtype torch\.float32"):
        sparse_video_attention(q, k, v.half(), grid=(5, 6, 7))


def test_integer_inputs():
    q = torch.ones(1, 2, 210, 32, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"`q` must be a floating-point tensor but has dtype torch\.int64"):
        sparse_video_attention(q, q, q, grid=(5, 6, 7))


def test_mismatched_devices():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="`k` device meta must equal `q` device cpu"):
        sparse_video_attention(q, k.to("meta"), v, grid=(5, 6, 7))


def test_head_dim_the_triton_backend_cannot_take():
    with pytest.raises(ValueError, match=r"`q` head dim d=48 is not supported by backend 'triton'"):
        sparse_video_attention(*_qkv(d=48), grid=(5, 6, 7), backend="triton")


@pytest.mark.skipif(torch.cuda.is_available() or is_interpreting(), reason="CPU tensors are valid here")
def test_triton_backend_on_cpu_tensors_without_the_interpreter():
    with pytest.raises(ValueError, match=r"backend 'triton' needs CUDA tensors .* but `q` is on cpu"):
        sparse_video_attention(*_qkv(), grid=(5, 6, 7), backend="triton")


def test_block_sparse_attention_rejects_out_of_range_tile_indices():
    layout = TileLayout.build((5, 6, 7), (4, 4, 4))
    tiles = [layout.to_tiles(t) for t in _qkv()]
    kv = torch.full((1, 2, 8, 2), 8)
    with pytest.raises(ValueError, match=r"`kv_indices` values must be in \[0, 8\) but span \[8, 8\]"):
        block_sparse_attention(*tiles, kv, layout.valid_counts, backend="cpu")


def test_block_sparse_attention_rejects_misshaped_tile_indices():
    layout = TileLayout.build((5, 6, 7), (4, 4, 4))
    tiles = [layout.to_tiles(t) for t in _qkv()]
    with pytest.raises(ValueError, match=r"`kv_indices` must be an integer tensor of shape"):
        block_sparse_attention(*tiles, torch.zeros(1, 2, 7, 2, dtype=torch.int64), layout.valid_counts)


def test_block_sparse_attention_rejects_bad_valid_counts():
    layout = TileLayout.build((5, 6, 7), (4, 4, 4))
    tiles = [layout.to_tiles(t) for t in _qkv()]
    kv = torch.zeros(1, 2, 8, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"`valid_counts` values must be in \[1, 64\] but span \[0, 64\]"):
        block_sparse_attention(*tiles, kv, torch.tensor([64, 0, 1, 1, 1, 1, 1, 1]))


def test_fast_backends_are_forward_only():
    q, k, v = _qkv()
    q.requires_grad_(True)
    with pytest.raises(ValueError, match="`q` requires grad but backend 'cpu' is forward-only"):
        sparse_video_attention(q, k, v, grid=(5, 6, 7), backend="cpu")
    with pytest.raises(ValueError, match="`v` requires grad but backend 'cpu' is forward-only"):
        sparse_video_attention(q.detach(), k, v.requires_grad_(True), grid=(5, 6, 7), backend="cpu")
    with torch.no_grad():
        sparse_video_attention(q, k, v, grid=(5, 6, 7), backend="cpu")

"""Triton backend against the fp32 masked-dense reference.

Runs on CUDA when present; otherwise only under ``TRITON_INTERPRET=1`` (set before
Triton is imported), which ``test_triton_interpreter.py`` arranges in a subprocess.
Interpreter shapes are kept small: it executes every tile op in numpy.
"""

import pytest
import torch
import torch.nn.functional as F

from videogen.kernels import TileLayout, block_sparse_attention, select_topk_tiles, sparse_video_attention
from videogen.kernels.block_sparse_triton import is_interpreting
from videogen.kernels.reference import reference_block_sparse_attention

ON_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if ON_CUDA else "cpu"
pytestmark = pytest.mark.skipif(
    not (ON_CUDA or is_interpreting()),
    reason="needs CUDA or TRITON_INTERPRET=1 (test_triton_interpreter.py runs this module with it)",
)

# (grid, tile, d, density, dtype): ragged grids, head dims 16..256, the three dtypes,
# a tile that is not a power of two (24 slots) and one bigger than a block (128 slots).
CASES = [
    ((5, 6, 7), (4, 4, 4), 32, 0.25, torch.float32),
    ((3, 5, 9), (4, 4, 4), 64, 0.125, torch.bfloat16),
    ((6, 8, 13), (4, 4, 4), 32, 0.125, torch.float16),
    ((3, 5, 9), (4, 4, 4), 128, 0.5, torch.bfloat16),
    ((4, 4, 5), (4, 4, 4), 128, 1.0, torch.float32),
    ((3, 5, 9), (4, 4, 4), 64, 1.0, torch.float16),
    ((5, 6, 7), (4, 4, 4), 32, 0.125, torch.bfloat16),
    ((6, 8, 13), (4, 4, 4), 64, 0.25, torch.float32),
    ((6, 8, 13), (4, 4, 4), 128, 0.125, torch.float16),
    ((3, 5, 9), (4, 4, 4), 32, 1.0, torch.bfloat16),
    ((5, 7, 9), (2, 3, 4), 16, 0.25, torch.float32),
    ((5, 6, 9), (4, 4, 8), 32, 0.5, torch.bfloat16),
    ((3, 5, 9), (4, 4, 4), 256, 0.5, torch.float16),
]


@pytest.mark.parametrize("grid,tile,d,density,dtype", CASES, ids=lambda x: str(x).replace("torch.", ""))
def test_triton_matches_reference(grid, tile, d, density, dtype, assert_matches_reference, make_qkv):
    q, k, v = make_qkv(grid, batch=1, heads=2, d=d, dtype=dtype, device=DEVICE)
    out = sparse_video_attention(q, k, v, grid=grid, tile=tile, density=density, backend="triton")
    assert_matches_reference(out, q, k, v, grid, tile, density)


def test_triton_handles_several_batches_and_heads(assert_matches_reference, make_qkv):
    grid = (5, 6, 7)
    q, k, v = make_qkv(grid, batch=2, heads=3, d=32, dtype=torch.float32, device=DEVICE)
    out = sparse_video_attention(q, k, v, grid=grid, density=0.25, backend="triton")
    assert_matches_reference(out, q, k, v, grid, (4, 4, 4), 0.25)


def test_triton_density_one_is_dense_attention(make_qkv):
    grid = (3, 5, 9)
    q, k, v = make_qkv(grid, batch=1, heads=2, d=32, dtype=torch.float32, device=DEVICE)
    out = sparse_video_attention(q, k, v, grid=grid, density=1.0, backend="triton")
    # SDPA's CUDA kernels sum in their own order; on CPU both are within 1e-6.
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-4, rtol=1e-4)


def test_triton_padding_slots_receive_no_weight(make_qkv):
    grid = (5, 6, 7)
    layout = TileLayout.build(grid, (4, 4, 4), DEVICE)
    q, k, v = make_qkv(grid, batch=1, heads=2, d=32, dtype=torch.float32, device=DEVICE)
    kv = select_topk_tiles(q, k, layout, 0.5)
    clean = [layout.to_tiles(t) for t in (q, k, v)]
    poisoned = [layout.to_tiles(q, pad_value=1e4), layout.to_tiles(k, pad_value=1e4), layout.to_tiles(v, 1e6)]
    out = block_sparse_attention(*poisoned, kv, layout.valid_counts, backend="triton")
    expected = reference_block_sparse_attention(*clean, kv, layout.valid_counts, scale=32**-0.5)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert torch.all(out[:, :, ~layout.valid_slot_mask()] == 0)


def test_selection_on_the_device_matches_the_cpu_selection(make_qkv):
    # On CUDA, tile means take the deterministic padded-sum path instead of index_add_.
    grid = (6, 8, 13)
    q, k, _ = make_qkv(grid, batch=1, heads=2, d=32, dtype=torch.float32, device=DEVICE)
    on_device = TileLayout.build(grid, (4, 4, 4), DEVICE)
    on_cpu = TileLayout.build(grid, (4, 4, 4), "cpu")
    torch.testing.assert_close(on_device.tile_means(q).cpu(), on_cpu.tile_means(q.cpu()), atol=1e-6, rtol=1e-6)
    assert torch.equal(
        select_topk_tiles(q, k, on_device, 0.25).cpu(), select_topk_tiles(q.cpu(), k.cpu(), on_cpu, 0.25)
    )

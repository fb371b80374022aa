"""select_topk_tiles: pooled scores, exact top-k counts, deterministic tie rule."""

import math

import pytest
import torch

from videogen.kernels import TileLayout, num_selected_tiles, select_topk_tiles, tile_scores


def _tile_constant_k(layout: TileLayout, per_tile: list[float], d: int) -> torch.Tensor:
    """k whose every token in tile j equals per_tile[j] in all d channels: (1, 1, N, d)."""
    values = torch.tensor(per_tile)[layout.tile_of_token]  # (N,)
    return values[None, None, :, None].expand(1, 1, layout.num_tokens, d).contiguous()


@pytest.mark.parametrize("density", [0.05, 0.125, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("grid", [(5, 6, 7), (6, 8, 13), (21, 30, 52)])
def test_each_query_tile_selects_exactly_ceil_density_times_n_tiles_distinct_tiles(grid, density):
    layout = TileLayout.build(grid, (4, 4, 4))
    q, k = torch.randn(2, 2, layout.num_tokens, 16), torch.randn(2, 2, layout.num_tokens, 16)
    kv = select_topk_tiles(q, k, layout, density)
    k_sel = math.ceil(density * layout.num_tiles)
    assert kv.shape == (2, 2, layout.num_tiles, k_sel) and kv.dtype == torch.int64
    assert torch.all(kv.sort(-1).values.diff(dim=-1) > 0)  # distinct tiles


def test_selected_tiles_are_the_highest_scores_in_descending_order():
    layout = TileLayout.build((6, 8, 13), (4, 4, 4))
    q, k = torch.randn(1, 2, layout.num_tokens, 32), torch.randn(1, 2, layout.num_tokens, 32)
    kv = select_topk_tiles(q, k, layout, 0.25)
    scores = tile_scores(q, k, layout)
    picked = scores.gather(-1, kv)
    assert torch.all(picked.diff(dim=-1) <= 0)
    assert torch.equal(picked, scores.topk(kv.shape[-1], dim=-1).values)


def test_scores_are_tile_mean_dot_products_over_sqrt_d():
    layout = TileLayout.build((5, 6, 7), (4, 4, 4))
    q, k = torch.randn(1, 1, 210, 8), torch.randn(1, 1, 210, 8)
    qm, km = layout.tile_means(q)[0, 0], layout.tile_means(k)[0, 0]
    torch.testing.assert_close(tile_scores(q, k, layout)[0, 0], qm @ km.T / math.sqrt(8))


def test_ties_go_to_the_lower_tile_index():
    layout = TileLayout.build((8, 8, 8), (4, 4, 4))  # 8 tiles
    q = torch.ones(1, 1, layout.num_tokens, 4)
    # Scores are proportional to these values: three tiles tie at 5, two at 3.
    k = _tile_constant_k(layout, [1.0, 5.0, 3.0, 5.0, 3.0, 0.0, 5.0, 1.0], d=4)
    kv = select_topk_tiles(q, k, layout, density=0.5)  # 4 tiles
    assert kv[0, 0, 0].tolist() == [1, 3, 6, 2]


def test_all_equal_scores_select_the_first_tiles():
    layout = TileLayout.build((6, 8, 13), (4, 4, 4))  # 16 tiles
    q, k = torch.ones(1, 1, layout.num_tokens, 8), torch.ones(1, 1, layout.num_tokens, 8)
    kv = select_topk_tiles(q, k, layout, density=0.25)
    assert torch.all(kv == torch.arange(4))


def test_ragged_tile_scores_use_the_mean_over_valid_tokens_only():
    layout = TileLayout.build((5, 6, 7), (4, 4, 4))  # last tile holds 6 of 64 slots
    q = torch.ones(1, 1, 210, 4)
    k = _tile_constant_k(layout, [1.0] * 7 + [2.0], d=4)
    # Mean over valid tokens: 2.0 (the top score). Over all 64 slots it would be 0.19.
    kv = select_topk_tiles(q, k, layout, density=0.125)  # 1 tile
    assert torch.all(kv == 7)


def test_selected_tile_count_ignores_float_noise():
    assert 0.07 * 100 > 7  # 7.000000000000001
    assert num_selected_tiles(0.07, 100) == 7
    assert num_selected_tiles(0.125, 624) == 78
    assert num_selected_tiles(0.001, 10) == 1

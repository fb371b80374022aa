"""TileLayout: raster tokens <-> padded tile-ordered slots, ragged edge tiles."""

import itertools

import pytest
import torch

from videogen.kernels import TileLayout


def test_tiles_are_numbered_in_raster_order_over_the_tile_grid_with_raster_order_inside():
    grid, tile = (5, 6, 7), (4, 4, 4)
    layout = TileLayout.build(grid, tile)
    assert layout.tile_grid == (2, 2, 2) and layout.num_tiles == 8 and layout.tile_volume == 64
    seen_per_tile = [0] * layout.num_tiles
    for f, h, w in itertools.product(*(range(g) for g in grid)):  # raster order
        n = (f * grid[1] + h) * grid[2] + w
        t = ((f // 4) * 2 + h // 4) * 2 + w // 4
        assert layout.tile_of_token[n] == t
        # Tokens fill their tile's slots in raster order, valid ones first.
        assert layout.slot_of_token[n] == t * 64 + seen_per_tile[t]
        seen_per_tile[t] += 1
    assert layout.valid_counts.tolist() == seen_per_tile


def test_ragged_edge_tiles_are_smaller():
    layout = TileLayout.build((5, 6, 7), (4, 4, 4))
    # Last tile along f has 1 frame, along h 2 rows, along w 3 columns.
    assert layout.valid_counts.tolist() == [64, 48, 32, 24, 16, 12, 8, 6]


def test_wan_480p_grid_has_624_tiles_with_169_partial():
    layout = TileLayout.build((21, 30, 52), (4, 4, 4))
    assert layout.num_tiles == 624
    assert int((layout.valid_counts < 64).sum()) == 169
    assert int(layout.valid_counts.sum()) == 21 * 30 * 52


@pytest.mark.parametrize("grid,tile", [((5, 6, 7), (4, 4, 4)), ((3, 5, 9), (2, 3, 4)), ((4, 4, 4), (4, 4, 4))])
def test_to_tiles_then_from_tiles_is_the_identity_and_padding_holds_the_pad_value(grid, tile):
    layout = TileLayout.build(grid, tile)
    x = torch.randn(2, 3, layout.num_tokens, 8)
    tiles = layout.to_tiles(x, pad_value=-7.0)
    assert tiles.shape == (2, 3, layout.num_tiles, layout.tile_volume, 8)
    assert torch.equal(layout.from_tiles(tiles), x)
    padding = ~layout.valid_slot_mask()
    assert torch.all(tiles[:, :, padding] == -7.0)
    real = layout.tile_tokens[layout.valid_slot_mask()]
    assert sorted(real.tolist()) == list(range(layout.num_tokens))
    assert torch.all(layout.tile_tokens[padding] == -1)


def test_tile_means_average_only_the_valid_tokens_of_ragged_tiles():
    grid = (5, 6, 7)
    layout = TileLayout.build(grid, (4, 4, 4))
    x = torch.randn(1, 1, 210, 4)
    means = layout.tile_means(x)  # (1, 1, 8, 4)
    box = x.view(5, 6, 7, 4)
    # Last tile: f in [4, 5), h in [4, 6), w in [4, 7): 6 tokens.
    expected = box[4:5, 4:6, 4:7].reshape(-1, 4).mean(0)
    torch.testing.assert_close(means[0, 0, 7], expected)


def test_layouts_are_cached_per_grid_tile_and_device():
    assert TileLayout.build((5, 6, 7), (4, 4, 4)) is TileLayout.build([5, 6, 7], (4, 4, 4))

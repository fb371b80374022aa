"""A start image (`--image`) of another aspect ratio: cover (default) keeps the centre, stretch
distorts, contain letterboxes; checked pixel by pixel on synthetic stripes."""

import numpy as np
import pytest
from PIL import Image

from videogen import RenderSpec
from videogen.config.resolve import resolve_render
from videogen.errors import InvalidOption
from videogen.rendering.image import fit_image

COLOURS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0],
                    [0, 255, 255], [255, 0, 255], [255, 255, 255], [128, 64, 32]], np.uint8)  # fmt: skip


def stripes(width: int, height: int) -> Image.Image:
    """A width x height image of 8 vertical stripes, one colour each (left to right: COLOURS)."""
    cols = np.repeat(np.arange(8), width // 8)  # (width,) stripe index per column
    return Image.fromarray(np.broadcast_to(COLOURS[cols][None], (height, width, 3)).copy())


def test_cover_keeps_the_centre_of_a_wide_image_exactly():
    # 2:1 into 1:1 at scale 1: no resampling, the frame is the image's centre 64 columns
    img = stripes(128, 64)
    frame = fit_image(img, 64, 64)
    assert frame.shape == (64, 64, 3)
    assert np.array_equal(frame, np.asarray(img)[:, 32:96])
    assert np.array_equal(frame[0, ::16], COLOURS[[2, 3, 4, 5]])  # stripes 2..5 of 8: the outer quarters are cut


def test_cover_scales_down_then_keeps_the_centre():
    # 256x128 -> 128x64 (16-pixel stripes), centre 64 columns: stripes 2..5; inside each stripe, away
    # from Lanczos' 3-pixel reach across a stripe edge, the colour is exact
    frame = fit_image(stripes(256, 128), 64, 64)
    for k, stripe in enumerate([2, 3, 4, 5]):
        inner = frame[:, 16 * k + 4 : 16 * k + 12]
        assert np.array_equal(inner, np.broadcast_to(COLOURS[stripe], inner.shape)), stripe


def test_stretch_squeezes_every_stripe_in_and_contain_adds_black_bars():
    img = stripes(128, 64)
    stretched = fit_image(img, 64, 64, "stretch")  # every stripe kept, half as wide (8 pixels)
    for stripe in range(8):
        inner = stretched[:, 8 * stripe + 3 : 8 * stripe + 5]
        assert np.array_equal(inner, np.broadcast_to(COLOURS[stripe], inner.shape)), stripe
    contained = fit_image(img, 64, 64, "contain")  # 64x32 image centred: rows 16..47, black above and below
    assert contained[:16].max() == 0 and contained[48:].max() == 0
    assert np.array_equal(contained[16:48, 8 * 7 + 3], np.broadcast_to(COLOURS[7], (32, 3)))
    assert np.array_equal(contained[16:48, 3], np.broadcast_to(COLOURS[0], (32, 3)))


def test_image_fit_is_a_validated_option_defaulting_to_cover(tmp_path):
    path = tmp_path / "wide.png"
    stripes(128, 64).save(path)
    assert resolve_render(RenderSpec.single("a cat", 2.0, image=str(path))).image_fit == "cover"
    assert resolve_render(RenderSpec.single("a cat", 2.0, image=str(path), image_fit="stretch")).image_fit == "stretch"
    with pytest.raises(InvalidOption) as err:
        resolve_render(RenderSpec.single("a cat", 2.0, image=str(path), image_fit="fill"))
    assert err.value.option == "image_fit"

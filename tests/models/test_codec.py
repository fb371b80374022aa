"""The built-in pixel codec is lossless and follows Wan's causal frame rule."""

import pytest
import torch

from videogen.models.codec import PixelCodec


def test_pixel_codec_round_trip_is_exact():
    codec = PixelCodec(4, 4)
    video = torch.rand(1, 3, 17, 16, 24) * 2 - 1  # 4*4+1 frames
    latents = codec.encode(video)
    assert latents.shape == (1, 192, 5, 4, 6)  # (17-1)/4+1 latent frames, 16/4 x 24/4
    assert torch.equal(codec.decode(latents), video)


def test_a_handed_over_prefix_decodes_to_the_frames_it_came_from():
    """A mid-clip latent frame placed first decodes to its last frame: the prefix of the next
    segment reproduces the end of the previous one exactly (overlap O = 4(P-1)+1)."""
    codec = PixelCodec(4, 4)
    video = torch.rand(1, 3, 21, 8, 8) * 2 - 1
    latents = codec.encode(video)  # 6 latent frames
    prefix = latents[:, :, -2:]  # P = 2 -> O = 5 frames
    assert torch.equal(codec.decode(prefix), video[:, :, -5:])


def test_pixel_codec_rejects_illegal_frame_counts():
    with pytest.raises(ValueError, match="4k\\+1"):
        PixelCodec(4, 4).encode(torch.zeros(1, 3, 8, 8, 8))

"""`videogen train decoder` (`videogen.training.decoder`): pairs of the transformer's own output and
the truth, a deterministic run, and a decoder that loads into the codec."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from videogen.models.builtin import is_trained
from videogen.models.codec import PixelCodec, uint8_to_video
from videogen.models.refiner import load_refiner
from videogen.training.decoder import FRAMES, DecoderConfig, make_pairs, train_decoder
from videogen.training.scenes import parse_caption, render_scene

pytestmark = pytest.mark.skipif(not is_trained(), reason="the pairs are the shipped transformer's output")


def test_pairs_are_the_transformers_drawing_of_the_clip_it_was_shown():
    model, truth, captions = make_pairs(DecoderConfig(), 8, seed=3)
    assert model.shape == truth.shape == (8, FRAMES, 64, 64, 3) and len(captions) == 8
    for clip, caption in zip(truth, captions):  # the truth is the caption's scene
        parse_caption(caption)
        assert clip.std() > 0
    error = np.abs(model.astype(int) - truth).mean(axis=(1, 2, 3, 4))
    assert (error < 12).all(), error  # low noise: the model redraws the clip (measured 1.9-8.1 levels)
    assert (error > 0.5).all(), error  # ... in its own hand, not a copy
    again, _, _ = make_pairs(DecoderConfig(), 8, seed=3)
    assert np.array_equal(again, model)
    assert not np.array_equal(make_pairs(DecoderConfig(), 8, seed=4)[1], truth)


def test_a_short_run_is_deterministic_and_writes_a_decoder_the_codec_uses(tmp_path):
    cfg = DecoderConfig(clips=8, held_out=8, stages=((3, 2e-3), (2, 1e-3)), batch=4)
    logs: list[str] = []
    a = train_decoder(cfg, tmp_path / "a.safetensors", log=logs.append)
    b = train_decoder(cfg, tmp_path / "b.safetensors", log=lambda _: None)
    ra, rb = load_refiner(a), load_refiner(b)
    assert all(torch.equal(x, y) for x, y in zip(ra.state_dict().values(), rb.state_dict().values()))
    assert ra.out.weight.abs().sum() > 0  # it moved off the identity it starts from
    assert any("stage 2: held-out error" in line for line in logs), logs
    video = uint8_to_video(render_scene(parse_caption("a red square moving right on a blue background"), 17, 64))
    decoded = PixelCodec(refiner=ra).decode(PixelCodec().encode(video))
    assert decoded.shape == video.shape and torch.isfinite(decoded).all()

"""The built-in codec's temporal decoder (`videogen.models.refiner`): causal, chunk-consistent,
the identity untrained, and (the shipped file) spreading the model's 4-frame steps over frames."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from videogen.models.builtin import WEIGHTS_DIR
from videogen.models.codec import PixelCodec, uint8_to_video, video_to_uint8
from videogen.models.refiner import GROUP, TemporalRefiner, load_refiner, save_refiner
from videogen.training.scenes import motion_smoothness, parse_caption, track_colour

SHIPPED = WEIGHTS_DIR / "builtin_decoder.safetensors"


def _random_refiner(seed: int = 0) -> TemporalRefiner:
    torch.manual_seed(seed)
    refiner = TemporalRefiner(8)
    torch.nn.init.normal_(refiner.out.weight, std=0.05)  # an untrained one is the identity: make it do something
    return refiner.eval()


def test_an_untrained_decoder_is_the_lossless_decode():
    video = torch.rand(1, 3, 17, 16, 16) * 2 - 1
    latents = PixelCodec().encode(video)
    assert torch.equal(PixelCodec(refiner=TemporalRefiner(8).eval()).decode(latents), video)


def test_a_latent_frame_is_refined_from_itself_and_the_one_before_only():
    codec = PixelCodec(refiner=_random_refiner())
    latents = PixelCodec().encode(torch.rand(1, 3, 21, 16, 16) * 2 - 1)  # 6 latent frames
    out = codec.decode(latents)
    assert not torch.allclose(out[:, :, 1:], PixelCodec().decode(latents)[:, :, 1:], atol=1e-3)
    changed = latents.clone()
    changed[:, :, 3] = -changed[:, :, 3]
    moved = codec.decode(changed)
    frames = lambda f: slice(1 + GROUP * (f - 1), 1 + GROUP * f)  # video frames of latent frame f
    for f in (1, 2):  # before the change: untouched (causal)
        assert torch.equal(moved[:, :, frames(f)], out[:, :, frames(f)])
    for f in (3, 4):  # the changed latent frame and the one it precedes
        assert not torch.allclose(moved[:, :, frames(f)], out[:, :, frames(f)], atol=1e-3)
    assert torch.allclose(moved[:, :, frames(5)], out[:, :, frames(5)], atol=1e-6)
    # a lone latent frame (a clip's first, an anchor's round trip) decodes as the lossless codec does
    assert torch.equal(codec.decode(latents[:, :, 2:3]), PixelCodec().decode(latents[:, :, 2:3]))


def test_a_glance_is_the_lossless_decode_without_the_refiner():
    """A gate preview's early looks (`videogen.sampling.health.run_gate`) skip the refiner."""
    video = torch.rand(1, 3, 21, 16, 16) * 2 - 1
    latents = PixelCodec().encode(video)
    codec = PixelCodec(refiner=_random_refiner())
    assert torch.equal(codec.glance(latents), video) and not torch.allclose(codec.decode(latents), video, atol=1e-3)


def test_decoding_chunk_by_chunk_with_the_previous_latent_frame_matches_one_decode():
    """How a stream decodes (`videogen.streaming.stream._decode`): each chunk with the previous
    chunk's last latent frame in front, its one frame dropped."""
    codec = PixelCodec(refiner=_random_refiner(1))
    latents = PixelCodec().encode(torch.rand(1, 3, 37, 16, 16) * 2 - 1)  # 10 latent frames: 1 + 3 x 3
    whole = codec.decode(latents)
    parts = [codec.decode(latents[:, :, :4])]
    for start in (4, 7):
        parts.append(codec.decode(latents[:, :, start - 1 : start + 3])[:, :, 1:])
    assert torch.allclose(torch.cat(parts, 2), whole, atol=1e-5)


def test_a_saved_decoder_loads_and_a_foreign_file_is_refused(tmp_path):
    from safetensors.torch import save_file

    refiner = _random_refiner(2)
    save_refiner(refiner, tmp_path / "d.safetensors")
    loaded = load_refiner(tmp_path / "d.safetensors")
    x = torch.rand(2, 3, 2 * GROUP, 16, 16) * 2 - 1
    assert loaded.width == 8 and torch.equal(loaded(x), refiner(x))
    save_file({"inp.weight": torch.zeros(3)}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(RuntimeError, match="bad.safetensors: refiner keys do not match"):
        load_refiner(tmp_path / "bad.safetensors")


@pytest.mark.skipif(not SHIPPED.is_file(), reason="no shipped decoder in this checkout")
def test_the_shipped_decoder_spreads_the_models_steps_over_frames_and_nears_the_truth():
    """On the shipped transformer's own output (one-step predictions of 24 clips it never saw in
    the decoder's training, `make_pairs` with another seed), decoded losslessly the moving objects
    score smoothness ~0.1 (the motion once per 4 frames); through the shipped decoder they move
    in every frame, and the frames land nearer the truth."""
    from videogen.training.decoder import DecoderConfig, held_out_error, make_pairs

    model, truth, captions = make_pairs(DecoderConfig(), 24, seed=424242)
    refiner = load_refiner(SHIPPED)
    before, after = [], []
    for clip, caption in zip(model, captions):
        decoded = video_to_uint8(PixelCodec(refiner=refiner).decode(PixelCodec().encode(uint8_to_video(clip))))
        for obj in parse_caption(caption).objects:
            if obj.motion == "still":
                continue
            a, b = (motion_smoothness(track_colour(f, obj.colour), 64) for f in (clip, decoded))
            if a is not None and b is not None:
                before.append(a)
                after.append(b)
    assert len(before) >= 10
    assert np.mean(before) < 0.2 and np.mean(after) >= 0.45, f"smoothness {np.mean(before):.2f} -> {np.mean(after):.2f}"
    raw, refined = held_out_error(refiner, model, truth)
    assert refined < 0.85 * raw, f"error to the truth {raw:.2f} -> {refined:.2f} (8-bit levels)"


@pytest.mark.parametrize(
    "block,error",
    [
        ("    kind: builtin\n    decoder: d.safetensors\n", None),
        ("    kind: diffusers\n    path: /nowhere\n    decoder: d.safetensors\n", "kind builtin only"),
    ],
)
def test_a_presets_decoder_is_checked_at_load(presets_file, block, error):
    from videogen.config.presets import load_presets
    from videogen.errors import ModelLoadError

    presets_file(f"presets:\n  m:\n{block}    size: 64x64\n    fps: 16\n    steps: 2\n    guidance: 3.0\n"
                 "    segment_seconds: 2.0\n    overlap_frames: 5\n")  # fmt: skip
    if error is None:
        assert load_presets()["m"].decoder == "d.safetensors"
    else:
        with pytest.raises(ModelLoadError, match=error):
            load_presets()


def test_the_builtin_codec_loads_its_decoder_and_a_missing_one_warns_and_decodes_losslessly(tmp_path, monkeypatch):
    from videogen.models.builtin import build_builtin

    save_refiner(_random_refiner(3), tmp_path / "d.safetensors")
    monkeypatch.setenv("VIDEOGEN_BUILTIN_DECODER_WEIGHTS", str(tmp_path / "d.safetensors"))
    codec = build_builtin(decoder="any.safetensors")[1]
    assert codec.refiner is not None and codec.refiner.width == 8
    assert build_builtin(decoder=None)[1].refiner is None
    monkeypatch.setenv("VIDEOGEN_BUILTIN_DECODER_WEIGHTS", str(tmp_path / "missing.safetensors"))
    with pytest.warns(UserWarning, match="missing.safetensors is missing: decoding without it"):
        assert build_builtin(decoder="any.safetensors")[1].refiner is None

"""Rollout training clips: a context cut from the model's own chained render at a seam, and the
scene redrawn clean from where the rollout left each object."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from videogen.config.geometry import SINK_POSITION
from videogen.models.codec import PixelCodec, uint8_to_video
from videogen.training.config import TrainConfig
from videogen.training.data import ANCHOR_LATEST, make_batch
from videogen.training.rollouts import (
    NEW_FRAMES,
    SEGMENT_FRAMES,
    RolloutPool,
    make_pool,
    mix_rollouts,
    pool_scene,
    rollout_clip,
    stream_rollout_clip,
)
from videogen.training.scenes import (
    HELD_OUT,
    Scene,
    SceneObject,
    canonical_start,
    colour_mask,
    parse_caption,
    random_scene,
    render_scene,
    track_colour,
)

CAPTIONS = ("a red triangle bouncing on a gray background", "a blue square moving left on a black background",
            "a cyan triangle moving up and a white circle staying still on a green background")  # fmt: skip


def _pool(caption: str, seams: int = 4) -> tuple[RolloutPool, np.ndarray]:
    scene = canonical_start(parse_caption(caption), random.Random(3))
    video = render_scene(scene, SEGMENT_FRAMES + NEW_FRAMES * seams, size=64)
    return RolloutPool(video[None], [scene]), video


@pytest.mark.parametrize("caption", CAPTIONS)
def test_a_rollout_that_is_the_scene_itself_continues_as_the_scene(caption):
    pool, video = _pool(caption)
    assert pool.seams == 4
    for seam in (1, 2, 4):
        clip, scene, clock = rollout_clip(pool, 0, seam)
        end = SEGMENT_FRAMES + NEW_FRAMES * (seam - 1)
        truth = video[end - 5 : end + NEW_FRAMES]
        assert clip.shape == truth.shape and clock == 7.0 * seam  # the segment's clock (`segment_times`)
        # Only sub-pixel rounding of a re-measured triangle's position differs (a whole pixel's
        # shift of one object changes ~2% of the frame's pixels).
        assert (np.abs(clip.astype(int) - truth.astype(int)).max(-1) > 30).mean() < 0.005
        assert scene.caption() == caption


def test_the_target_continues_from_where_the_rollout_left_the_object_at_its_true_size():
    pool, video = _pool(CAPTIONS[1])  # a blue square moving left, 0.75 px a frame
    end = SEGMENT_FRAMES + NEW_FRAMES  # the context of seam 2
    # The rollout's object is 6 px lower than the scene has it, and swollen by 3 px on every side.
    drifted = video.copy()
    blob = colour_mask(video[end - 5 : end], (40, 80, 230))
    moved = np.roll(blob, 6, axis=1)
    swollen = moved.copy()
    for dy in range(-3, 4):
        for dx in range(-3, 4):
            swollen |= np.roll(moved, (dy, dx), axis=(1, 2))
    context = drifted[end - 5 : end]
    context[:] = video[0, 0, 0]  # the background
    context[swollen] = video[end - 1][blob[-1]][0]
    clip, _, _ = rollout_clip(RolloutPool(drifted[None], pool.scenes), 0, 2)
    first = track_colour(clip[5:6], "blue")
    last = track_colour(context[-1:], "blue")
    dx, dy = (first.centroid[0] - last.centroid[0] + 32) % 64 - 32  # the short way round the wrapping frame
    assert abs(dx + 0.75) < 0.3 and abs(dy) < 0.3  # one frame's move left, from the rollout's place
    truth_area = colour_mask(video[end : end + 1], (40, 80, 230)).sum()
    assert colour_mask(clip[5:6], (40, 80, 230)).sum() == truth_area  # drawn at its true size
    assert colour_mask(context[-1:], (40, 80, 230)).sum() > 1.4 * truth_area


def test_mixing_replaces_a_share_of_segment_long_clips_deterministically():
    pool, _ = _pool(CAPTIONS[0])
    codec = PixelCodec(4, 4)
    cfg = TrainConfig(batch_tokens=2048)
    step = next(s for s in range(100) if make_batch(cfg, s, codec).latents.shape[2] == 9)
    base = make_batch(cfg, step, codec)
    mixed = mix_rollouts(base, pool, 1.0, cfg.seed, step, cfg.shift, codec)
    again = mix_rollouts(make_batch(cfg, step, codec), pool, 1.0, cfg.seed, step, cfg.shift, codec)
    assert torch.equal(mixed.latents, again.latents) and torch.equal(mixed.sigmas, again.sigmas)
    assert mixed.captions == [CAPTIONS[0]] * len(base.captions)
    assert bool(mixed.context[:, :2].all()) and not bool(mixed.context[:, 2:].any())
    assert bool((mixed.sigmas[:, :2] == 0).all()) and bool((mixed.sigmas[:, 2:] > 0).all())
    assert {float(f) for f in mixed.frames[:, 0]} <= {7.0 * s for s in range(1, pool.seams + 1)}
    # Clips of another length, and a share of 0, are left as they were.
    other = next(s for s in range(100) if make_batch(cfg, s, codec).latents.shape[2] != 9)
    short = make_batch(cfg, other, codec)
    assert mix_rollouts(short, pool, 1.0, cfg.seed, other, cfg.shift, codec) is short
    assert mix_rollouts(base, pool, 0.0, cfg.seed, step, cfg.shift, codec) is base


@pytest.mark.slow
def test_a_pool_is_the_models_own_gate_off_renders(builtin_model, tmp_path):
    path = make_pool(builtin_model, tmp_path / "pool.npz", chains=2, seconds=4.0, seed=5)
    pool = RolloutPool.load(path)
    assert pool.videos.shape == (2, 64, 64, 64, 3) and pool.seams == 1
    assert all(s.lighting == "none" for s in pool.scenes)
    assert pool.scenes[0] != pool.scenes[1]
    clip, _, clock = rollout_clip(pool, 1, 1)
    assert clip.shape == (33, 64, 64, 3) and clock == 7.0
    assert np.array_equal(clip[:5], pool.videos[1, 28:33])  # the prefix the second segment saw


def test_a_rollout_that_split_its_object_continues_from_the_larger_piece():
    pool, video = _pool(CAPTIONS[1])
    end = SEGMENT_FRAMES + NEW_FRAMES
    split = video.copy()
    context = split[end - 5 : end]
    blob = colour_mask(context, (40, 80, 230))
    piece = blob & (np.cumsum(blob, axis=2) <= 6)  # the left 6 columns of the square, copied 24 px down
    context[np.roll(piece, 24, axis=1)] = context[blob][0]
    clip, _, _ = rollout_clip(RolloutPool(split[None], pool.scenes), 0, 2)
    truth, _, _ = rollout_clip(pool, 0, 2)
    assert (np.abs(clip[5:].astype(int) - truth[5:].astype(int)).max(-1) > 30).mean() < 0.005


@pytest.mark.parametrize("centre,vanished", [(32.0, 0), (34.0, 0), (40.0, 12)])
def test_an_object_hidden_at_the_seam_comes_out_where_it_went_in(centre, vanished):
    """A cyan circle moving down passes behind a still white triangle (drawn on top): at the
    context's last frame its centre is `centre` px down, the triangle's 32, and only a sliver
    shows (at 34 two slivers, one each side). With `vanished`, the rollout lost the circle
    outright in its last `vanished` frames. A target that looks back draws it where the scene has
    it (where the rollout last showed it whole, moved on), not at the sliver's centroid."""
    end = SEGMENT_FRAMES + NEW_FRAMES  # the context of seam 2 ends at frame end - 1
    y0 = (centre - 0.75 * (end - 1)) / 64 % 1
    scene = Scene((SceneObject("cyan", "circle", "down", 0.5, y0), SceneObject("white", "triangle", "still", 0.5, 0.5)),
                  "green")  # fmt: skip
    video = render_scene(scene, SEGMENT_FRAMES + NEW_FRAMES * 3, size=64)
    rollout = video.copy()
    if vanished:  # the circle gone from the rollout's last frames: the triangle on the background alone
        bare = render_scene(Scene(scene.objects[1:], "green"), len(video), size=64)
        rollout[end - vanished : end] = bare[end - vanished : end]
    sliver = track_colour(rollout[end - 1 : end], "cyan")
    if not vanished:  # what the last frame alone says is well off the circle's centre
        assert abs(sliver.centroid[0][1] - centre) > 3 or abs(sliver.centroid[0][0] - 32) > 3
    else:
        assert not sliver.present[0]
    pool = RolloutPool(rollout[None], [scene])
    clip, _, _ = rollout_clip(pool, 0, 2, lookback=48)
    truth = video[end - 5 : end + NEW_FRAMES]
    assert (np.abs(clip[5:].astype(int) - truth[5:].astype(int)).max(-1) > 30).mean() < 0.005
    out = track_colour(clip[-1:], "cyan")
    assert abs(out.centroid[0][1] - track_colour(truth[-1:], "cyan").centroid[0][1]) < 0.5
    # Without the look-back (the shipped recipe's targets) the sliver, or the scene's clock, places it.
    plain, _, _ = rollout_clip(pool, 0, 2)
    if not vanished:
        assert (np.abs(plain[5:].astype(int) - truth[5:].astype(int)).max(-1) > 30).mean() > 0.01


def test_anchored_continuations_see_a_frame_of_the_videos_first_segment_at_the_sink_position():
    """`anchor_frac`: on-clock continuations (a chained render's) get, in place of their prefix's
    first latent frame, the scene's frame at a latent time 1..ANCHOR_LATEST, at `SINK_POSITION`;
    the rest of the batch is the base recipe's, draw for draw."""
    codec = PixelCodec(4, 4)
    cfg = TrainConfig(batch_tokens=2048, anchor_frac=1.0)
    plain = TrainConfig(batch_tokens=2048)
    found = 0
    for step in range(400):
        batch, base = make_batch(cfg, step, codec), make_batch(plain, step, codec)
        assert base.positions is None
        assert batch.captions == base.captions and torch.equal(batch.sigmas, base.sigmas)
        f = batch.latents.shape[2]
        assert batch.positions is not None and batch.positions.shape == (len(batch.captions), f)
        for b in range(len(batch.captions)):
            if batch.positions[b, 0] != SINK_POSITION:
                assert torch.equal(batch.latents[b], base.latents[b]) and torch.equal(batch.frames[b], base.frames[b])
                assert batch.positions[b].tolist() == list(range(f))
                continue
            found += 1
            time = float(batch.frames[b, 0])
            assert time in {float(t) for t in range(1, ANCHOR_LATEST + 1)}
            assert bool((batch.sigmas[b, :2] == 0).all()) and f > 2
            assert batch.positions[b, 1:].tolist() == list(range(1, f))
            assert torch.equal(batch.latents[b, :, 1:], base.latents[b, :, 1:])  # the prefix proper and the target
            assert torch.equal(batch.frames[b, 1:], base.frames[b, 1:])
            # latent frame 0 is one video frame of the same scene, at its own time: the scene as it
            # was at video frame 4 x time, which the clip's own (later) first frame is not
            assert not torch.equal(batch.latents[b, :, 0], base.latents[b, :, 0])
        if found >= 3:
            break
    assert found >= 3


def test_rollout_clips_are_anchored_on_their_videos_own_first_segment():
    pool, video = _pool(CAPTIONS[0])
    codec = PixelCodec(4, 4)
    cfg = TrainConfig(batch_tokens=2048)
    step = next(s for s in range(100) if make_batch(cfg, s, codec).latents.shape[2] == 9)
    mixed = mix_rollouts(make_batch(cfg, step, codec), pool, 1.0, cfg.seed, step, cfg.shift, codec, anchor_frac=1.0)
    assert mixed.positions is not None and bool((mixed.positions[:, 0] == SINK_POSITION).all())
    for b in range(len(mixed.captions)):
        time = int(mixed.frames[b, 0])
        assert 1 <= time <= ANCHOR_LATEST and mixed.positions[b, 1:].tolist() == list(range(1, 9))
        anchor = codec.encode(uint8_to_video(video[4 * time][None]))  # that one frame, as a clip's first
        assert torch.allclose(mixed.latents[b, :, 0], anchor[0, :, 0], atol=1e-6)
    clip, _, _ = rollout_clip(pool, 0, 2, anchor=3)
    plain, _, _ = rollout_clip(pool, 0, 2)
    assert np.array_equal(clip[0], video[12]) and np.array_equal(clip[1:], plain[1:])


@pytest.mark.parametrize("rollout_anchor,expected", [(None, "preset"), (0, None), (4, 4)])
def test_a_new_pool_is_rendered_with_the_anchor_asked_for(tmp_path, monkeypatch, rollout_anchor, expected):
    """A pool is the weights' own output as rendering makes it: by default with the builtin
    preset's anchor frame; `rollout_anchor` 0 renders without (weights never trained on anchors).
    The two-object share asked for reaches the pool."""
    import videogen.training.train as train_module
    from videogen.config.presets import get_preset

    seen = {}

    def record(model, path, chains, seconds, seed, two_objects):
        seen["anchor"], seen["two_objects"] = model.preset.anchor_frame, two_objects
        pool, _ = _pool(CAPTIONS[0])
        np.savez_compressed(path, videos=pool.videos, scenes=json.dumps([dataclasses.asdict(s) for s in pool.scenes]))
        return path

    monkeypatch.setattr(train_module, "make_pool", record)
    cfg = TrainConfig(rollouts=str(tmp_path / "pool.npz"), rollout_frac=0.5, rollout_anchor=rollout_anchor,
                      rollout_two_objects=0.6)  # fmt: skip
    pool = train_module._rollout_pool(cfg, lambda _m: None)
    assert pool is not None and pool.seams == 4
    assert seen["anchor"] == (get_preset("builtin").anchor_frame if expected == "preset" else expected)
    assert seen["two_objects"] == 0.6


def test_a_new_pool_from_grown_weights_is_rendered_by_them(tmp_path, monkeypatch):
    import videogen.training.train as train_module
    from videogen.models.builtin import WEIGHTS_FILE, grow_layers
    from videogen.training.train import export_weights

    state = {k: v.clone() for k, v in load_file(str(WEIGHTS_FILE)).items()}
    grown = grow_layers(state, 5)
    grown["transformer.blocks.4.ffn.net.2.bias"] += 0.5  # the copy's own change: these weights, not the shipped
    export_weights(grown, tmp_path / "grown.safetensors")
    seen = {}

    def record(model, path, chains, seconds, seed, two_objects):
        seen["blocks"] = len(model.transformer.blocks)
        seen["bias"] = model.transformer.blocks[4].ffn.net[2].bias.detach().clone()
        pool, _ = _pool(CAPTIONS[0])
        np.savez_compressed(path, videos=pool.videos, scenes=json.dumps([dataclasses.asdict(s) for s in pool.scenes]))
        return path

    monkeypatch.setattr(train_module, "make_pool", record)
    cfg = TrainConfig(rollouts=str(tmp_path / "pool.npz"), rollout_frac=0.5, init=str(tmp_path / "grown.safetensors"))
    assert train_module._rollout_pool(cfg, lambda _m: None) is not None
    assert seen["blocks"] == 5 and torch.equal(seen["bias"], grown["transformer.blocks.4.ffn.net.2.bias"])


def test_a_pool_weighted_to_two_objects_draws_that_share_of_two_object_captions():
    """`two_objects` sets the share of two-object captions (the training mix has ~30%); every
    caption stays a training one (no held-out colour/shape pair); None keeps `random_scene`'s draws."""
    rng = random.Random(0)
    scenes = [pool_scene(rng, 0.6) for _ in range(2000)]
    share = np.mean([len(s.objects) == 2 for s in scenes])
    assert 0.57 < share < 0.63, share
    assert not any((o.colour, o.shape) in HELD_OUT for s in scenes for o in s.objects)
    assert all(len(pool_scene(rng, 0.0).objects) == 1 for _ in range(200))
    assert all(len(pool_scene(rng, 1.0).objects) == 2 for _ in range(200))
    a, b = random.Random(3), random.Random(3)
    assert [pool_scene(a) for _ in range(50)] == [random_scene(b) for _ in range(50)]


@pytest.mark.parametrize(("field", "value", "says"), [("overlap_frames", 9, "hands over 9 frames"),
                                                      ("segment_seconds", 3.0, "segments of 49 frames")])  # fmt: skip
def test_a_pool_refuses_a_preset_that_chains_segments_otherwise(builtin_model, tmp_path, field, value, says):
    import copy

    other = copy.copy(builtin_model)
    other.preset = dataclasses.replace(builtin_model.preset, **{field: value})
    with pytest.raises(ValueError, match=says):
        make_pool(other, tmp_path / "pool.npz", chains=1, seconds=10.0)
    assert not (tmp_path / "pool.npz").exists()


def _stream_pool(caption: str, frames: int = 129) -> tuple[RolloutPool, np.ndarray]:
    scene = canonical_start(parse_caption(caption), random.Random(3))
    video = render_scene(scene, frames + 12, size=64)  # the truth runs a chunk past the pool's last frame
    return RolloutPool(video[None, :frames], [scene], streamed=True), video


@pytest.mark.parametrize("caption", CAPTIONS)
def test_a_stream_clip_is_what_the_chunk_saw_then_the_scene(caption):
    pool, video = _stream_pool(caption)
    assert pool.chunk_starts == [7, 10, 13, 16, 19, 22, 25, 28, 31]  # chunks start at 1 + 3k; 129 frames: latent 0..32
    for start in (7, 19, 31):
        clip, scene, clock = stream_rollout_clip(pool, 0, start)
        # the sink (the stream's first frame), then latent frames start-6 .. start+2 of the stream
        truth = np.concatenate([video[:1], video[4 * start - 27 : 4 * start + 9]])
        assert clip.shape == truth.shape == (37, 64, 64, 3)
        assert np.array_equal(clip[:25], truth[:25])  # sink and window: the pool's own frames
        assert (np.abs(clip.astype(int) - truth.astype(int)).max(-1) > 30).mean() < 0.005
        assert clock.tolist() == [0.0, *range(start - 6, start + 3)]
        assert scene.caption() == caption


def test_stream_mixing_replaces_a_share_of_the_causal_variants_10_frame_clips_deterministically():
    pool, _ = _stream_pool(CAPTIONS[0])
    codec = PixelCodec(4, 4)
    cfg = TrainConfig(batch_tokens=2048, causal_chunk=3)
    step = next(s for s in range(100) if make_batch(cfg, s, codec).latents.shape[2] == 10)
    base = make_batch(cfg, step, codec)
    mixed = mix_rollouts(base, pool, 1.0, cfg.seed, step, cfg.shift, codec, causal_chunk=3)
    again = mix_rollouts(make_batch(cfg, step, codec), pool, 1.0, cfg.seed, step, cfg.shift, codec, causal_chunk=3)
    assert torch.equal(mixed.latents, again.latents) and torch.equal(mixed.sigmas, again.sigmas)
    assert mixed.captions == [CAPTIONS[0]] * len(base.captions)
    assert bool(mixed.context[:, :7].all()) and not bool(mixed.context[:, 7:].any())
    assert bool((mixed.sigmas[:, :7] == 0).all()) and bool((mixed.sigmas[:, 7:] > 0).all())
    assert bool((mixed.sigmas[:, 7:] == mixed.sigmas[:, 7:8]).all())  # one chunk, one noise level
    assert bool((mixed.frames[:, 0] == 0).all())  # the sink's clock
    assert {float(f) for f in mixed.frames[:, 7]} <= {float(s) for s in pool.chunk_starts}
    # the latents are the clip's own: a clip re-encoded from its frames
    video, start = next((v, s) for v in range(1) for s in pool.chunk_starts if float(mixed.frames[0, 7]) == s)
    assert torch.equal(mixed.latents[0], codec.encode(uint8_to_video(stream_rollout_clip(pool, video, start)[0]))[0])
    # 7-latent-frame clips, and a share of 0, are left as they were
    other = next(s for s in range(100) if make_batch(cfg, s, codec).latents.shape[2] == 7)
    short = make_batch(cfg, other, codec)
    assert mix_rollouts(short, pool, 1.0, cfg.seed, other, cfg.shift, codec, causal_chunk=3) is short
    assert mix_rollouts(base, pool, 0.0, cfg.seed, step, cfg.shift, codec, causal_chunk=3) is base
    # a pool of chained renders is not the stream's view
    with pytest.raises(ValueError, match="chained renders"):
        mix_rollouts(base, _pool(CAPTIONS[0])[0], 1.0, cfg.seed, step, cfg.shift, codec, causal_chunk=3)


@pytest.mark.slow
def test_a_stream_pool_is_the_causal_models_own_gate_off_streams(tmp_path):
    from videogen.config.spec import StreamSpec
    from videogen.models.loader import load_model
    from videogen.streaming.stream import stream

    model = load_model("builtin-causal", device="cpu", dtype="float32", attention="dense")
    pool = RolloutPool.load(make_pool(model, tmp_path / "pool.npz", chains=2, seconds=4.0, seed=5))
    assert pool.streamed and pool.videos.shape == (2, 64, 64, 64, 3) and pool.chunk_starts == [7, 10, 13, 16]
    assert pool.scenes[0] != pool.scenes[1]
    spec = StreamSpec(pool.scenes[1].caption(), 4.0, model="builtin-causal", seed=6, health_checks=[])
    assert np.array_equal(pool.videos[1], np.concatenate([c.frames for c in stream(spec, model)]))
    with pytest.raises(ValueError, match="at most 15.8125 s"):
        make_pool(model, tmp_path / "long.npz", chains=1, seconds=20.0)

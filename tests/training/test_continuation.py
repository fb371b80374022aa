"""One segment continued from the truth (`videogen.training.continuation`): the prefix and anchor
are the scene's own latent frames at the trial's clock, the judge passes the scenes themselves
and fails a planted loss or copy, and a trial is a deterministic function of its seed, judged
against the scene at its own times."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from videogen.models.codec import video_to_uint8
from videogen.training.continuation import (
    BANDS,
    HIDDEN_BAND,
    continue_from_truth,
    hidden_clocks,
    hidden_layout,
    trial_clock,
    truth_context,
    wrong_frames,
    wrong_share,
)
from videogen.training.long_eval import long_prompts
from videogen.training.scenes import BACKGROUNDS, PALETTE, canonical_start, colour_mask, render_scene


def test_the_scenes_have_no_wrong_frame_and_planted_failures_are_wrong():
    for i, scene in enumerate(long_prompts(6)):  # one and two objects; the two cross within 40 s
        placed = canonical_start(scene, random.Random(i))
        frames = render_scene(placed, 640)
        # the two circles hide one another now and then, which `wrong_share` leaves unjudged
        assert wrong_frames(frames, placed).mean() <= 0.01, scene.caption()
        assert wrong_share(frames, frames, placed) == 0.0
    scene = canonical_start(long_prompts(6)[2], random.Random(0))
    frames = render_scene(scene, 32)
    gone = frames.copy()
    gone[colour_mask(gone, PALETTE[scene.objects[1].colour])] = BACKGROUNDS[scene.background]
    assert wrong_frames(gone, scene).all() and wrong_share(gone, frames, scene) == 1.0
    doubled = frames.copy()
    cyan = colour_mask(doubled, PALETTE[scene.objects[0].colour])
    doubled[np.roll(cyan, 32, axis=1)] = PALETTE[scene.objects[0].colour]  # a copy half a frame down
    assert wrong_frames(doubled, scene).mean() > 0.5


def test_clocks_fall_in_their_band():
    rng = random.Random(3)
    for band, span in BANDS.items():
        clocks = [trial_clock(band, rng) for _ in range(200)]
        if span is None:
            assert set(clocks) == {0}
        else:
            assert span[0] <= min(clocks) and max(clocks) <= span[1] and len(set(clocks)) > 50


def test_hidden_clocks_end_the_prefix_with_the_first_object_behind_the_second():
    for i in (2, 5):  # the cyan circle under the white triangle; the purple circle under the blue one
        scene = canonical_start(long_prompts(6)[i], random.Random(i))
        below = scene.objects[0]
        clocks = hidden_clocks(scene, 2, 4, 64)
        lo, hi = BANDS["trained"]
        assert clocks and lo <= min(clocks) and max(clocks) <= hi, scene.caption()
        frames = render_scene(scene, 4 * (hi + 1) + 1, 64)
        shown = colour_mask(frames, PALETTE[below.colour]).sum((1, 2))  # the first object's pixels per frame
        whole = shown.max()
        ends = [4 * (c + 1) for c in clocks]  # the prefix's last frame: latent frame clock + 1 ends on it
        assert max(shown[ends]) < 0.6 * whole, scene.caption()  # at every such clock 40% or more is behind
        others = np.setdiff1d(np.arange(4, 4 * (hi + 1) + 1, 4), ends)
        assert np.median(shown[others]) > 0.9 * whole  # at the other clocks it mostly shows whole
    with pytest.raises(ValueError, match="two objects"):
        hidden_clocks(long_prompts(6)[0], 2, 4, 64)
    # a layout whose objects stay apart in the band is drawn again: prompt 2's seed 1 first draws one
    rng = random.Random(1)
    assert not hidden_clocks(canonical_start(long_prompts(6)[2], rng), 2, 4, 64)
    truth, clock = hidden_layout(long_prompts(6)[2], random.Random(1), 2, 4, 64)
    assert clock in hidden_clocks(truth, 2, 4, 64)


def test_the_context_is_the_scene_at_the_clock(builtin_model):
    codec = builtin_model.codec
    scene = canonical_start(long_prompts(6)[5], random.Random(1))
    clock = 37
    prefix, anchor = truth_context(codec, scene, clock, 2, 6, 64)
    assert prefix.shape[2] == 2 and anchor is not None and anchor.time == 6.0
    # latent frame j of the prefix is the scene's frames 4 (clock + j) - 3 .. 4 (clock + j), losslessly
    decoded = video_to_uint8(codec.decode(prefix, refine=False))
    want = render_scene(scene, 8, 64, start=4 * clock - 3)
    assert np.array_equal(decoded[-4:], want[-4:]) and np.array_equal(decoded[0], want[3])
    # the anchor is the shot's frame 24 (latent frame 6's last), encoded alone
    assert np.array_equal(video_to_uint8(codec.decode(anchor.latent, refine=False))[0], render_scene(scene, 25, 64)[24])
    assert truth_context(codec, scene, clock, 2, None, 64)[1] is None


@pytest.mark.slow
def test_a_trial_is_a_deterministic_function_of_its_seed(builtin_model):
    scene = long_prompts(6)[0]
    trial, frames = continue_from_truth(builtin_model, scene, "trained", 11)
    again, frames_again = continue_from_truth(builtin_model, scene, "trained", 11)
    assert trial == again and np.array_equal(frames, frames_again)
    assert 1 <= trial.clock <= 100 and trial.objects == 1 and len(frames) == 33
    truth = render_scene(canonical_start(scene, _after_clock(11)), 33, 64, start=4 * trial.clock)
    assert trial.wrong == pytest.approx(wrong_share(frames[5:], truth[5:], scene))


@pytest.mark.slow
def test_a_hidden_trial_continues_from_a_prefix_that_hides_the_first_object(builtin_model):
    scene = long_prompts(6)[2]
    trial, frames = continue_from_truth(builtin_model, scene, HIDDEN_BAND, 5)
    assert continue_from_truth(builtin_model, scene, HIDDEN_BAND, 5)[0] == trial
    truth, clock = hidden_layout(scene, random.Random(5), 2, 4, 64)  # the layout first, then the clock
    assert trial.band == HIDDEN_BAND and trial.clock == clock and clock in hidden_clocks(truth, 2, 4, 64)
    # the segment's prefix is that layout's frames, with the first object mostly behind the second
    below = colour_mask(frames[:5], PALETTE[scene.objects[0].colour]).sum((1, 2))
    assert below[-1] < 0.6 * colour_mask(render_scene(truth, 1, 64), PALETTE[scene.objects[0].colour]).sum()
    with pytest.raises(ValueError, match="two objects"):
        continue_from_truth(builtin_model, long_prompts(6)[0], HIDDEN_BAND, 5)


@pytest.mark.slow
def test_a_trial_holds_its_prefix_at_the_presets_context_noise_as_a_render_does(builtin_model, monkeypatch):
    scene = long_prompts(6)[0]
    clean = continue_from_truth(builtin_model, scene, "trained", 11)[1]
    monkeypatch.setattr(builtin_model, "preset", dataclasses.replace(builtin_model.preset, context_noise=0.3))
    noised = continue_from_truth(builtin_model, scene, "trained", 11)[1]
    assert not np.array_equal(clean[5:], noised[5:])  # the new frames see a noised prefix


def _after_clock(seed: int) -> random.Random:
    """The trial's rng where it draws the layout: after the clock."""
    rng = random.Random(seed)
    trial_clock("trained", rng)
    return rng

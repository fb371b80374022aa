"""Procedural scenes: deterministic, captioned by the grammar, and read back by the detector."""

import random

import numpy as np

from videogen.evaluate import eval_prompts, score_frames
from videogen.models.builtin import VOCAB
from videogen.scenes import HELD_OUT, parse_caption, random_scene, render_scene


def test_scenes_are_deterministic_from_the_seed():
    a = render_scene(random_scene(random.Random(3)), 9, start=12.5)
    b = render_scene(random_scene(random.Random(3)), 9, start=12.5)
    assert np.array_equal(a, b) and a.shape == (9, 64, 64, 3)


def test_captions_follow_the_grammar_and_use_only_the_models_vocabulary():
    rng = random.Random(0)
    for _ in range(200):
        scene = random_scene(rng, held_out="any")
        text = scene.caption()
        assert parse_caption(text).caption() == text
        assert set(text.split()) <= set(VOCAB)
    assert parse_caption("a red circle moving right on a black background").objects[0].motion == "right"


def test_training_scenes_never_show_the_held_out_pairs():
    rng = random.Random(1)
    for _ in range(500):
        for o in random_scene(rng).objects:
            assert (o.colour, o.shape) not in HELD_OUT


def test_the_detector_reads_ground_truth_scenes_correctly():
    """The evaluator is only as good as its detector: on the generator's own frames it must be right."""
    scored = [score_frames(render_scene(scene, 81), scene, unseen) for scene, unseen in eval_prompts(16, 8)]
    assert sum(s.correct for s in scored) / len(scored) >= 0.95, [s for s in scored if not s.correct]
    assert all(s.presence > 0.9 for s in scored)


def test_the_detector_rejects_a_wrong_video():
    scene, _ = eval_prompts(1, 0)[0]
    other = parse_caption(scene.caption().replace(scene.objects[0].colour, "white" if scene.objects[0].colour != "white" else "red"))
    wrong = render_scene(other, 81)
    assert not score_frames(wrong, scene).correct


def test_canonical_start_puts_objects_where_their_motion_begins():
    import random

    from videogen.scenes import Scene, SceneObject, canonical_start

    rng = random.Random(0)
    one = Scene((SceneObject("red", "circle", "right", 0.9, 0.1),), "black")
    o = canonical_start(one, rng).objects[0]
    assert abs(o.x0 - 0.25) <= 0.06 and abs(o.y0 - 0.5) <= 0.06
    two = Scene((SceneObject("red", "circle", "up", 0.1, 0.1), SceneObject("blue", "square", "still", 0.1, 0.1)), "black")
    a, b = canonical_start(two, rng).objects
    assert abs(a.x0 - 0.3) <= 0.06 and abs(a.y0 - 0.75) <= 0.06  # up: starts low, first object left
    assert abs(b.x0 - 0.7) <= 0.06 and abs(b.y0 - 0.5) <= 0.06
    xs = {round(canonical_start(one, random.Random(s)).objects[0].x0, 3) for s in range(20)}
    assert len(xs) > 10  # jittered by the seed, not one fixed spot


def test_motion_in_latent_frame_steps_reads_as_its_direction_and_jitter_as_still():
    """A model that moves an object once per latent frame (3 px every 4 frames; per-frame steps
    0, 0, 0, 3) still moves right; a still object that jitters by a pixel per latent frame is still."""
    from videogen.scenes import Track, classify_motion

    t = 80
    present = np.ones(t, bool)
    stepped = np.stack([20 + 3 * (np.arange(t) // 4), np.full(t, 32.0)], axis=1)
    assert classify_motion(Track("red", present, stepped, np.ones(t)), 64) == "right"
    wobble = np.stack([32 + (-1) ** (np.arange(t) // 4), np.full(t, 32.0)], axis=1)
    assert classify_motion(Track("red", present, wobble, np.ones(t)), 64) == "still"
    up_wrapping = np.stack([np.full(t, 32.0), (10 - 0.75 * np.arange(t)) % 64], axis=1)
    assert classify_motion(Track("red", present, up_wrapping, np.ones(t)), 64) == "up"


def test_motion_smoothness_is_1_for_the_scenes_and_0_for_latent_frame_steps():
    from videogen.scenes import Scene, SceneObject, Track, motion_smoothness, track_colour

    frames = render_scene(Scene((SceneObject("red", "circle", "right", 0.25, 0.5),), "black"), 80)
    assert motion_smoothness(track_colour(frames, "red"), 64) > 0.9
    t = 80
    stepped = np.stack([20 + 3 * (np.arange(t) // 4), np.full(t, 32.0)], axis=1)
    assert motion_smoothness(Track("red", np.ones(t, bool), stepped, np.ones(t)), 64) == 0.0
    still = np.full((t, 2), 32.0)
    assert motion_smoothness(Track("red", np.ones(t, bool), still, np.ones(t)), 64) is None

"""The long-video judge (`videogen.training.long_eval`): the training scenes pass every window,
planted failures fail for the right reason, an object wrapping round the frame edge is one copy,
and `videogen eval builtin --long` runs end to end."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from videogen.stitch.colour import delta_e2000, rgb_to_lab
from videogen.training.long_eval import copies_per_frame, judge_video, long_prompts, window_bounds
from videogen.training.scenes import (
    BACKGROUNDS,
    PALETTE,
    Scene,
    SceneObject,
    canonical_start,
    colour_mask,
    render_scene,
)

FPS = 16.0
WINDOW = 160  # frames in 10 s


def _scene_video(scene: Scene, seconds: float, seed: int = 0) -> tuple[Scene, np.ndarray]:
    placed = canonical_start(scene, random.Random(seed))
    return placed, render_scene(placed, int(seconds * FPS))


def test_held_out_prompts_cover_bouncing_two_objects_and_unseen_pairs():
    scenes = long_prompts(6)
    assert len({s.caption() for s in scenes}) == 6 and all(s.lighting == "none" for s in scenes)
    assert any(o.motion == "bouncing" for s in scenes[:3] for o in s.objects)
    assert len(scenes[2].objects) == 2 and len(scenes[5].objects) == 2
    assert long_prompts(6) == scenes  # same seed, same prompts


def test_training_scenes_pass_every_window():
    for i, scene in enumerate(long_prompts(6)):
        placed, frames = _scene_video(scene, 20.0, seed=i)
        windows = judge_video(frames, placed, FPS)
        assert len(windows) == 2
        for w in windows:
            assert w.passed, (scene.caption(), w.index, w.failures())
            assert w.motion_ok and w.missing == 0.0 and w.split == 0.0 and w.background_de < 0.5


@pytest.fixture(scope="module")
def triangle_video():
    """A purple triangle moving right on a white background, 20 s: two windows that pass."""
    scene = Scene((SceneObject("purple", "triangle", "right", 0.25, 0.5),), "white")
    frames = render_scene(scene, 2 * WINDOW)
    assert all(w.passed for w in judge_video(frames, scene, FPS))
    return scene, frames


def test_a_window_without_the_object_fails_as_missing(triangle_video):
    scene, frames = triangle_video
    planted = frames.copy()
    second = planted[WINDOW:]
    second[colour_mask(second, PALETTE["purple"])] = BACKGROUNDS["white"]
    first, later = judge_video(planted, scene, FPS)
    assert first.passed and not later.passed
    assert later.missing == 1.0 and later.failures()[0] == "purple triangle missing in 100% of frames"


def test_a_doubled_object_fails_as_split(triangle_video):
    scene, frames = triangle_video
    planted = frames.copy()
    second = planted[WINDOW:]
    obj = colour_mask(second, PALETTE["purple"])
    second[np.roll(obj, 32, axis=2)] = PALETTE["purple"]  # a second copy half a frame to the right
    first, later = judge_video(planted, scene, FPS)
    assert first.passed and not later.passed
    assert later.split == 1.0 and later.missing == 0.0
    assert "purple triangle split/doubled in 100% of frames" in later.failures()


def test_a_tinted_background_fails_on_background_alone(triangle_video):
    scene, frames = triangle_video
    tint = np.array([245, 232, 215], np.uint8)  # white, warmed
    assert delta_e2000(rgb_to_lab(tint), rgb_to_lab(np.array(BACKGROUNDS["white"], np.uint8))) > 3.0
    planted = frames.copy()
    second = planted[WINDOW:]
    second[~colour_mask(second, PALETTE["purple"])] = tint
    first, later = judge_video(planted, scene, FPS)
    assert first.passed and not later.passed
    assert later.background_de > 3.0 and len(later.failures()) == 1
    assert later.failures()[0].startswith("background dE2000")


@pytest.mark.parametrize(("x0", "y0"), [(0.0, 0.5), (0.5, 0.0), (0.0, 0.0)])
def test_an_object_wrapping_round_the_frame_edge_is_one_copy(x0, y0):
    # centred on the edge (or the corner): drawn in two (or four) pieces at opposite edges
    scene = Scene((SceneObject("red", "square", "right", x0, y0),), "black")
    frames = render_scene(scene, 1)
    mask = colour_mask(frames, PALETTE["red"])[0]
    assert mask[:, 0].any() and mask[:, -1].any() if x0 == 0.0 else mask[0].any() and mask[-1].any()
    assert copies_per_frame(frames, "red").tolist() == [1]


def test_two_separate_copies_are_two():
    scene = Scene((SceneObject("red", "square", "still", 0.25, 0.5), SceneObject("blue", "square", "still", 0.75, 0.5)),
                  "black")  # fmt: skip
    frames = render_scene(scene, 1)
    frames[colour_mask(frames, PALETTE["blue"])] = PALETTE["red"]  # the blue square turns into a red copy
    assert copies_per_frame(frames, "red").tolist() == [2]


def test_an_occluded_object_cut_in_two_is_one_copy():
    scene = Scene((SceneObject("red", "square", "still", 0.5, 0.5),), "black")
    frames = render_scene(scene, 1)
    frames[0, :, 30:34] = PALETTE["blue"]  # a blue bar across the middle of the square
    assert copies_per_frame(frames, "red").tolist() == [2]
    assert copies_per_frame(frames, "red", others=["blue"]).tolist() == [1]


def test_a_short_tail_joins_the_last_window():
    assert window_bounds(320, FPS) == [(0, 160), (160, 320)]
    assert window_bounds(330, FPS) == [(0, 160), (160, 330)]
    assert window_bounds(250, FPS) == [(0, 160), (160, 250)]


@pytest.mark.parametrize("value", ["5", "nan", "-10", "4000"])
def test_bad_long_values_are_one_line_naming_the_option(value):
    r = subprocess.run([sys.executable, "-m", "videogen.cli", "eval", "builtin", "--long", value],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("videogen: error: --long=")


@pytest.mark.slow
def test_eval_builtin_long_renders_streams_and_prints_a_json_line():
    cmd = [sys.executable, "-m", "videogen.cli", "eval", "builtin", "--long", "10", "--prompts", "1",
           "--steps", "1", "--json"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["render_windows"] == 1 and result["stream_windows"] == 1
    for path in ("render", "stream"):
        assert 0.0 <= result[f"{path}_pass_rate"] <= 1.0 and result[f"{path}_compute_s_per_s"] > 0
        assert result[f"{path}_retries"] >= 0
    # The denoising the retries added (a render's from its drift report, a stream's from its chunks)
    for path in ("render", "stream"):
        assert result[f"{path}_retry_evals"] >= 0
        assert (result[f"{path}_retry_evals"] > 0) == (result[f"{path}_retries"] > 0)
    assert 0.0 <= result["max_missing"] <= 1.0
    assert result["worst_window"]["prompt"] == long_prompts(1)[0].caption() and result["worst_window"]["reason"]


def test_first_measures_one_prompt_of_a_longer_run_with_its_own_prompt():
    from videogen.errors import InvalidOption
    from videogen.training.long_eval import evaluate_long

    result = evaluate_long(None, None, seconds=10, prompts=2, first=3)  # no model: nothing rendered
    assert result.prompts == long_prompts(5)[3:] and result.windows == []
    with pytest.raises(InvalidOption) as info:
        evaluate_long(None, None, seconds=10, prompts=1, first=-1)
    assert info.value.option == "first"
    r = subprocess.run([sys.executable, "-m", "videogen.cli", "eval", "builtin", "--long", "10", "--first", "-1"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip().splitlines() == ["videogen: error: --first=-1: must be at least 0"]

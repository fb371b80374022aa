"""Drift correction tells drift from content change: a vanishing object does not tint the
background, a hard-cut chain fixed by `videogen drift fix` shows no seam, an extension with a new
prompt keeps its own colours, the report reads a render's own layout, bad options fail clearly."""

import json

import numpy as np
import pytest

from videogen.cli.drift import main as drift_main
from videogen.io.video import VideoReader, VideoWriter
from videogen.stitch.colour import U8_TO_LINEAR, delta_e2000, linear_to_srgb, rgb_to_lab
from videogen.stitch.config import DriftConfig
from videogen.stitch.metrics import seam_jumps
from videogen.stitch.robust import limit_to_seam
from videogen.stitch.stats import frame_lab_stats
from videogen.stitch.stitcher import Stitcher
from videogen.stitch.transfer import ColorTransform
from videogen.training.scenes import Scene, SceneObject, render_scene


def drifted(frames: np.ndarray, gain: float, tint: float = 0.0) -> np.ndarray:
    """A global drift: `gain` on linear light, `tint` more red and less blue."""
    lin = U8_TO_LINEAR[frames] * gain * np.array([1 + tint, 1.0, 1 - tint])
    return np.round(linear_to_srgb(np.clip(lin, 0, 1)) * 255).astype(np.uint8)


def stitch(segments, config, overlap=0):
    st = Stitcher(overlap, config)
    out = [st.new_shot(), *(st.push(s) for s in segments), st.flush()]
    return np.concatenate([o for o in out if len(o)]), st


@pytest.mark.parametrize("background, colour", [("gray", "red"), ("blue", "yellow"), ("white", "red")])
def test_a_vanishing_object_does_not_tint_the_background(background, colour):
    """A circle (13% of the frame) is gone from segment 3 on, while the chain darkens by 5% of
    its light per segment: the corrected background stays where segment 0 had it; the full-frame
    fit (the old behaviour, `robust=False`) paints it toward the anchor's mean, several dE. (A
    tint in linear light is not affine in CIELAB: the full-frame fit of the segments that still
    show the object then leaves ~2 dE on a white background, and the ramp carries it on.)"""
    scene = Scene((SceneObject(colour, "circle", "right", 0.3, 0.5),), background)
    empty = Scene((), background)
    T = 17
    segs = [drifted(render_scene(scene if k < 3 else empty, T, start=k * T), 0.95**k) for k in range(6)]
    corner = np.s_[:, 1:8, 1:8]  # the circle moves along the middle rows: this is background

    def background_de(out):
        ref = rgb_to_lab(out[:T][corner].reshape(-1, 3)).mean(0)
        return [float(delta_e2000(rgb_to_lab(out[k * T : (k + 1) * T][corner].reshape(-1, 3)).mean(0), ref))
                for k in range(3, 6)]  # fmt: skip

    fixed, st = stitch(segs, DriftConfig())
    assert max(background_de(fixed)) <= 1.0, background_de(fixed)
    assert [f["content_weight"] for f in st.report().extra["corrections"]] == [1, 1, 1, 0, 0, 0]
    old, _ = stitch(segs, DriftConfig(robust=False))
    assert min(background_de(old)) > 4.0, background_de(old)
    # and the drift itself is still corrected where the object is present
    plain, _ = stitch(segs, DriftConfig(mode="off"))
    assert (
        np.abs(fixed[: 3 * T].astype(int) - render_scene(scene, 3 * T)).mean()
        < np.abs(plain[: 3 * T].astype(int) - render_scene(scene, 3 * T)).mean()
    )


def test_the_correction_never_moves_a_segment_farther_from_its_neighbour_than_the_drift_it_removes():
    mean, anchor, neighbour = np.array([50.0, 0, 0]), np.array([50.0, 0, 0]), np.array([50.0, 0, 0])
    paint = ColorTransform(np.eye(3), np.array([0.0, 8.0, 0.0]))  # a tint that removes no drift
    limited, s = limit_to_seam(paint, mean, anchor, neighbour)
    assert s == 0.0 and limited.is_identity
    drift = np.array([44.0, 2, 0])  # 6 dE of drift, the neighbour already corrected
    fix = ColorTransform(np.eye(3), anchor - drift)
    kept, s = limit_to_seam(fix, drift, anchor, neighbour)
    assert s == 1.0 and kept is fix


def hard_cut_chain(num=6, T=24, size=64):
    """6 hard-cut segments of a bouncing square, each with its own brightness and tint step."""
    scene = Scene((SceneObject("yellow", "square", "bouncing", 0.4, 0.4, angle=0.7),), "blue")
    steps = [(1.0, 0.0), (0.9, 0.02), (1.06, -0.02), (0.85, 0.03), (0.95, 0.0), (1.08, 0.03)]
    return [drifted(render_scene(scene, T, size, start=k * T), g, t) for k, (g, t) in enumerate(steps[:num])]


def test_drift_fix_leaves_no_visible_seam_in_a_hard_cut_chain(tmp_path):
    segs = hard_cut_chain()
    T = len(segs[0])
    with VideoWriter(tmp_path / "chain.mp4", 64, 64, 16, crf=12) as w:
        for s in segs:
            w.write(s)
    assert (
        drift_main(["fix", str(tmp_path / "chain.mp4"), "--segment-frames", str(T), "-o", str(tmp_path / "f.mp4")]) == 0
    )
    seams = [(k * T, k * T) for k in range(1, len(segs))]
    for name, limit_ok in (("chain.mp4", False), ("f.mp4", True)):
        means = frame_lab_stats(VideoReader(tmp_path / name).read_all())[:, :3]
        jumps, p95 = seam_jumps(means, seams, [0])
        # each seam's colour step <= 2x the p95 of in-segment frame steps (the uncorrected chain: far above)
        assert (max(jumps) <= 2.0) == limit_ok, (name, jumps, p95)


def test_drift_report_uses_the_render_layout_from_its_sidecar(tmp_path, capsys):
    rng = np.random.default_rng(0)
    segs = [np.clip(rng.normal(120 + 10 * k, 20, (n, 32, 32, 3)), 0, 255).astype(np.uint8)
            for k, n in enumerate((17, 13, 21))]  # fmt: skip
    st = Stitcher(4, DriftConfig(mode="off"))
    frames = [st.new_shot(), st.push(segs[0]), st.push(segs[1]), st.new_shot(), st.push(segs[2]), st.flush()]
    video = tmp_path / "v.mp4"
    with VideoWriter(video, 32, 32, 16) as w:
        for f in frames:
            w.write(f)
    st.report().write(video)
    assert drift_main(["report", str(video), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert (rep["num_segments"], rep["seams"], rep["shot_starts"]) == (3, [[13, 17]], [0, 26])
    assert rep["layout"] == str(video) + ".drift.json"
    assert drift_main(["report", str(video), "--json", "--segment-frames", "10"]) == 0  # the option wins
    assert json.loads(capsys.readouterr().out)["num_segments"] == 5
    (tmp_path / "v.mp4.drift.json").write_text('{"num_frames": 3}')  # another video's: ignored
    assert drift_main(["report", str(video), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_segments"] == 1


@pytest.mark.parametrize("field, value", [("anchor", "previous"), ("robust", "yes")])
def test_bad_drift_options_name_the_field(field, value):
    from videogen.config.spec import RenderSpec
    from videogen.errors import InvalidOption

    with pytest.raises(ValueError, match=f"`{field}`"):
        DriftConfig(**{field: value})
    spec = RenderSpec.single("a red circle", 1.0, drift_correction={field: value})
    with pytest.raises(InvalidOption, match=f"drift_correction.{field}"):
        spec.drift_config()
    with pytest.raises(InvalidOption, match="drift_correction.anchr"):
        RenderSpec.single("a red circle", 1.0, drift_correction={"anchr": "new"}).drift_config()


def test_state_with_robust_statistics_round_trips_and_a_version_1_state_still_loads():
    segs = hard_cut_chain(4, T=12)
    a = Stitcher(0, DriftConfig())
    a.new_shot()
    a.push(segs[0])
    a.push(segs[1])
    state = a.state_dict()
    b = Stitcher(0, DriftConfig())
    b.load_state_dict(state)
    assert all(np.array_equal(a.push(s), b.push(s)) for s in segs[2:])
    assert a.report().extra == b.report().extra
    old = {k: v for k, v in state.items() if k not in ("anchor_robust", "prev_robust", "prev_out", "tail_robust",
                                                         "reanchor", "content", "fits")}  # fmt: skip
    c = Stitcher(0, DriftConfig())
    c.load_state_dict({**old, "version": 1})
    assert len(c.push(segs[2])) == len(segs[2])  # plain fits until a shot sets robust statistics


def test_reanchor_sets_a_new_anchor_without_a_cut():
    red = Scene((SceneObject("red", "circle", "still", 0.5, 0.5),), "white")
    blue = Scene((SceneObject("blue", "square", "still", 0.5, 0.5),), "white")
    a, b = render_scene(red, 16), render_scene(blue, 16)
    kept, _ = stitch([a, b], DriftConfig(), overlap=4)
    st = Stitcher(4, DriftConfig())
    st.new_shot()
    out = [st.push(a)]
    st.reanchor()
    out += [st.push(b), st.flush()]
    fresh = np.concatenate(out)
    assert len(fresh) == len(kept) == 28 and st.report().seams == [(12, 16)]  # still one blended seam
    blue_px = np.array([50, 80, 230])
    assert np.abs(fresh[-1].astype(int) - render_scene(blue, 1)[0]).mean() < 0.5
    assert np.abs(fresh[-1, 32, 32].astype(int) - blue_px).max() <= 3


def test_an_extension_with_a_new_prompt_keeps_its_own_colours(builtin_model, tmp_path):
    """A red circle's video extended with a blue square: the default (`anchor: "auto"`: a new
    prompt, a new anchor) keeps the square blue; the source's anchor with full-frame statistics
    (the old behaviour) paints it magenta."""
    from videogen import RenderSpec, render

    common = dict(steps=2, segment_seconds=1.0, overlap_frames=5, seed=3)
    src = RenderSpec.single("a red circle moving right on a white background", 1.0, **common)
    list(render(src, tmp_path / "src.mp4", model=builtin_model, tail=tmp_path / "src.tail"))

    def object_colour(config):
        spec = RenderSpec.single("a blue square bouncing on a white background", 1.0, drift_correction=config, **common)
        list(render(spec, tmp_path / "ext.mp4", model=builtin_model, continue_from=tmp_path / "src.tail"))
        last = VideoReader(tmp_path / "ext.mp4").read_all()[-6:].astype(int)
        return last[last.sum(-1) < 600].mean(0)  # the pixels that are not the white background

    r, g, b = object_colour({})
    assert b > 200 and r < 110, (r, g, b)  # blue (50, 80, 230)
    r, g, b = object_colour({"anchor": "source", "robust": False})
    assert r > 150 and b > 150, (r, g, b)  # magenta: the source's red painted over it

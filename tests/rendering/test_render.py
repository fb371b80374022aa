"""render(): the real loading path, chained segments, determinism, continuation, safety."""

import json

import numpy as np
import pytest
import torch

from videogen import RenderSpec, render
from videogen.errors import InvalidOption, ModelLoadError, NonFiniteLatents, RenderCancelled
from videogen.io.video import VideoReader, probe
from videogen.models.loader import load_model
from videogen.rendering.render import RenderFinished, RenderStarted, SegmentFinished, prepare
from videogen.sampling.loop import StepProgress, denoise_segment


def _run(spec, out, **kw):
    events = list(render(spec, out, **kw))
    assert isinstance(events[-1], RenderFinished)
    return events


@pytest.mark.parametrize("variant, size", [("tiny_wan21", (32, 32)), ("tiny_wan22", (64, 64))])
def test_tiny_wan_folder_loads_and_renders_a_chained_video(variant, size, request, tmp_path):
    folder = request.getfixturevalue(variant)
    model = load_model(str(folder), device="cpu", dtype="float32")
    spec = RenderSpec.single("a red cat moving left", 3.0, model=str(folder), size=size, fps=8, steps=2,
                             segment_seconds=2.0, overlap_frames=5)  # fmt: skip
    events = _run(spec, tmp_path / "out.mp4", model=model)
    started = events[0]
    assert isinstance(started, RenderStarted) and len(started.plan) >= 2  # really chained
    info = probe(tmp_path / "out.mp4")
    assert (info.width, info.height, info.fps, info.num_frames) == (*size, 8.0, 24)
    assert (tmp_path / "out.thumb.png").is_file()
    report = json.loads((tmp_path / "out.mp4.drift.json").read_text())  # every render reports its drift
    assert (tmp_path / "out.mp4.drift.png").is_file() and events[-1].report == tmp_path / "out.mp4.drift.json"
    assert len(report["segments"]) == len(started.plan)
    steps = [e for e in events if isinstance(e, StepProgress)]
    assert len(steps) == 2 * len(started.plan)


def test_same_seed_gives_identical_video_and_another_seed_does_not(builtin_model, tmp_path):
    def frames(seed, name):
        spec = RenderSpec.single("a red circle moving right on a black background", 1.5, seed=seed, steps=2,
                                 segment_seconds=1.0, overlap_frames=5)  # fmt: skip
        _run(spec, tmp_path / name, model=builtin_model)
        return VideoReader(tmp_path / name).read_all()

    a, b, c = frames(7, "a.mp4"), frames(7, "b.mp4"), frames(8, "c.mp4")
    assert a.shape == (24, 64, 64, 3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def _denoise(model, prefix, seed=3):
    gen = denoise_segment(model, cond=model.prompt_encoder.encode(["a blue square"]), uncond=None,
                          latent_frames=6, latent_size=(16, 16), prefix=prefix, steps=3, guidance=1.0,
                          flow_shift=3.0, seed=seed, segment=1)  # fmt: skip
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return stop.value


def test_continuation_holds_the_prefix_clean_and_depends_on_it(builtin_model):
    torch.manual_seed(0)
    prefix_a = torch.randn(1, 192, 2, 16, 16)
    prefix_b = prefix_a.clone()
    prefix_b[:, :, -1] += 1.0  # change the previous segment's last latent frame
    out_a, out_b = _denoise(builtin_model, prefix_a), _denoise(builtin_model, prefix_b)
    assert torch.equal(out_a[:, :, :2], prefix_a) and torch.equal(out_b[:, :, :2], prefix_b)
    new_a, new_b = out_a[:, :, 2:], out_b[:, :, 2:]
    assert (new_a - new_b).abs().mean() > 1e-3  # the new frames see the prefix
    assert torch.equal(_denoise(builtin_model, prefix_a), out_a)  # and nothing else changes them


def test_nan_latents_fail_the_segment_and_leave_no_file(builtin_model, tmp_path, monkeypatch):
    real_forward = builtin_model.transformer.forward

    def poisoned(*args, **kwargs):
        out = real_forward(*args, **kwargs)
        return (out[0] * float("nan"),)

    monkeypatch.setattr(builtin_model.transformer, "forward", poisoned)
    spec = RenderSpec.single("a red circle", 1.0, steps=2)
    with pytest.raises(NonFiniteLatents, match="step 1 of 2"):
        list(render(spec, tmp_path / "nan.mp4", model=builtin_model))
    assert not (tmp_path / "nan.mp4").exists() and not list(tmp_path.glob("*.mp4"))


def test_cancel_stops_within_one_denoising_step_and_deletes_partial_output(builtin_model, tmp_path):
    asked = {"cancel": False}
    steps_after_cancel = 0
    spec = RenderSpec.single("a red circle", 3.0, steps=4, segment_seconds=1.0, overlap_frames=5)
    with pytest.raises(RenderCancelled):
        for event in render(spec, tmp_path / "c.mp4", model=builtin_model, cancel=lambda: asked["cancel"]):
            if isinstance(event, StepProgress):
                if asked["cancel"]:
                    steps_after_cancel += 1
                if event.segment == 1 and event.step == 2:
                    asked["cancel"] = True
    assert steps_after_cancel == 0
    assert not list(tmp_path.iterdir())


def test_an_interrupted_render_resumes_after_its_last_finished_segment(builtin_model, tmp_path):
    spec = RenderSpec.single("a green triangle bouncing", 2.5, steps=2, segment_seconds=1.0, overlap_frames=5, seed=5)
    _run(spec, tmp_path / "ref.mp4", model=builtin_model)

    work = tmp_path / "work"
    gen = render(spec, tmp_path / "out.mp4", model=builtin_model, workdir=work)
    finished = 0
    for event in gen:
        if isinstance(event, SegmentFinished):
            finished += 1
            if finished == 2:
                gen.close()  # the process "dies" after two segments
                break
    assert not (tmp_path / "out.mp4").exists()

    events = _run(spec, tmp_path / "out.mp4", model=builtin_model, workdir=work)
    assert events[0].resumed_segments == 2
    generated = {e.segment for e in events if isinstance(e, StepProgress)}
    assert 0 not in generated and 1 not in generated  # finished segments are not generated again
    assert np.array_equal(VideoReader(tmp_path / "out.mp4").read_all(), VideoReader(tmp_path / "ref.mp4").read_all())


def test_size_the_model_cannot_take_is_named(builtin_model):
    with pytest.raises(InvalidOption, match="size='60x64'"):
        prepare(RenderSpec.single("x", 1, size=(60, 64)), builtin_model)


def test_missing_and_incomplete_model_folders_are_clear_errors(tmp_path, tiny_wan21):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(tmp_path / "nope"))
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_wan21, broken)
    shutil.rmtree(broken / "vae")
    with pytest.raises(ModelLoadError, match="incomplete: missing vae"):
        load_model(str(broken))
    with pytest.raises(ModelLoadError, match="no such preset"):
        load_model("wan9-ultra")


def test_bad_drift_settings_are_named():
    with pytest.raises(InvalidOption, match=r"drift_correction\.strength"):
        RenderSpec.single("x", 1, drift_correction={"strength": 1.5}).validate()
    with pytest.raises(InvalidOption, match=r"drift_correction\.mode"):
        RenderSpec.single("x", 1, drift_correction={"mode": "magic"}).validate()


def test_an_extension_continues_the_source_video_from_its_last_latents(builtin_model, tmp_path):
    """A 29-frame render extended by 24 frames equals one 53-frame render (segment boundaries
    aligned): the extension is conditioned on the source's last latent frames, continues its noise
    stream and its stitcher state (seam blend, colour anchor)."""
    from videogen.io.video import concat_videos

    # 4 steps: at 2 the frames are half noise, which H.264 encodes differently in the two videos by
    # up to ~5 levels (through the temporal decoder), hiding what the test is after
    common = dict(steps=4, segment_seconds=1.0, overlap_frames=5, seed=11)
    prompt = "a yellow square moving down on a gray background"
    _run(RenderSpec.single(prompt, 53 / 16, **common), tmp_path / "whole.mp4", model=builtin_model)
    _run(
        RenderSpec.single(prompt, 29 / 16, **common),
        tmp_path / "src.mp4",
        model=builtin_model,
        tail=tmp_path / "src.tail",
    )
    events = _run(RenderSpec.single(prompt, 24 / 16, **common), tmp_path / "ext.mp4", model=builtin_model,
                  continue_from=tmp_path / "src.tail")  # fmt: skip
    assert events[0].plan.segments[0].prefix_latent_frames == 2  # conditioned on the source's tail
    assert probe(tmp_path / "ext.mp4").num_frames == 24
    report = json.loads((tmp_path / "ext.mp4.drift.json").read_text())
    assert len(report["segments"]) == 4  # the report covers the joined video: 2 source + 2 new segments
    concat_videos([tmp_path / "src.mp4", tmp_path / "ext.mp4"], tmp_path / "joined.mp4")
    joined = VideoReader(tmp_path / "joined.mp4").read_all()
    whole = VideoReader(tmp_path / "whole.mp4").read_all()
    assert joined.shape == whole.shape == (53, 64, 64, 3)
    diff = np.abs(joined.astype(int) - whole).reshape(53, -1).mean(1)
    # The same frames, except at the one seam: the whole render crossfades it, while the source
    # video already ended on its own last frames, so the extension skips its blend window.
    seam = np.zeros(53, bool)
    seam[29 - 5 : 29 + 2] = True  # the blend window and the frame after it (the stitcher's ramp starts there)
    # Frames are compared after H.264 (crf 17) of two different-length videos: x264's lookahead and
    # rate decisions differ with what follows, which moves decoded pixels by ~1-2 levels on average.
    assert diff[~seam].max() < 4.0, str(np.round(diff, 2).tolist())
    assert diff[seam].max() < 8.0, diff

    tail = torch.load(tmp_path / "src.tail", weights_only=False)
    tail["handoff"] = tail["handoff"] + 0.5  # another source ending gives another continuation
    torch.save(tail, tmp_path / "other.tail")
    _run(RenderSpec.single(prompt, 24 / 16, **common), tmp_path / "ext2.mp4", model=builtin_model,
         continue_from=tmp_path / "other.tail")  # fmt: skip
    other = np.abs(VideoReader(tmp_path / "ext2.mp4").read_all().astype(int) - joined[29:]).mean()
    assert other > 8.0, other  # far beyond the encoder's noise above


def test_a_continuation_must_match_the_source_settings(builtin_model, tmp_path):
    _run(
        RenderSpec.single("a red circle", 1.0, steps=2), tmp_path / "src.mp4", model=builtin_model, tail=tmp_path / "t"
    )
    with pytest.raises(InvalidOption, match=r"continue_from.*fps"):
        list(render(RenderSpec.single("a red circle", 1.0, steps=2, fps=8), tmp_path / "e.mp4", model=builtin_model,
                    continue_from=tmp_path / "t"))  # fmt: skip


def _image(path, colour):
    from PIL import Image

    img = np.zeros((96, 128, 3), np.uint8)  # another size and aspect: resized to cover, centre-cropped
    img[:] = colour
    img[30:60, 50:80] = (255, 255, 255)
    Image.fromarray(img).save(path)
    return str(path)


def test_a_video_can_start_from_an_image(builtin_model, tmp_path):
    spec = RenderSpec.single("a red circle", 1.0, steps=2, image=_image(tmp_path / "a.png", (0, 0, 200)))
    _run(spec, tmp_path / "a.mp4", model=builtin_model)
    first = VideoReader(tmp_path / "a.mp4").read_all()[0].astype(int)
    from PIL import Image

    expected = np.asarray(
        Image.open(tmp_path / "a.png").convert("RGB").resize((85, 64), Image.LANCZOS).crop((10, 0, 74, 64))
    )
    assert np.abs(first - expected.astype(int)).mean() < 4  # the image is the first frame (H.264 aside)
    spec_b = RenderSpec.single("a red circle", 1.0, steps=2, image=_image(tmp_path / "b.png", (0, 200, 0)))
    _run(spec_b, tmp_path / "b.mp4", model=builtin_model)
    assert np.abs(VideoReader(tmp_path / "b.mp4").read_all()[0].astype(int) - first).mean() > 30


def test_an_image_through_a_wan_vae(tiny_wan22, tmp_path):
    model = load_model(str(tiny_wan22), device="cpu", dtype="float32")
    spec = RenderSpec.single("a cat", 1.0, model=str(tiny_wan22), size=(64, 64), fps=8, steps=2,
                             image=_image(tmp_path / "a.png", (200, 0, 0)))  # fmt: skip
    _run(spec, tmp_path / "w.mp4", model=model)
    assert probe(tmp_path / "w.mp4").num_frames == 8


def test_an_unreadable_image_is_named(builtin_model, tmp_path):
    (tmp_path / "x.png").write_text("not an image")
    with pytest.raises(InvalidOption, match="image="):
        list(
            render(RenderSpec.single("x", 1.0, image=str(tmp_path / "x.png")), tmp_path / "o.mp4", model=builtin_model)
        )
    with pytest.raises(InvalidOption, match="no such image"):
        RenderSpec.single("x", 1.0, image=str(tmp_path / "missing.png")).validate()
    assert not (tmp_path / "o.mp4").exists()

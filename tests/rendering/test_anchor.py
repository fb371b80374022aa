"""Anchor frames (a preset's `anchor_frame`): every continuing segment of a shot sees a clean frame
of the shot's first segment, at `SINK_POSITION` and at its own time, in place of its prefix's
first latent frame; resumes and extensions keep it, a new prompt starts its own."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch

from videogen import RenderSpec, render
from videogen.config.geometry import SINK_POSITION
from videogen.io.video import VideoReader
from videogen.models.codec import PixelCodec
from videogen.models.loader import load_model
from videogen.rendering.checkpoints import SegmentCheckpoints
from videogen.rendering.events import RenderFinished, SegmentFinished
from videogen.rendering.segment import segment_times
from videogen.sampling.loop import SegmentAnchor, anchor_latent, denoise_segment, run_to_end, segment_noise

PROMPT = "a green triangle bouncing on a black background"
# 17-frame segments (5 latent frames); every step computed and no retries, so each segment is 2 calls
COMMON = dict(steps=2, segment_seconds=1.0, overlap_frames=5, seed=5, cache="off", health_checks=[])


@pytest.fixture(scope="module")
def anchored():
    """The built-in model with an anchor preset (its own instance: the preset is changed) and a
    record of every transformer input: (first latent frame, positions, clock) per call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load_model("builtin", device="cpu", dtype="float32", attention="dense")
    model.preset = dataclasses.replace(model.preset, anchor_frame=3)
    calls: list[tuple[torch.Tensor, list | None, list | None]] = []
    plain = model.transformer_input

    def spy(latents, embeds, frames=None, absolute=None):
        calls.append((latents[:1, :, 0].clone(), frames, absolute))
        return plain(latents, embeds, frames, absolute)

    model.transformer_input = spy
    model.calls = calls
    return model


def _run(spec, path, model, **kw):
    events = list(render(spec, path, model=model, **kw))
    assert isinstance(events[-1], RenderFinished)
    return events


def _segments(model, steps: int) -> list[tuple[torch.Tensor, list | None, list | None]]:
    """The recorded calls, one per segment (the first step's: all steps of a segment see the same conditioning)."""
    calls = list(model.calls)
    model.calls.clear()
    return calls[::steps]


def test_continuing_segments_see_the_first_segments_frame_at_the_sink_position(anchored, tmp_path):
    spec = RenderSpec.single(PROMPT, 3.0, **COMMON)
    anchored.calls.clear()
    gen = render(spec, tmp_path / "out.mp4", model=anchored, workdir=tmp_path / "work", thumbnail=False)
    plan = next(gen).plan
    for event in gen:  # every segment, then stop before the finish clears the checkpoints
        if isinstance(event, SegmentFinished) and event.index == len(plan) - 1:
            gen.close()
    seen = _segments(anchored, 2)
    assert len(seen) == len(plan) >= 3
    assert seen[0][1] is None and seen[0][2] == [0, 1, 2, 3, 4]  # a shot's first segment: no anchor
    assert len(new := [s for s in seen[1:] if s[1] is None]) == 0, new
    # The anchor is the first segment's latent frame 3 as its last video frame alone (a clip's
    # first latent frame, as the model was trained on it), on the shot's clock at 3.
    checkpoints = SegmentCheckpoints(tmp_path / "work", spec, anchored)
    first = checkpoints.load(0)
    assert first.anchor is not None and first.anchor.time == 3.0 and first.anchor.prompt == PROMPT
    expected = anchor_latent(anchored.codec, first.handoff, 3)
    assert torch.equal(first.anchor.latent, expected)
    frames = anchored.codec.decode(expected)
    assert frames.shape[2] == 1  # one video frame ...
    # ... the group's last, as the latents hold it (the temporal decoder, which refines a whole
    # decode's groups from the one before, leaves a lone latent frame as it is)
    lossless = PixelCodec(anchored.codec.temporal_factor, anchored.codec.spatial_factor)
    assert torch.equal(frames[:, :, 0], lossless.decode(first.handoff)[:, :, 4 * 3])
    for i, (latent0, positions, clock) in enumerate(seen[1:], start=1):
        n = plan.segments[i].latent_frames
        assert positions == [SINK_POSITION, *range(1, n)]
        t = segment_times(plan)[i]
        assert clock == [3.0, *(t + k for k in range(1, n))]  # the anchor's own time, then the segment's clock
        assert torch.equal(latent0, expected[:, :, 0].to(latent0))
    # What is written and handed on is the clean prefix, not the anchor: segment 1's first latent
    # frame is segment 0's second to last.
    second = checkpoints.load(1).handoff
    assert torch.equal(second[:, :, :2], first.handoff[:, :, -2:])


def test_an_anchored_denoise_holds_the_clean_prefix_and_differs_from_the_plain_one(anchored):
    model = anchored
    cond = model.prompt_encoder.encode([PROMPT])
    prefix = torch.randn(1, 192, 2, 16, 16, generator=torch.Generator().manual_seed(0)).clamp(-1, 1)
    anchor = SegmentAnchor(prefix[:, :, :1] * 0.5, 2.0, PROMPT)
    kw = dict(cond=cond, uncond=None, latent_frames=5, latent_size=(16, 16), prefix=prefix, steps=2, guidance=1.0,
              flow_shift=3.0, seed=1, segment=1, time=7.0)  # fmt: skip
    plain = run_to_end(denoise_segment(model, **kw))
    out = run_to_end(denoise_segment(model, **kw, anchor=anchor))
    again = run_to_end(denoise_segment(model, **kw, anchor=anchor))
    assert torch.equal(out[:, :, :2], prefix)  # the prefix handed back is the previous segment's, exactly
    assert torch.equal(out, again)  # deterministic
    assert (out[:, :, 2:] - plain[:, :, 2:]).abs().mean() > 1e-3  # the anchor reaches the new frames
    for bad in ({"prefix": prefix[:, :, :1]}, {"prefix": None}, {"continuation": "renoise"}):
        with pytest.raises(ValueError, match="prefix of >= 2 latent frames"):
            run_to_end(denoise_segment(model, **{**kw, **bad}, anchor=anchor))
    noise = segment_noise((1, 192, 5, 16, 16), 1, 1)
    assert not torch.equal(noise[:, :, :1], anchor.latent)


def test_a_resumed_anchored_render_is_the_uninterrupted_one(anchored, tmp_path):
    spec = RenderSpec.single(PROMPT, 3.0, **COMMON)
    _run(spec, tmp_path / "ref.mp4", anchored, thumbnail=False)
    gen = render(spec, tmp_path / "out.mp4", model=anchored, workdir=tmp_path / "work", thumbnail=False)
    finished = 0
    for event in gen:
        if isinstance(event, SegmentFinished):
            finished += 1
            if finished == 2:
                gen.close()  # the process "dies" after two segments: the anchor must come back from the checkpoint
                break
    events = _run(spec, tmp_path / "out.mp4", anchored, workdir=tmp_path / "work", thumbnail=False)
    assert events[0].resumed_segments == 2
    ref, out = VideoReader(tmp_path / "ref.mp4").read_all(), VideoReader(tmp_path / "out.mp4").read_all()
    assert np.array_equal(ref, out)


def test_an_extension_keeps_its_sources_anchor_under_the_same_prompt_and_starts_its_own_under_a_new_one(
    anchored, tmp_path
):
    _run(RenderSpec.single(PROMPT, 29 / 16, **COMMON), tmp_path / "src.mp4", anchored, tail=tmp_path / "src.tail")
    source = torch.load(tmp_path / "src.tail", weights_only=False)["anchor"]
    assert source is not None and source["time"] == 3.0
    anchored.calls.clear()
    _run(RenderSpec.single(PROMPT, 24 / 16, **COMMON), tmp_path / "same.mp4", anchored,
         continue_from=tmp_path / "src.tail")  # fmt: skip
    same = _segments(anchored, 2)
    assert same and all(s[1][0] == SINK_POSITION and s[2][0] == 3.0 for s in same)
    assert all(torch.equal(s[0], source["latent"][:, :, 0]) for s in same)

    other = "a blue square moving left on a black background"
    _run(RenderSpec.single(other, 40 / 16, **COMMON), tmp_path / "new.mp4", anchored,
         continue_from=tmp_path / "src.tail")  # fmt: skip
    new = _segments(anchored, 2)
    assert new[0][1] is None  # the new prompt's first segment is not anchored on the old content ...
    first_time = new[0][2][0]
    for s in new[1:]:  # ... and the segments after it are anchored on it, at its clock + 3
        assert s[1][0] == SINK_POSITION and s[2][0] == first_time + 3
        assert not torch.equal(s[0], source["latent"][:, :, 0])


def test_the_builtin_preset_is_anchored_and_a_preset_without_an_anchor_frame_renders_as_before(
    builtin_model, anchored, tmp_path, monkeypatch
):
    from videogen.training.data import ANCHOR_LATEST

    # The shipped weights were trained on anchors at latent times 1..ANCHOR_LATEST: the preset's is among them.
    assert builtin_model.preset.anchor_frame == 6 and 1 <= builtin_model.preset.anchor_frame <= ANCHOR_LATEST
    monkeypatch.setattr(builtin_model, "preset", dataclasses.replace(builtin_model.preset, anchor_frame=None))
    spec = RenderSpec.single(PROMPT, 3.0, **COMMON)
    _run(spec, tmp_path / "plain.mp4", builtin_model, thumbnail=False, tail=tmp_path / "plain.tail")
    assert torch.load(tmp_path / "plain.tail", weights_only=False)["anchor"] is None
    anchored.calls.clear()
    _run(spec, tmp_path / "anchored.mp4", anchored, thumbnail=False)
    anchored.calls.clear()
    plain, with_anchor = (VideoReader(tmp_path / n).read_all().astype(int) for n in ("plain.mp4", "anchored.mp4"))
    first, rest = np.abs(plain[:12] - with_anchor[:12]).mean(), np.abs(plain[17:] - with_anchor[17:]).mean()
    # The first segment (before the seam's blend window) is the same render (H.264's lookahead over
    # different later frames may move a decoded pixel by a level); continuing segments see the anchor.
    assert first < 0.2 and rest > 1.0, (first, rest)


@pytest.mark.parametrize(
    "block,error",
    [
        ("    kind: builtin\n    anchor_frame: 6\n", None),
        ("    kind: builtin\n    anchor_frame: 0\n", "anchor_frame must be >= 1"),
        ("    kind: diffusers\n    path: /nowhere\n    anchor_frame: 6\n", "needs a model trained with anchors"),
    ],
)
def test_a_presets_anchor_frame_is_checked_at_load(presets_file, block, error):
    from videogen.config.presets import load_presets
    from videogen.errors import ModelLoadError

    presets_file(f"presets:\n  m:\n{block}    size: 64x64\n    fps: 16\n    steps: 2\n    guidance: 3.0\n"
                 "    segment_seconds: 2.0\n    overlap_frames: 5\n")  # fmt: skip
    if error is None:
        assert load_presets()["m"].anchor_frame == 6
    else:
        with pytest.raises(ModelLoadError, match=error):
            load_presets()

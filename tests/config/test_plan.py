"""Segment plans: exact frame counts, codec-legal segment lengths, overlap arithmetic."""

import pytest

from videogen.config.plan import frames_for, plan_render
from videogen.errors import InvalidOption


def _check_plan(plan, tf=4):
    for seg in plan.segments:
        assert seg.frames == tf * (seg.latent_frames - 1) + 1  # codec rule 4k+1
        assert seg.keep_frames <= seg.frames
        assert seg.new_frames >= 1


@pytest.mark.parametrize(
    "seconds, fps, segment_seconds, overlap, expected_segments",
    [
        (6, 16, 5, 5, 2),  # 96 frames: 81 + 15 new
        (5, 16, 5, 5, 1),  # 80 frames fit one 81-frame segment
        (1, 16, 5, 5, 1),
        (32, 16, 5, 17, 8),
        (10, 24, 5, 9, 3),
        (7.5, 8, 2, 5, 5),
    ],
)
def test_plan_has_exact_frame_count_and_legal_segments(seconds, fps, segment_seconds, overlap, expected_segments):
    total = frames_for(seconds, fps)
    plan = plan_render([("p", total)], fps=fps, segment_frames=round(segment_seconds * fps), overlap_frames=overlap)
    _check_plan(plan)
    assert len(plan) == expected_segments
    assert plan.total_frames == total
    assert sum(s.keep_frames for s in plan.segments) - sum(s.overlap_frames for s in plan.segments) == total
    first, *rest = plan.segments
    assert first.prefix_latent_frames == 0 and first.overlap_frames == 0
    for seg in rest:
        assert seg.prefix_latent_frames == (overlap - 1) // 4 + 1
        assert seg.overlap_frames == overlap


def test_six_seconds_at_16fps_is_81_frames_then_a_short_continuation():
    plan = plan_render([("p", 96)], fps=16, segment_frames=80, overlap_frames=5)  # 5 s at 16 fps
    a, b = plan.segments
    assert (a.latent_frames, a.frames, a.keep_frames) == (21, 81, 81)
    # 15 frames remain: 4 new latent frames after a 2-frame prefix -> 5 + 16 = 21 frames, keep 5 + 15
    assert (b.prefix_latent_frames, b.latent_frames, b.frames, b.keep_frames) == (2, 6, 21, 20)


def test_each_shot_starts_fresh_and_keeps_its_own_length():
    plan = plan_render([("a", 40), ("b", 100)], fps=16, segment_frames=81, overlap_frames=9)
    _check_plan(plan)
    shots = [s.shot for s in plan.segments]
    assert shots == [0, 1, 1]
    assert plan.segments[1].first_in_shot and plan.segments[1].prompt == "b"
    assert plan.segments[0].keep_frames == 40
    assert plan.total_frames == 140


def test_overlap_must_be_a_whole_number_of_latent_frames():
    with pytest.raises(InvalidOption, match="overlap_frames=8: must be 4k\\+1"):
        plan_render([("p", 100)], fps=16, segment_frames=81, overlap_frames=8)


def test_segment_must_hold_more_than_the_overlap():
    with pytest.raises(InvalidOption, match="segment_seconds"):
        plan_render([("p", 100)], fps=16, segment_frames=17, overlap_frames=17)


def test_fractional_frame_counts_are_rejected():
    with pytest.raises(InvalidOption, match=r"seconds=1\.03"):
        frames_for(1.03, 16)
    assert frames_for(0.5, 16) == 8


@pytest.mark.parametrize("seconds, segment_seconds, overlap", [(12, 2, 5), (32, 5, 17), (7.5, 2, 9)])
def test_segment_times_keep_one_clock_across_a_shot(seconds, segment_seconds, overlap):
    """A continuing segment's first new frame sits, on the segment clock (latent frames; latent i
    ends at frame 4i), exactly where the shot's video has got to; a new shot restarts the clock,
    and an extension continues its source's."""
    from videogen.rendering.segment import segment_times

    fps = 16
    total = frames_for(seconds, fps)
    plan = plan_render(
        [("a", total), ("b", total)], fps=fps, segment_frames=round(segment_seconds * fps), overlap_frames=overlap
    )
    times = segment_times(plan)
    written, prev = 0, -1.0
    for seg, t in zip(plan.segments, times):
        if seg.first_in_shot:
            assert t == 0.0
            written = 0
        else:
            first_new = 4 * (t + seg.prefix_latent_frames) - 3  # the first frame of latent P
            assert first_new == written
            assert t > prev  # the clock moves on
        written += seg.new_frames
        prev = t
    ext = plan_render([("a", total)], fps=fps, segment_frames=round(segment_seconds * fps), overlap_frames=overlap,
                      continue_first=True)  # fmt: skip
    assert segment_times(ext, time_end=40.0)[0] == 40.0 - ext.segments[0].prefix_latent_frames
    assert segment_times(ext)[0] == 0.0  # a source without a clock: count from 0

"""The segment health gate: its checks on real scenes and planted collapses, the deterministic
retry noise, and renders whose planted collapse is retried (and never written)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from videogen.config.presets import HEALTH_CHECKS, HealthConfig
from videogen.config.resolve import resolve_render
from videogen.config.spec import RenderSpec
from videogen.errors import InvalidOption, NonFiniteLatents
from videogen.rendering import SegmentFinished, SegmentRetried, render
from videogen.rendering.events import SegmentStarted
from videogen.sampling.health import (
    NONFINITE,
    _near,
    attempt_noise,
    check_segment,
    colour_copies,
    colour_palette,
    retry_guidance,
    run_gate,
    segment_stats,
)
from videogen.sampling.loop import Preview, StepProgress, segment_noise
from videogen.training.long_eval import copies_per_frame
from videogen.training.scenes import canonical_start, parse_caption, render_scene

CONFIG = HealthConfig(checks=HEALTH_CHECKS)  # every check, the built-in model's thresholds
PREFIX = 5


def _scene(caption: str, start: int, frames: int = 33) -> np.ndarray:
    import random

    scene = canonical_start(parse_caption(caption), random.Random(0))
    return render_scene(scene, frames, size=64, start=start, total=64)  # one lighting ramp across both segments


def _judge(frames: np.ndarray, previous: np.ndarray, anchor: np.ndarray | None = None):
    prev = segment_stats(previous[PREFIX:], CONFIG)
    anc = segment_stats(anchor[PREFIX:], CONFIG) if anchor is not None else prev
    return check_segment(frames, PREFIX, prev, anc, CONFIG)


MOVING = "a red circle moving right on a gray background"


def test_normal_segments_of_moving_and_still_scenes_pass():
    for caption in (MOVING, "a yellow square staying still on a black background",
                    "a cyan triangle bouncing on a white background",
                    "a yellow triangle moving down on a white background getting darker",
                    "a green square moving left and a white circle staying still on a blue background"):  # fmt: skip
        first, second = _scene(caption, 0), _scene(caption, 28)
        verdict = _judge(second, first)
        assert verdict.passed, (caption, verdict.details)


def test_a_black_a_frozen_and_an_emptied_segment_fail_their_checks():
    first, second = _scene(MOVING, 0), _scene(MOVING, 28)
    black = second.copy()
    black[PREFIX:] = 3
    frozen = second.copy()
    frozen[PREFIX:] = second[PREFIX]
    emptied = second.copy()
    emptied[PREFIX:] = np.median(second[PREFIX:, 0], axis=(0, 1)).astype(np.uint8)  # the object is gone
    assert "black" in _judge(black, first).failed
    assert _judge(frozen, first).failed == ("frozen",)
    assert "content_loss" in _judge(emptied, first).failed
    # A still scene after a still one is not frozen: motion is judged against the previous segment's.
    still = "a yellow square staying still on a black background"
    assert "frozen" not in _judge(_scene(still, 28), _scene(still, 0)).failed


def _doubled(frames: np.ndarray, shift: int = 32) -> np.ndarray:
    """A second copy of the scene's object `shift` pixels to the right in every frame after the prefix."""
    out = frames.copy()
    background = np.median(frames[:, 0], axis=(0, 1))
    rolled = np.roll(frames[PREFIX:], shift, axis=2)
    body = np.abs(rolled.astype(int) - background).max(-1, keepdims=True) > 60
    out[PREFIX:] = np.where(body, rolled, out[PREFIX:])
    return out


def test_a_split_or_doubled_object_fails_copies_and_a_lost_one_too():
    first, second = _scene(MOVING, 0), _scene(MOVING, 28)
    assert colour_copies(second, CONFIG.foreground_distance, CONFIG.object_area).tolist() == [1] * len(second)
    doubled = _doubled(second)
    assert colour_copies(doubled[PREFIX:], CONFIG.foreground_distance, CONFIG.object_area).tolist() == [2] * 28
    assert "copies" in _judge(doubled, first).failed
    # Two frames of 28 (7%) are within the 10% allowed; four (14%) are not.
    brief = second.copy()
    brief[PREFIX : PREFIX + 2] = doubled[PREFIX : PREFIX + 2]
    assert "copies" not in _judge(brief, first).failed
    brief[PREFIX : PREFIX + 4] = doubled[PREFIX : PREFIX + 4]
    assert "copies" in _judge(brief, first).failed
    # Judged against the anchor: a split the previous segment let through is not the new norm.
    assert "copies" in _judge(doubled, _doubled(first), anchor=first).failed
    # One of two objects lost.
    two = "a green square moving left and a white circle staying still on a blue background"
    a, b = _scene(two, 0), _scene(two, 28)
    lost = b.copy()
    white = (b[PREFIX:] > 200).all(-1, keepdims=True)
    lost[PREFIX:] = np.where(white, np.median(b[PREFIX:, 0], axis=(0, 1)).astype(np.uint8), b[PREFIX:])
    assert "copies" not in _judge(b, a).failed and "copies" in _judge(lost, a).failed


def test_a_colour_lost_while_the_other_object_smears_fails_colours_where_mass_and_copies_do_not():
    two = "a cyan circle moving down and a white triangle moving left on a green background"
    a, b = _scene(two, 0), _scene(two, 28)
    assert _judge(b, a).passed
    background = np.median(b[PREFIX:, 0], axis=(0, 1)).astype(np.uint8)
    white = (b[PREFIX:] > 200).all(-1, keepdims=True)
    cyan_colour = b[PREFIX:][(np.abs(b[PREFIX:].astype(int) - [40, 210, 220]).max(-1) < 60)][0]
    # The white triangle goes and the cyan circle smears into a band as wide as both were: the
    # foreground keeps its mass and one copy of each colour shows, but white is gone.
    smeared = b.copy()
    smeared[PREFIX:] = np.where(white, background, b[PREFIX:])
    cyan = (np.abs(smeared[PREFIX:].astype(int) - cyan_colour).max(-1) < 60).any(0).any(0)  # (W,) its columns
    lo = int(np.nonzero(cyan)[0].min())
    smeared[PREFIX:, :, lo : lo + 2 * int(cyan.sum())] = cyan_colour
    verdict = _judge(smeared, a)
    assert "colours" in verdict.failed and "copies" not in verdict.failed, verdict.details
    assert "objects" in verdict.failed, verdict.details  # judged against the anchor's objects
    # Two objects merged into one colour: the white triangle painted cyan.
    merged = b.copy()
    merged[PREFIX:] = np.where(white, cyan_colour, b[PREFIX:])
    assert "colours" in _judge(merged, a).failed
    # Judged against the previous segment: a colour already gone there is no reason to retry.
    assert "colours" not in _judge(smeared, smeared).failed
    # A brief loss (2 of 28 frames) is within the share allowed.
    brief = b.copy()
    brief[PREFIX : PREFIX + 2] = merged[PREFIX : PREFIX + 2]
    assert "colours" not in _judge(brief, a).failed


def test_objects_follows_each_anchor_object_through_crossings_and_fails_one_lost_or_split():
    # Two objects crossing over 8 segments: the one behind keeps a sliver, nothing is cut in two.
    two = "a cyan circle moving down and a white triangle moving left on a green background"
    frames = _scene(two, 0, frames=8 * 28 + PREFIX)
    config = HealthConfig(checks=("objects",))
    anchor = segment_stats(frames[PREFIX:33], config)
    assert [round(o[4]) for o in anchor.objects] == [1, 1] and len(anchor.objects) == 2
    apart = 0
    for k in range(1, 8):
        segment = frames[k * 28 : k * 28 + 33]
        verdict = check_segment(segment, PREFIX, anchor, anchor, config)
        assert verdict.passed, (k, verdict.details)
        # The white triangle gone (painted over in the background's colour) ...
        gone = segment.copy()
        white = (segment[PREFIX:] > 200).all(-1, keepdims=True)
        gone[PREFIX:] = np.where(white, segment[PREFIX:, :1, :1], segment[PREFIX:])
        assert check_segment(gone, PREFIX, anchor, anchor, config).failed == ("objects",), k
        # ... or a second white triangle beside it, away from the circle.
        doubled = segment.copy()
        rolled = np.roll(segment[PREFIX:], 32, axis=2)
        rolled_white = (rolled > 200).all(-1, keepdims=True)  # the triangle only
        doubled[PREFIX:] = np.where(rolled_white, rolled, segment[PREFIX:])
        # Where the long evaluation's judge sees two white triangles (the copy landed apart from both
        # objects), so does the check.
        seen = (copies_per_frame(doubled[PREFIX:], "white", ["cyan"]) > 1).mean()
        verdict = check_segment(doubled, PREFIX, anchor, anchor, config)
        assert (verdict.failed == ("objects",)) == (seen > config.copies_fraction), (k, seen, verdict.details)
        apart += seen > config.copies_fraction
    assert apart >= 4


def test_an_anchors_objects_leave_out_a_shaded_side_and_keep_two_objects_that_touch():
    from videogen.sampling.health import anchor_objects

    frames = _scene("a purple triangle moving right on a white background", 0)
    body = (np.abs(frames.astype(int) - 255).max(-1) > 60)[..., None]  # (T, H, W, 1)
    columns = np.arange(frames.shape[2])
    edge = np.array([columns[b.any(0)].min() for b in body[..., 0]])  # each frame's leftmost object column
    left = body & (columns[None, None, :, None] < edge[:, None, None, None] + 10)  # the object's left 10 columns
    # A darker, more saturated side, as the built-in model shades its objects: not a plain gain
    # of the object's colour, so the palette keeps it.
    shaded = np.where(left, np.array([80, 10, 170], np.uint8), frames)
    assert len(colour_palette(shaded, CONFIG.foreground_distance, CONFIG.object_area)) == 2
    assert len(anchor_objects(shaded, CONFIG)) == 1
    # A second object of another colour overlapping the first in every frame stays an object.
    other_body = np.roll(body, 16, axis=2)
    touching = np.where(other_body & ~body, np.array([40, 210, 220], np.uint8), frames)
    assert len(anchor_objects(touching, CONFIG)) == 2


def test_the_palette_leaves_out_the_blends_of_anti_aliased_edges():
    two = "a cyan circle moving down and a white triangle moving left on a green background"
    frames = _scene(two, 0).astype(np.float32)
    for _ in range(3):  # soft edges: rings of object-background blends, as a model draws them
        frames = sum(np.roll(frames, (dy, dx), axis=(1, 2)) for dy in (-1, 0, 1) for dx in (-1, 0, 1)) / 9
    palette = colour_palette(frames.round().astype(np.uint8), CONFIG.foreground_distance, CONFIG.object_area)
    assert len(palette) == 2, palette


def test_the_palette_is_the_flat_colours_and_survives_a_checkpoint():
    from videogen.sampling.health import SegmentStats

    two = "a cyan circle moving down and a white triangle moving left on a green background"
    frames = _scene(two, 0)
    palette = colour_palette(frames, CONFIG.foreground_distance, CONFIG.object_area)
    assert len(palette) == 2
    colours = sorted(tuple(round(c / 10) for c in entry[:3]) for entry in palette)
    whites = [c for c in colours if min(c) >= 22]
    assert len(whites) == 1 and all(0.05 < entry[3] < 0.3 for entry in palette)  # each object's share of the frame
    stats = segment_stats(frames, CONFIG)
    assert stats.palette == palette
    assert SegmentStats.from_dict(stats.to_dict()) == stats


def test_an_object_wrapping_round_the_frame_edge_counts_once():
    frames = _scene("a blue square staying still on a black background", 0)
    body = np.abs(frames[0].astype(int)).max(-1) > 60
    x_centre = int(np.nonzero(body.any(0))[0].mean())
    for dx, dy in ((-x_centre, 0), (0, 32), (-x_centre, 32)):  # across the left/right edge, top/bottom, a corner
        wrapped = np.roll(frames, (dy, dx), axis=(1, 2))
        assert colour_copies(wrapped, 60.0, 0.01).tolist() == [1] * len(frames), (dx, dy)


def test_a_colour_jump_at_the_seam_fails():
    first, second = _scene(MOVING, 0), _scene(MOVING, 28)
    jumped = second.copy()
    jumped[PREFIX:] = np.clip(jumped[PREFIX:].astype(int) + [90, -60, 40], 0, 255).astype(np.uint8)
    assert "seam_jump" in _judge(jumped, first).failed


def test_attempt_zero_is_todays_noise_and_later_attempts_are_fixed_by_seed_segment_attempt():
    shape = (1, 4, 3, 8, 8)
    assert torch.equal(attempt_noise(shape, 7, 2, 0), segment_noise(shape, 7, 2))
    one = attempt_noise(shape, 7, 2, 1)
    assert torch.equal(one, attempt_noise(shape, 7, 2, 1))
    assert not torch.equal(one, attempt_noise(shape, 7, 2, 2)) and not torch.equal(one, segment_noise(shape, 7, 2))
    assert not torch.equal(one, attempt_noise(shape, 7, 3, 1)) and not torch.equal(one, attempt_noise(shape, 8, 2, 1))


def _fake_sampler(outcomes):
    def sample(attempt, previews=()):
        assert previews == ()
        yield StepProgress(0, 1, 1)
        if outcomes[attempt] == "nan":
            raise NonFiniteLatents("segment 0: NaN")
        return torch.full((1,), float(attempt))

    return sample


def _drive(gen):
    events = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return stop.value, events


def test_the_gate_retries_keeps_the_best_attempt_and_never_keeps_nan():
    scores = {"bad": 3.0, "worse": 5.0, "ok": 0.0}
    from videogen.sampling.health import NONFINITE, Verdict

    def judge_of(outcomes):
        def judge(frames):
            kind = outcomes[int(frames)]
            return Verdict() if kind == "ok" else Verdict(("black",), scores[kind])

        return judge

    decode = lambda latents: latents.item()
    outcomes = ["nan", "ok", "bad"]
    result, events = _drive(run_gate(_fake_sampler(outcomes), decode, judge_of(outcomes), CONFIG))
    assert result.chosen == 1 and result.attempts == 2 and result.verdicts[0] is NONFINITE
    assert [e.reasons for e in events if not isinstance(e, StepProgress)] == [("nonfinite",)]
    outcomes = ["worse", "bad", "worse"]
    result, _ = _drive(run_gate(_fake_sampler(outcomes), decode, judge_of(outcomes), CONFIG))
    assert result.chosen == 1 and result.attempts == 3 and result.failed == ("black",)
    with pytest.raises(NonFiniteLatents):
        _drive(run_gate(_fake_sampler(["nan"] * 3), decode, judge_of(["ok"] * 3), CONFIG))


def _previewing_sampler(calls, steps=6):
    """Attempt a's latents are 10 a + 1 at its preview (after step 2 when asked), 10 a + 2 at its end."""

    def sample(attempt, preview=0.0):
        calls.append((attempt, preview))
        at = 2 if preview else None
        for step in range(1, steps + 1):
            yield StepProgress(0, step, steps)
            if step == at:
                yield Preview(step, torch.full((1,), 10.0 * attempt + 1))
        return torch.full((1,), 10.0 * attempt + 2)

    return sample


@pytest.mark.parametrize(("verdicts", "chosen", "stopped", "steps", "kept"), [
    # attempt 0 fails its preview, 1 passes both: 0 cost 2 steps, not 6
    ({1: "bad", 11: "ok", 12: "ok"}, 1, (0,), 2 + 6, "ok"),
    # every preview fails: the best (attempt 1's) runs on and is kept; its final verdict stands
    ({1: "worse", 11: "bad", 21: "worse", 12: "bad"}, 1, (0, 2), 2 + 2 + 2 + 4, "bad"),
    # 0 passes its preview but not its end; 1 and 2 fail their previews: 0 is kept, fully run
    ({1: "ok", 2: "bad", 11: "bad", 21: "worse"}, 0, (1, 2), 6 + 2 + 2, "bad"),
])  # fmt: skip
def test_a_preview_stops_a_failing_attempt_early(verdicts, chosen, stopped, steps, kept):
    from videogen.sampling.health import Verdict

    scores = {"bad": 3.0, "worse": 5.0}

    def judge(value):
        kind = verdicts.get(int(value), "ok")
        return Verdict() if kind == "ok" else Verdict(("black",), scores[kind])

    calls = []
    config = replace(CONFIG, checks=("black",), preview=0.34)
    result, events = _drive(run_gate(_previewing_sampler(calls), lambda latents: latents.item(), judge, config))
    assert (result.chosen, result.stopped, result.evals) == (chosen, stopped, steps)
    assert int(result.latents.item()) == 10 * chosen + 2  # the kept attempt ran to its end
    assert result.verdicts[chosen].passed == (kept == "ok") and result.attempts == len(calls)
    assert all(p == (0.34,) for _, p in calls) and not any(isinstance(e, Preview) for e in events)
    assert sum(isinstance(e, StepProgress) for e in events) == steps
    record = result.record(3)
    assert record["evals"] == steps and record["stopped"] == list(stopped)
    assert result.retry_evals == record["retry_evals"] == steps - 6  # all but the kept attempt's 6


def test_when_the_attempt_run_on_after_its_preview_goes_nan_the_next_best_is_run_on():
    from videogen.sampling.health import Verdict

    def sample(attempt, preview=0.0):
        yield StepProgress(0, 1, 2)
        yield Preview(1, torch.full((1,), float(attempt)))
        if attempt == 1:
            raise NonFiniteLatents("segment 0: NaN at step 2")
        yield StepProgress(0, 2, 2)
        return torch.full((1,), 10.0 + attempt)

    severity = {0: 5.0, 1: 1.0, 2: 3.0, 10: 5.0, 12: 3.0}  # previews: 1 best, then 2, then 0
    judge = lambda value: Verdict(("black",), severity[int(value)])
    config = replace(CONFIG, checks=("black", "nonfinite"), preview=0.5)
    result, _ = _drive(run_gate(sample, lambda latents: latents.item(), judge, config))
    assert (result.chosen, result.stopped, result.evals) == (2, (0,), 3 + 1)
    assert result.verdicts[1] is NONFINITE and int(result.latents.item()) == 12


def test_without_retries_or_with_preview_off_every_attempt_runs_to_its_end():
    from videogen.sampling.health import Verdict

    judge = lambda value: Verdict(("black",), 1.0)  # every attempt fails
    for config in (replace(CONFIG, checks=("black",), preview=0.0), replace(CONFIG, checks=("black",), preview=0.5,
                                                                            retries=0)):  # fmt: skip
        calls = []
        result, _ = _drive(run_gate(_previewing_sampler(calls), lambda latents: latents.item(), judge, config))
        assert all(p == () for _, p in calls) and result.stopped == () and result.evals == 6 * len(calls)
        assert "stopped" not in result.record(0)


@pytest.mark.parametrize(("steps", "level", "at"), [(24, 0.885, 8), (8, 0.885, 3), (4, 0.885, 2), (24, 0.005, None)])
def test_the_preview_comes_at_the_first_step_at_or_below_its_noise_level(builtin_model, steps, level, at):
    from videogen.sampling.loop import denoise_segment

    cond = builtin_model.prompt_encoder.encode([PROMPT])

    def run(levels):
        gen = denoise_segment(builtin_model, cond=cond, uncond=None, latent_frames=3, latent_size=(8, 8), prefix=None,
                              steps=steps, guidance=1.0, flow_shift=3.0, seed=1, preview_sigmas=levels)  # fmt: skip
        return _drive(gen)

    latents, events = run((level,))
    plain, _ = run(())
    previews = [e for e in events if isinstance(e, Preview)]
    assert [p.step for p in previews] == ([at] if at else [])  # never after the last step
    assert torch.equal(latents, plain)  # a preview changes nothing of the sampling
    if at:  # taken right after its step's progress event: the model's clean prediction there
        index = events.index(previews[0])
        assert events[index - 1] == StepProgress(0, at, steps) and previews[0].latents.shape == latents.shape
        assert 0 < (previews[0].latents - latents).abs().mean() < (latents.abs().mean())


def test_a_ladder_of_levels_looks_once_per_step_and_marks_its_last_look(builtin_model):
    from videogen.sampling.loop import denoise_segment

    cond = builtin_model.prompt_encoder.encode([PROMPT])

    def previews(levels, steps=24):
        gen = denoise_segment(builtin_model, cond=cond, uncond=None, latent_frames=3, latent_size=(8, 8), prefix=None,
                              steps=steps, guidance=1.0, flow_shift=3.0, seed=1, preview_sigmas=levels)  # fmt: skip
        return [(e.step, e.last) for e in _drive(gen)[1] if isinstance(e, Preview)]

    assert previews((0.953, 0.885)) == [(4, False), (8, True)]
    # 0.99 and 0.986 both fall to step 2 (noise level 0.985): one look there; 0.005 is never reached
    # before the last step, so the look at step 8 is the last.
    assert previews((0.99, 0.986, 0.885, 0.005)) == [(2, False), (8, True)]


def _laddered_sampler(calls, steps=6):
    """Attempt a's latents are 10 a + 1 at its first look (after step 2), 10 a + 3 at its second
    (after step 4), 10 a + 2 at its end."""

    def sample(attempt, previews=()):
        calls.append((attempt, previews))
        for step in range(1, steps + 1):
            yield StepProgress(0, step, steps)
            if previews and step in (2, 4):
                yield Preview(step, torch.full((1,), 10.0 * attempt + step - 1), last=step == 4)
        return torch.full((1,), 10.0 * attempt + 2)

    return sample


@pytest.mark.parametrize(("verdicts", "chosen", "stopped", "evals"), [
    # 0 fails its glance after 2 steps; 1 passes it and fails the full look after 4; 2 passes both
    ({1: "bad", 13: "bad"}, 2, (0, 1), 2 + 4 + 6),
    # every attempt stops: 1 got furthest (passed a look) and runs on, though 0's look judged better
    ({1: "bad", 13: "worse", 21: "bad"}, 1, (0, 2), 2 + 6 + 2),
])  # fmt: skip
def test_a_ladder_screens_at_a_glance_and_decides_on_the_full_decode(verdicts, chosen, stopped, evals):
    from videogen.sampling.health import Verdict

    scores = {"bad": 3.0, "worse": 5.0}
    decoded = []

    def judge(value):
        kind = verdicts.get(int(value), "ok")
        return Verdict() if kind == "ok" else Verdict(("black",), scores[kind])

    def with_(how):
        return lambda latents: decoded.append((int(latents.item()), how)) or latents.item()

    calls = []
    config = replace(CONFIG, checks=("black",), preview=(0.9, 0.8))
    result, _ = _drive(run_gate(_laddered_sampler(calls), with_("full"), judge, config, glance=with_("glance")))
    assert (result.chosen, result.stopped, result.evals) == (chosen, stopped, evals)
    assert int(result.latents.item()) == 10 * chosen + 2 and all(p == (0.9, 0.8) for _, p in calls)
    assert all(how == ("glance" if value % 10 == 1 else "full") for value, how in decoded)  # first looks only


@pytest.mark.parametrize(("margin", "chosen", "stopped", "evals"), [
    # 0's glance reads 1.3x past the threshold: within the margin it runs on, to fail its last look
    # (judged at the threshold itself); 1's glance, 2x past, stops it; 2 passes.
    (1.5, 2, (0, 1), 4 + 2 + 6),
    # without a margin every glance stops its attempt; 2's, the least severe, runs on and is kept
    (1.0, 2, (0, 1), 2 + 2 + 6),
])  # fmt: skip
def test_a_ladders_early_looks_stop_only_beyond_the_margin(margin, chosen, stopped, evals):
    from videogen.sampling.health import NONFINITE, Verdict

    ratios = {1: 1.3, 3: 1.3, 11: 2.0, 21: 1.2}  # a look's (or an end's) ratio past the threshold; else 0.5

    def judge(value):
        r = ratios.get(int(value), 0.5)
        return Verdict(("black",) if r > 1 else (), max(r - 1.0, 0.0), None, {"black": r})

    config = replace(CONFIG, checks=("black",), preview=(0.9, 0.8), preview_margin=margin)
    result, _ = _drive(run_gate(_laddered_sampler([]), lambda x: x.item(), judge, config))
    assert (result.chosen, result.stopped, result.evals) == (chosen, stopped, evals)
    assert NONFINITE.beyond(3.0) == NONFINITE and judge(11).beyond(2.0).passed and not judge(11).beyond(1.9).passed


def test_bad_gate_options_name_the_option():
    for kw, option in ((dict(retries=11), "retries"), (dict(retries=-1), "retries"),
                       (dict(health_checks=["black", "blurry"]), "health_checks")):  # fmt: skip
        with pytest.raises(InvalidOption) as info:
            RenderSpec.single("a red circle", 2.0, **kw).validate()
        assert info.value.option == option
    resolved = resolve_render(RenderSpec.single("a red circle", 2.0, retries=4, health_checks=["black"]))
    assert resolved.health.retries == 4 and resolved.health.checks == ("black",)
    assert not resolve_render(RenderSpec.single("a red circle", 2.0, health_checks=[])).health.enabled


# -- renders with a planted collapse -------------------------------------------------------------

PROMPT = "a red circle moving right on a gray background"


def _plant(monkeypatch, model, kind: str, segment: int = 1):
    """Collapse `segment`'s attempt 0 as it is decoded (black, frozen, emptied or NaN)."""
    import videogen.rendering.segment as seg_module

    current = {}
    real_denoise, real_decode = seg_module._denoise, model.codec.decode

    def denoise(seg, inputs, handoff, attempt, *rest):
        current["at"] = (seg.index, attempt)
        if kind == "nan" and (seg.index, attempt) == (segment, 0):
            raise NonFiniteLatents(f"segment {segment}: planted NaN")
        return real_denoise(seg, inputs, handoff, attempt, *rest)

    def decode(latents, **how):  # the gate's glance (a preview's decode) comes through here too
        video = real_decode(latents, **how)
        if current.get("at") == (segment, 0):
            video = video.clone()
            if kind == "black":
                video[:, :, PREFIX:] = -1.0
            elif kind == "frozen":
                video[:, :, PREFIX:] = video[:, :, PREFIX - 1 : PREFIX]
            elif kind == "emptied":
                video[:, :, PREFIX:] = video[:, :, PREFIX:, :1, :1]  # the corner's colour everywhere
            elif kind == "doubled":  # a second copy, half a frame to the right, over the background
                shifted = torch.roll(video[:, :, PREFIX:], video.shape[-1] // 2, dims=-1)
                corner = video[:, :, PREFIX:, :1, :1]
                body = (shifted - corner).abs().amax(1, keepdim=True) > 0.5
                video[:, :, PREFIX:] = torch.where(body, shifted, video[:, :, PREFIX:])
        return video

    monkeypatch.setattr(seg_module, "_denoise", denoise)
    monkeypatch.setattr(model.codec, "decode", decode)


def _render(model, path, **kw):
    # A seed whose first retry of segment 1 passes every check on the shipped weights (the retry is
    # the model's own output: at 4 steps some seeds' retries double the object themselves). Without
    # previews: at 4 steps the preview comes after step 2, where a retry that ends well can still
    # look doubled; previews have their own tests (`test_a_render_with_previews_...`).
    import copy
    import dataclasses

    model = copy.copy(model)
    model.preset = dataclasses.replace(model.preset, health=dataclasses.replace(model.preset.health, preview=0.0))
    spec = RenderSpec.single(PROMPT, 3.0, seed=4, steps=4, **kw)
    events = [e for e in render(spec, path, model=model, thumbnail=False) if not isinstance(e, StepProgress)]
    return events, path.read_bytes()


@pytest.mark.parametrize("kind, check", [("black", "black"), ("frozen", "frozen"), ("emptied", "content_loss"),
                                         ("doubled", "copies"), ("doubled", "objects"), ("nan", "nonfinite")])  # fmt: skip
def test_a_planted_collapse_is_retried_deterministically(builtin_model, tmp_path, monkeypatch, kind, check):
    _plant(monkeypatch, builtin_model, kind)
    events, video = _render(builtin_model, tmp_path / "a.mp4", health_checks=[check])
    retried = [e for e in events if isinstance(e, SegmentRetried)]
    assert [(e.index, e.attempt) for e in retried] == [(1, 1)] and check in retried[0].reasons
    finished = [e for e in events if isinstance(e, SegmentFinished)]
    assert [(e.attempts, e.failed_checks) for e in finished] == [(1, ()), (2, ())]
    report = __import__("json").loads((tmp_path / "a.mp4.drift.json").read_text())
    assert report["health"]["retries_used"] == 1 and report["health"]["segments"][1]["reasons"][0] == [check]
    if kind == "black":  # same inputs, same retry, same video
        assert _render(builtin_model, tmp_path / "b.mp4", health_checks=[check])[1] == video


def test_a_render_that_passes_the_gate_is_the_gate_off_render_byte_for_byte(builtin_model, tmp_path, monkeypatch):
    events, clean_on = _render(builtin_model, tmp_path / "on.mp4", health_checks=["black"])
    assert not any(isinstance(e, SegmentRetried) for e in events)
    assert _render(builtin_model, tmp_path / "off.mp4", health_checks=[])[1] == clean_on


def test_a_resumed_render_keeps_the_retried_attempt(builtin_model, tmp_path, monkeypatch):
    spec = RenderSpec.single(PROMPT, 4.0, seed=2, steps=4, health_checks=["black"])
    _plant(monkeypatch, builtin_model, "black")
    list(render(spec, tmp_path / "straight.mp4", model=builtin_model, thumbnail=False))
    gen = render(spec, tmp_path / "r.mp4", model=builtin_model, workdir=tmp_path / "work", thumbnail=False)
    for event in gen:  # stop once the retried segment is checkpointed
        if isinstance(event, SegmentFinished) and event.index == 1:
            gen.close()
            break
    monkeypatch.undo()  # nothing planted now: segment 1 must come from its checkpoint, not be sampled again
    events = list(render(spec, tmp_path / "r.mp4", model=builtin_model, workdir=tmp_path / "work", thumbnail=False))
    finished = [e for e in events if isinstance(e, SegmentFinished)]
    assert finished[1].resumed and finished[1].attempts == 2 and not finished[2].resumed
    assert (tmp_path / "r.mp4").read_bytes() == (tmp_path / "straight.mp4").read_bytes()


def test_gate_for_withholds_retries_after_a_failing_run_only_when_asked():
    from videogen.sampling.health import gate_for

    off, on = HealthConfig(retries=2), HealthConfig(retries=2, give_up_after=2)
    assert gate_for(off, 5) is off
    assert gate_for(on, 1) is on and gate_for(on, 2).retries == 0 and gate_for(on, 3).retries == 0
    assert gate_for(on, 2).checks == on.checks
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="give_up_after"):
            HealthConfig(give_up_after=bad)


def test_the_retry_budget_bounds_the_transformer_evaluations_retries_add_whatever_fails():
    from videogen.sampling.health import Verdict, retry_spare

    budget = HealthConfig(checks=("black",), retries=2, retry_budget=0.15)
    assert retry_spare(budget, 24, 0, 0) == 48  # the bucket starts full: two whole retries
    assert retry_spare(budget, 24, 1000, 170) == pytest.approx(48 + 150 - 170)
    assert retry_spare(HealthConfig(retries=2), 24, 0, 500) is None  # no budget: no bound
    fail = lambda value: Verdict(("black",), 1.0)
    for preview in (0.0, 0.5):  # a stopped retry costs 2 steps of 6, a full one 6
        config = replace(budget, preview=preview)
        kept = spent = withheld = 0
        for _ in range(300):  # every attempt of every segment fails
            spare = retry_spare(config, 6, kept, spent)
            result, _ = _drive(run_gate(_previewing_sampler([]), lambda latents: latents.item(), fail, config, spare))
            kept, spent = kept + result.evals - result.retry_evals, spent + result.retry_evals
            withheld += result.withheld
            assert result.withheld == (result.attempts < 3)
        assert kept == 300 * 6
        # At most the full bucket and 15% of the kept steps, and one attempt over; and all of it spent.
        assert 0.15 * kept - 6 <= spent <= 2 * 6 + 0.15 * kept + 6
        assert withheld > 200
    # A spent budget asks for no preview: there is nothing to choose between.
    calls = []
    result, _ = _drive(
        run_gate(_previewing_sampler(calls), lambda v: v.item(), fail, replace(budget, preview=0.5), 0.0)
    )
    assert calls == [(0, ())] and result.withheld and result.retry_evals == 0


def test_the_gate_charges_an_attempt_its_transformer_evaluations_not_its_steps():
    """With the step cache a finished attempt forecasts some late steps, while a retry stopped
    at its preview ran the transformer on all its early ones: the gate counts evaluations
    (`StepProgress.evaluated`), so a budget prices each attempt at what it cost."""
    from videogen.sampling.health import Verdict, retry_spare

    def sample(attempt, preview=0.0):  # 6 steps; steps 4 and 6 forecast; a preview after step 2
        for step in range(1, 7):
            yield StepProgress(0, step, 6, evaluated=step not in (4, 6))
            if step == 2 and preview:
                yield Preview(step, torch.full((1,), 10.0 * attempt + 1))
        return torch.full((1,), 10.0 * attempt + 2)

    judge = lambda value: Verdict() if int(value) in (21, 22) else Verdict(("black",), 1.0)
    config = replace(CONFIG, checks=("black",), preview=0.5)
    result, events = _drive(run_gate(sample, lambda latents: latents.item(), judge, config))
    # attempts 0 and 1 stop at their previews (2 evaluations each); 2 passes and runs on (4 of 6)
    assert (result.chosen, result.stopped) == (2, (0, 1)) and sum(isinstance(e, StepProgress) for e in events) == 10
    assert (result.evals, result.retry_evals) == (2 + 2 + 4, 4)
    assert result.record(0)["evals"] == 8 and result.record(0)["retry_evals"] == 4
    # A budget of 0.5 after 8 kept evaluations and 4 of retries leaves 0 beyond the spent bucket of 2 x 6.
    assert retry_spare(replace(config, retry_budget=0.5), 6, 8, 4) == 12 + 4 - 4


def test_the_failing_run_counts_this_shots_failing_segments_and_survives_a_checkpoint():
    from videogen.rendering.gate import HealthHistory

    history = HealthHistory()
    for failed in ([], ["copies"], ["copies", "content_loss"]):
        history.records.append({"segment": len(history.records), "failed_checks": failed})
    assert history.failing_run == 2
    restored = HealthHistory()
    restored.load_state_dict(history.state_dict())
    assert restored.failing_run == 2
    history.new_shot()  # a new prompt: a fresh run, the old records kept for the report
    assert history.failing_run == 0 and len(history.records) == 3
    history.records.append({"segment": 3, "failed_checks": ["black"]})
    restored.load_state_dict(history.state_dict())
    assert restored.failing_run == 1


def _plant_black_segments(monkeypatch, model, always: set[int], first_only: set[int]):
    import videogen.rendering.segment as seg_module

    current = {}
    real_denoise, real_decode = seg_module._denoise, model.codec.decode

    def denoise(seg, inputs, handoff, attempt, *rest):
        current["at"] = (seg.index, attempt)
        return real_denoise(seg, inputs, handoff, attempt, *rest)

    def decode(latents, **how):  # the gate's glance (a preview's decode) comes through here too
        video = real_decode(latents, **how)
        index, attempt = current.get("at", (-1, 0))
        if index in always or (index in first_only and attempt == 0):
            video = video.clone()
            video[:, :, PREFIX:] = -1.0
        return video

    monkeypatch.setattr(seg_module, "_denoise", denoise)
    monkeypatch.setattr(model.codec, "decode", decode)


@pytest.mark.parametrize(("gate", "expected", "withheld"), [
    ({"give_up_after": 1}, [(1, ()), (3, ("black",)), (1, ("black",)), (1, ("black",)), (1, ()), (2, ()), (1, ())],
     [2, 3, 4]),  # 4 had none to spend either
    ({"give_up_after": 0}, [(1, ()), (3, ("black",)), (2, ()), (2, ()), (1, ()), (2, ()), (1, ())], []),
    # A budget of 0: the full bucket only, two segments' steps (8). The preset's previews stop a
    # black attempt after 2 of its 4 steps: segment 1 spends 4 on two stopped retries, 2 and 3 a
    # stopped attempt 0 and 2 steps each on a retry that passes (8 spent), 5 none (kept black).
    ({"retry_budget": 0.0}, [(1, ()), (3, ("black",)), (2, ()), (2, ()), (1, ()), (1, ("black",)), (1, ())], [5]),
])  # fmt: skip
def test_a_render_stops_retrying_a_failing_run_or_over_its_budget(builtin_model, tmp_path, monkeypatch, gate, expected,
                                                                   withheld):  # fmt: skip
    import copy
    import dataclasses
    import json

    model = copy.copy(builtin_model)
    model.preset = dataclasses.replace(builtin_model.preset,
                                       health=dataclasses.replace(builtin_model.preset.health, **gate))  # fmt: skip
    # Segment 1 black in every attempt, 2, 3 and 5 in their first: given up after one failing
    # segment, 2 and 3 are judged once and kept black; 4 passes its one attempt, so 5 is
    # re-sampled again.
    _plant_black_segments(monkeypatch, model, always={1}, first_only={2, 3, 5})
    spec = RenderSpec.single(PROMPT, 12.5, seed=4, steps=4, health_checks=["black"], retries=2)
    events = list(render(spec, tmp_path / "v.mp4", model=model, thumbnail=False))
    assert [(e.attempts, e.failed_checks) for e in events if isinstance(e, SegmentFinished)] == expected
    report = json.loads((tmp_path / "v.mp4.drift.json").read_text())["health"]
    assert [r["segment"] for r in report["segments"] if r.get("retries_withheld")] == withheld
    assert report["retries_used"] == sum(a - 1 for a, _ in expected)


def test_a_render_with_previews_makes_the_same_video_for_fewer_steps(builtin_model, tmp_path, monkeypatch):
    import copy
    import dataclasses
    import json

    # Segment 1 black in every attempt, 2 in its first (the planted decode blackens the previews
    # of those attempts too). With previews at noise level 0.885 (after 2 of 4 steps), segment 1's three attempts stop
    # there and the best (the first of equals) runs on; segment 2's first stops there and its
    # retry passes. Off, both keep the same attempts after running every one of them in full.
    videos, reports = {}, {}
    for preview in (0.0, 0.885):
        model = copy.copy(builtin_model)
        model.preset = dataclasses.replace(builtin_model.preset,
                                           health=dataclasses.replace(builtin_model.preset.health, preview=preview))  # fmt: skip
        with monkeypatch.context() as patch:
            _plant_black_segments(patch, model, always={1}, first_only={2})
            spec = RenderSpec.single(PROMPT, 6.5, seed=4, steps=4, health_checks=["black"], retries=2)
            list(render(spec, tmp_path / f"{preview}.mp4", model=model, thumbnail=False))
        videos[preview] = (tmp_path / f"{preview}.mp4").read_bytes()
        reports[preview] = json.loads((tmp_path / f"{preview}.mp4.drift.json").read_text())["health"]["segments"]
    assert videos[0.885] == videos[0.0]
    off, on = ([(r["attempts"], r["chosen"], r["failed_checks"], r["evals"], r.get("stopped")) for r in reports[p]]
               for p in (0.0, 0.885))  # fmt: skip
    assert off[:3] == [(1, 0, [], 4, None), (3, 0, ["black"], 12, None), (2, 1, [], 8, None)]
    assert on[:3] == [(1, 0, [], 4, None), (3, 0, ["black"], 2 + 2 + 2 + 2, [1, 2]), (2, 1, [], 2 + 4, [0])]


def test_colour_distance_in_integers_matches_the_float_distance_at_the_bounds() -> None:
    """`_near` compares integer channels with integer bounds; it must say exactly what
    |frame - colour| <= distance says in floats, for colours between integers and pixels on the
    bounds, per colour and per frame."""
    rng = np.random.default_rng(0)
    colours = np.array([[50.0, 82.0, 235.0], [100.5, 0.25, 254.75], [-3.0, 260.0, 127.5]])
    distance = 60.0
    frames = rng.integers(0, 256, size=(3, 16, 16, 3)).astype(np.uint8)
    frames[0, 0, :3] = [[110, 142, 255], [111, 82, 235], [40, 60, 175]]  # on and just past colour 0's bounds
    f = frames.astype(np.int16)
    reference = np.abs(f[:, :, :, None, :] - colours[None, None, None]).max(-1) <= distance
    assert reference.any() and not reference.all()
    assert np.array_equal(_near(f, colours, distance), reference)
    per_frame = colours[[0, 1, 2]][:, None, :]  # (T, 1, 3): one colour per frame, as the border's median
    assert np.array_equal(_near(f, per_frame, distance)[..., 0], np.stack([reference[t, ..., t] for t in range(3)]))


def test_retries_sample_at_the_retry_guidance_and_the_first_attempt_at_the_jobs(builtin_model, tmp_path, monkeypatch):
    """`retry_guidance`: a retry samples at that scale, every first attempt at the job's own, so a
    render that no segment fails is unchanged; an unguided job keeps its retries unguided."""
    import copy
    import dataclasses

    import videogen.rendering.segment as seg_module

    assert retry_guidance(HealthConfig(retry_guidance=5.0), 3.0, 0) == 3.0
    assert retry_guidance(HealthConfig(retry_guidance=5.0), 3.0, 2) == 5.0
    assert retry_guidance(HealthConfig(retry_guidance=5.0), 1.0, 1) == 1.0  # no negative-prompt pass to scale
    assert retry_guidance(HealthConfig(), 3.0, 1) == 3.0
    model = copy.copy(builtin_model)
    model.preset = dataclasses.replace(builtin_model.preset, health=dataclasses.replace(
        builtin_model.preset.health, retry_guidance=5.0, preview=0.0))  # fmt: skip
    _plant_black_segments(monkeypatch, model, always=set(), first_only={1})
    seen: list[tuple[bool, float]] = []  # (a retry's noise given, guidance) per denoised attempt
    real = seg_module.denoise_segment

    def spy(*args, **kw):
        seen.append((kw["noise"] is not None, kw["guidance"]))
        return real(*args, **kw)

    monkeypatch.setattr(seg_module, "denoise_segment", spy)
    spec = RenderSpec.single(PROMPT, 4.0, seed=4, steps=4, health_checks=["black"], retries=2)
    events = list(render(spec, tmp_path / "v.mp4", model=model, thumbnail=False))
    assert [e.attempts for e in events if isinstance(e, SegmentFinished)] == [1, 2, 1]
    assert seen == [(False, 3.0), (False, 3.0), (True, 5.0), (False, 3.0)]


# -- backtracking (`backtrack`): a flaw that came through the seam -------------------------------


def _backtracking(model, backtrack: int = 1, **health):
    import copy
    import dataclasses

    model = copy.copy(model)
    model.preset = dataclasses.replace(model.preset, health=dataclasses.replace(
        model.preset.health, backtrack=backtrack, preview=0.0, **health))  # fmt: skip
    return model


def _plant_through_the_seam(monkeypatch, model, cured_from: int | None):
    """Segment 2 decodes black in every attempt while segment 1's latents came from an attempt
    below `cured_from` (None: whatever segment 1 was): the flaw is in what it was handed."""
    import videogen.rendering.segment as seg_module

    current, made = {}, {}
    real_denoise, real_decode = seg_module._denoise, model.codec.decode

    def denoise(seg, inputs, handoff, attempt, *rest):
        current["at"] = (seg.index, attempt)
        if seg.index == 1:
            made["segment 1"] = attempt
        return real_denoise(seg, inputs, handoff, attempt, *rest)

    def decode(latents, **how):
        video = real_decode(latents, **how)
        index, _ = current.get("at", (-1, 0))
        if index == 2 and (cured_from is None or made.get("segment 1", 0) < cured_from):
            video = video.clone()
            video[:, :, PREFIX:] = -1.0
        return video

    monkeypatch.setattr(seg_module, "_denoise", denoise)
    monkeypatch.setattr(model.codec, "decode", decode)


def _backtrack_render(model, path, seconds=6.5, workdir=None):
    spec = RenderSpec.single(PROMPT, seconds, seed=4, steps=4, health_checks=["black"], retries=2)
    return [e for e in render(spec, path, model=model, workdir=workdir, thumbnail=False)
            if not isinstance(e, StepProgress)]  # fmt: skip


def test_a_segment_that_fails_every_attempt_sends_the_render_back_into_the_one_before(builtin_model, tmp_path,
                                                                                     monkeypatch):  # fmt: skip
    import json

    model = _backtracking(builtin_model)
    _plant_through_the_seam(monkeypatch, model, cured_from=3)  # segment 1's attempts 3.. (a backtrack's) cure it
    events = _backtrack_render(model, tmp_path / "a.mp4")
    retried = [(e.index, e.attempt, e.reasons) for e in events if isinstance(e, SegmentRetried)]
    assert retried == [(2, 1, ("black",)), (2, 2, ("black",)), (1, 3, ("backtrack", "black"))]
    finished = [(e.index, e.attempts, e.failed_checks) for e in events if isinstance(e, SegmentFinished)]
    assert finished == [(0, 1, ()), (1, 1, ()), (2, 1, ()), (3, 1, ())]  # the new chain passes: kept
    # Each segment is written once it is final: segment 1 after segment 2 was kept.
    order = [(type(e).__name__, e.index) for e in events if isinstance(e, SegmentStarted | SegmentFinished)]
    assert order.index(("SegmentFinished", 1)) > order.index(("SegmentStarted", 2))
    health = json.loads((tmp_path / "a.mp4.drift.json").read_text())["health"]
    record = health["segments"][1]
    assert record["backtracks"] == 1 and record["backtrack_evals"] == health["backtrack_evals"] > 0
    assert [r["segment"] for r in health["segments"]] == [0, 1, 2, 3]
    # Same inputs, same output; and resumed from the checkpoint of segment 1 (written once segment
    # 2 was kept), the render makes the same video with nothing planted.
    _backtrack_render(model, tmp_path / "b.mp4")
    assert (tmp_path / "a.mp4").read_bytes() == (tmp_path / "b.mp4").read_bytes()
    spec = RenderSpec.single(PROMPT, 6.5, seed=4, steps=4, health_checks=["black"], retries=2)
    gen = render(spec, tmp_path / "r.mp4", model=model, workdir=tmp_path / "work", thumbnail=False)
    for event in gen:
        if isinstance(event, SegmentFinished) and event.index == 1:
            gen.close()
            break
    monkeypatch.undo()
    resumed = list(render(spec, tmp_path / "r.mp4", model=model, workdir=tmp_path / "work", thumbnail=False))
    assert [e.resumed for e in resumed if isinstance(e, SegmentFinished)] == [True, True, False, False]
    assert (tmp_path / "r.mp4").read_bytes() == (tmp_path / "a.mp4").read_bytes()


def test_a_backtrack_that_rescues_nothing_keeps_the_chain_it_had(builtin_model, tmp_path, monkeypatch):
    _plant_through_the_seam(monkeypatch, builtin_model, cured_from=None)  # segment 2 is black whatever came before
    plain = _backtrack_render(_backtracking(builtin_model, backtrack=0), tmp_path / "plain.mp4")
    events = _backtrack_render(_backtracking(builtin_model, backtrack=2), tmp_path / "back.mp4")
    backs = [e.attempt for e in events if isinstance(e, SegmentRetried) and "backtrack" in e.reasons]
    assert backs == [3, 6]  # twice into segment 1 (its limit), each from attempts no generation drew before
    finished = [(e.index, e.attempts, e.failed_checks) for e in events if isinstance(e, SegmentFinished)]
    assert finished == [(e.index, e.attempts, e.failed_checks) for e in plain if isinstance(e, SegmentFinished)]
    assert finished[2] == (2, 3, ("black",))
    assert (tmp_path / "back.mp4").read_bytes() == (tmp_path / "plain.mp4").read_bytes()


def test_a_render_that_passes_the_gate_with_backtracking_on_is_the_gate_off_render(builtin_model, tmp_path):
    on = _backtrack_render(_backtracking(builtin_model), tmp_path / "on.mp4")
    assert not any(isinstance(e, SegmentRetried) for e in on)
    spec = RenderSpec.single(PROMPT, 6.5, seed=4, steps=4, health_checks=[])
    list(render(spec, tmp_path / "off.mp4", model=builtin_model, thumbnail=False))
    assert (tmp_path / "on.mp4").read_bytes() == (tmp_path / "off.mp4").read_bytes()

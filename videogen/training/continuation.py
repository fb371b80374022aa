"""One segment continued from the truth: the built-in model's continuation skill, apart from what
a chain compounds (`benchmarks/continuation.py`).

A chained render fails where one segment's flaw is handed to the next, and a long render cannot
tell a model that continues badly from one that continues well but is fed its own drifted output.
This asks the first question alone. Each trial is one continuing segment of the `builtin`
preset, denoised exactly as a render denoises it (`denoise_segment`, with the preset's steps,
guidance, flow shift, step cache and anchor frame) from a *true* prefix: the held-out prompt's
scene, from its canonical start, at a clock drawn from a band, its last latent frames encoded
losslessly as a previous segment would have handed them on, and the anchor frame drawn from the
scene where the shot's first segment would have drawn it. The new frames are judged as the long
evaluation judges a window's frames (`copies_per_frame`): a frame is wrong where a prompted object
is missing or shows in more than one copy, and a segment fails when more than `BAD_SEGMENT` of
its new frames are wrong (frames where the truth itself hides an object are not judged), the
share the gate's `objects` check and `benchmarks/health.py agree` call bad.

Bands (clocks in latent frames, the moving frames' time): `trained` [1, 100], the clocks the
recipe's continuations are drawn at; `long` [100, 1200], the rest of a 5-minute render; `fresh`, a
shot's first segment (no prefix) for contrast; `hidden` (`HIDDEN_BAND`, two-object prompts only),
the `trained` band's clocks at which the prefix ends with the first object (drawn beneath) behind
the second, so the segment has to bring out an object its prefix barely shows. The training
scenes themselves fail no trial (tested).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from videogen.training.data import hidden_at
from videogen.training.long_eval import object_copies
from videogen.training.scenes import Scene, canonical_start, render_scene

TRAINED_CLOCKS = (1, 100)  # the clocks the recipe's continuations are drawn at
BANDS: dict[str, tuple[int, int] | None] = {"fresh": None, "trained": TRAINED_CLOCKS, "long": (100, 1200)}
HIDDEN_BAND = "hidden"  # `trained` clocks where the prefix ends with one object behind the other
BAD_SEGMENT = 0.1  # a segment fails when more than this share of its new frames is wrong


def wrong_frames(frames: np.ndarray, scene: Scene) -> np.ndarray:
    """`(T,)` bool per frame of `frames` `(T, H, W, 3)` uint8: some object of `scene` missing or in
    more than one copy (the long evaluation's detector)."""
    return np.any([n != 1 for n in object_copies(frames, scene)], axis=0)


def wrong_share(frames: np.ndarray, truth: np.ndarray, scene: Scene) -> float:
    """The share of `frames` wrong (`wrong_frames`), over the frames where the `truth` (the scene
    at the same times) shows every object once: two objects of one size hide one another
    completely for a few frames now and then (0.4% of the two circles' frames)."""
    judged = ~wrong_frames(truth, scene)
    return float(wrong_frames(frames[judged], scene).mean()) if judged.any() else 0.0


@dataclass(frozen=True)
class Trial:
    """One continuing segment, judged."""

    prompt: str
    objects: int
    band: str
    clock: int  # the segment's first latent frame's time (0: a fresh segment)
    seed: int
    wrong: float  # share of its new frames wrong

    @property
    def failed(self) -> bool:
        return self.wrong > BAD_SEGMENT


def trial_clock(band: str, rng: random.Random) -> int:
    """A clock drawn uniformly from `band` (0 for `fresh`)."""
    span = BANDS[band]
    return 0 if span is None else rng.randint(*span)


def hidden_clocks(scene: Scene, prefix_latent_frames: int, temporal_factor: int, size: int) -> list[int]:
    """The `trained` band's clocks at which a continuing segment's prefix of `prefix_latent_frames`
    ends (its last frame is `temporal_factor` * (clock + prefix_latent_frames - 1)) with two-object
    `scene`'s first object behind its second (`hidden_at`: its centre within `HIDDEN_WITHIN` radii
    of the other's); empty when the two do not meet there."""
    if len(scene.objects) != 2:
        raise ValueError(f"the {HIDDEN_BAND} band needs two objects: {scene.caption()!r} has {len(scene.objects)}")
    below, above = scene.objects
    lo, hi = TRAINED_CLOCKS
    end = prefix_latent_frames - 1
    return [c for c in range(lo, hi + 1) if hidden_at(below, above, temporal_factor * (c + end), size)]


HIDDEN_DRAWS = 32  # layouts a `hidden` trial draws, at most, for one whose objects meet in the band


def hidden_layout(scene: Scene, rng: random.Random, prefix_latent_frames: int, temporal_factor: int,
                  size: int) -> tuple[Scene, int]:  # fmt: skip
    """(layout, clock) of a `hidden` trial: the first of `scene`'s canonical starts drawn from `rng`
    whose objects meet in the band (a start's jitter can keep them apart there), and a clock drawn
    among its `hidden_clocks`. Raises ValueError when none of `HIDDEN_DRAWS` layouts meets."""
    for _ in range(HIDDEN_DRAWS):
        truth = canonical_start(scene, rng)
        clocks = hidden_clocks(truth, prefix_latent_frames, temporal_factor, size)
        if clocks:
            return truth, rng.choice(clocks)
    raise ValueError(f"{scene.caption()!r}: its objects never meet at the {HIDDEN_BAND} band's clocks")


def continue_from_truth(model: Any, scene: Scene, band: str, seed: int) -> tuple[Trial, np.ndarray]:
    """One trial: `model` (the `builtin` preset loaded) continues `scene` from the truth at a clock
    drawn from `band`, from `seed`'s noise; the trial and the segment's decoded frames `(T, H, W, 3)`
    uint8 (the prefix's frames first, as a render decodes them). The `hidden` band draws the
    layout first, then a clock among its `hidden_clocks` (`hidden_layout`)."""
    import torch

    from videogen.config.geometry import geometry_of
    from videogen.config.resolve import resolve_render
    from videogen.config.spec import RenderSpec
    from videogen.models.codec import video_to_uint8
    from videogen.sampling.loop import denoise_segment, run_to_end

    prompt = scene.caption()
    preset = model.preset
    # the render's own geometry, settings and step cache: a 2-segment render's continuing segment
    spec = RenderSpec.single(prompt, 2 * preset.segment_seconds, model=preset.name, seed=seed)
    resolved = resolve_render(spec, preset, geometry_of(model))
    settings = resolved.settings
    seg = resolved.plan.segments[1 if band != "fresh" else 0]
    codec = model.codec
    rng = random.Random(seed)
    if band == HIDDEN_BAND:
        truth, clock = hidden_layout(scene, rng, seg.prefix_latent_frames, codec.temporal_factor, settings.width)
    else:
        clock = trial_clock(band, rng)
        truth = canonical_start(scene, rng)
    h, w = settings.height // codec.spatial_factor, settings.width // codec.spatial_factor
    prefix = anchor = None
    if band != "fresh":
        prefix, anchor = truth_context(
            codec, truth, clock, seg.prefix_latent_frames, preset.anchor_frame, settings.width
        )
    encode = model.prompt_encoder.encode
    with torch.inference_mode():
        out = run_to_end(
            denoise_segment(
                model,
                cond=encode([prompt]),
                uncond=encode([resolved.negative_prompt]) if settings.guidance > 1.0 else None,
                latent_frames=seg.latent_frames,
                latent_size=(h, w),
                prefix=prefix,
                steps=settings.steps,
                guidance=settings.guidance,
                flow_shift=settings.flow_shift,
                seed=seed,
                time=float(clock),
                cache=resolved.cache,
                anchor=anchor,
                context_noise=preset.context_noise if prefix is not None else 0.0,  # as `make_segment` holds it
            )
        )
        frames = video_to_uint8(codec.decode(out))[: seg.keep_frames]
    truth_frames = render_scene(truth, seg.keep_frames, settings.width, start=codec.temporal_factor * clock)
    wrong = wrong_share(frames[seg.overlap_frames :], truth_frames[seg.overlap_frames :], scene)
    return Trial(prompt, len(scene.objects), band, clock, seed, wrong), frames


def truth_context(codec: Any, truth: Scene, clock: int, prefix_latent_frames: int, anchor_frame: int | None,
                  size: int) -> tuple[Any, Any]:  # fmt: skip
    """(prefix `(1, C, P, h, w)`, anchor or None) of a segment whose first latent frame is at
    `clock` in a video of `truth`: the video's latent frames from `clock` on, each a group of
    the codec's `tf` frames as a previous segment hands them on, and (with `anchor_frame`, for a
    prefix of 2 or more) the shot's first segment's latent frame there, as `segment_anchor` takes it."""
    from videogen.models.codec import uint8_to_video
    from videogen.sampling.loop import SegmentAnchor, anchor_latent

    tf = codec.temporal_factor
    clip = render_scene(truth, tf * prefix_latent_frames + 1, size, start=tf * clock - tf)
    prefix = codec.encode(uint8_to_video(clip))[:, :, 1:]  # latent frame 0 is frame tf*clock - tf alone
    if anchor_frame is None or prefix_latent_frames < 2:
        return prefix, None
    first = codec.encode(uint8_to_video(render_scene(truth, tf * anchor_frame + 1, size)))  # the shot's start
    return prefix, SegmentAnchor(anchor_latent(codec, first, anchor_frame), float(anchor_frame), truth.caption())

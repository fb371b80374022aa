"""Evaluating the built-in model (`videogen eval builtin`): prompt adherence measured by a detector.

Held-out prompts are drawn with a fixed seed that training never uses, in two groups: combinations
of colour and shape seen in training, and the `HELD_OUT` pairs never shown. Each prompt is
rendered through the normal `render()` path and scored with `videogen.training.scenes`' detector:

    colour      the named colour is found (>= 50% of frames)
    shape       the blob's median radial profile -> the nearest of circle / square / triangle
    motion      centroid track -> left / right / up / down / bouncing / still
    background  median of the non-object pixels -> nearest background colour
    adherence   fraction of prompts right in every respect

Continuation: prompts rendered as 8 chained segments of the preset's length (each continuing
from the previous one's last frames); the object must keep its colour and its direction of motion
in every segment. A streamed (causal) model's video of the same length is cut into 8 windows.
"""

from __future__ import annotations

import itertools
import json
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from videogen.training.scenes import (
    Scene,
    classify_background,
    classify_motion,
    classify_shape,
    motion_smoothness,
    random_scene,
    track_colour,
)

EVAL_SEED = 424242  # training draws scenes from seeds (seed * 1_000_003 + step); this range is disjoint in practice


@dataclass
class PromptScore:
    prompt: str
    unseen: bool
    colour: bool
    shape: bool
    motion: bool
    background: bool
    presence: float  # fraction of frames in which each object is found (mean over objects)
    smoothness: float | None = None  # `motion_smoothness` of the moving objects (mean); None: none moves

    @property
    def correct(self) -> bool:
        return self.colour and self.shape and self.motion and self.background


def eval_prompts(n_seen: int = 16, n_unseen: int = 8) -> list[tuple[Scene, bool]]:
    rng = random.Random(EVAL_SEED)
    seen = [(random_scene(rng, held_out="exclude", max_objects=1), False) for _ in range(n_seen)]
    unseen = [(random_scene(rng, held_out="only", max_objects=1), True) for _ in range(n_unseen)]
    out = []
    for scene, flag in seen + unseen:  # lighting changes are scored by the drift metrics, not here
        out.append((Scene(scene.objects, scene.background, "none"), flag))
    return out


def score_frames(frames: np.ndarray, scene: Scene, unseen: bool = False) -> PromptScore:
    size = frames.shape[1]
    colour = shape = motion = True
    presence, smooth = [], []
    for obj in scene.objects:
        track = track_colour(frames, obj.colour)
        present = float(track.present.mean())
        presence.append(present)
        found = present >= 0.5
        colour &= found
        shape &= found and classify_shape(track) == obj.shape
        motion &= found and classify_motion(track, size) == obj.motion
        if found and obj.motion != "still" and (sm := motion_smoothness(track, size)) is not None:
            smooth.append(sm)
    background = classify_background(frames, [o.colour for o in scene.objects]) == scene.background
    return PromptScore(scene.caption(), unseen, colour, shape, motion, background, float(np.mean(presence)),
                       float(np.mean(smooth)) if smooth else None)  # fmt: skip


def _streamed(model, prompt: str, seconds: float, seed: int, steps, guidance) -> np.ndarray:
    from videogen.streaming.stream import StreamSpec, stream

    spec = StreamSpec(prompt, seconds=seconds, model=model.preset.name, seed=seed, steps=steps, guidance=guidance)
    return np.concatenate([c.frames for c in stream(spec, model)])


def _render_frames(model, prompt: str, seconds: float, seed: int, steps, guidance, path: Path) -> np.ndarray:
    """The frames of one rendered (or, for a causal model, streamed) video of `prompt`."""
    from videogen.config.spec import RenderSpec
    from videogen.io.video import VideoReader
    from videogen.rendering.render import render

    if getattr(model.preset, "causal", False):
        return _streamed(model, prompt, seconds, seed, steps, guidance)
    spec = RenderSpec.single(prompt, seconds, seed=seed, steps=steps, guidance=guidance)
    for _ in render(spec, path, model=model, thumbnail=False):
        pass
    return VideoReader(path).read_all()


def _score_prompts(model, tmp: Path, n_seen: int, n_unseen: int, steps, guidance, log) -> list[PromptScore]:
    """Each held-out prompt rendered for 5 s and scored."""
    scores: list[PromptScore] = []
    for i, (scene, unseen) in enumerate(eval_prompts(n_seen, n_unseen)):
        frames = _render_frames(model, scene.caption(), 5.0, i, steps, guidance, tmp / "v.mp4")
        s = score_frames(frames, scene, unseen)
        scores.append(s)
        if log:
            log(f"{'unseen' if unseen else 'seen  '} {'OK  ' if s.correct else 'MISS'} {s}")
    return scores


def _check_continuations(model, tmp: Path, n_continuation: int, steps, guidance, log) -> tuple[int, int]:
    """(segments consistent, segments checked) over `n_continuation` 8-segment chains: each
    segment must keep the object's colour and direction of motion."""
    from videogen.config.spec import RenderSpec
    from videogen.io.video import VideoReader
    from videogen.rendering.render import RenderStarted, render

    streaming = bool(getattr(model.preset, "causal", False))
    cont_total = cont_ok = 0
    rng = random.Random(EVAL_SEED + 1)
    for i in range(n_continuation):
        scene = random_scene(rng, held_out="exclude", max_objects=1)
        while scene.objects[0].motion in ("still", "bouncing"):  # direction must be measurable
            scene = random_scene(rng, held_out="exclude", max_objects=1)
        scene = Scene(scene.objects, scene.background, "none")
        bounds = []
        # 8 segments of the preset's own length (the length it was trained on), each handing
        # its last `overlap_frames` frames to the next as a clean prefix.
        seg, fps = model.preset.segment_seconds, model.preset.fps
        seconds = seg + 7 * (seg - model.preset.overlap_frames / fps)
        if streaming:
            frames = _streamed(model, scene.caption(), seconds, 100 + i, steps, guidance)
            edges = np.linspace(0, len(frames), 9).astype(int)
            bounds = list(itertools.pairwise(edges))
        else:
            spec = RenderSpec.single(scene.caption(), seconds, seed=100 + i, steps=steps, guidance=guidance)
            for ev in render(spec, tmp / "c.mp4", model=model, thumbnail=False):
                if isinstance(ev, RenderStarted):
                    start = 0
                    for segment in ev.plan.segments:
                        bounds.append((start, start + segment.new_frames))
                        start += segment.new_frames
            frames = VideoReader(tmp / "c.mp4").read_all()
        for a, b in bounds[:8]:
            s = score_frames(frames[a:b], scene)
            cont_total += 1
            cont_ok += s.colour and s.motion
        if log:
            log(f"continuation {scene.caption()}: {cont_ok}/{cont_total} segments consistent so far")
    return cont_ok, cont_total


def evaluate_builtin(model, *, n_seen: int = 16, n_unseen: int = 8, n_continuation: int = 4,
                     steps: int | None = None, guidance: float | None = None, log=None) -> dict:  # fmt: skip
    """Scores `model` (a built-in preset). A block-causal model (`preset.causal`) is scored on its
    streamed output (`videogen.streaming.stream`), chunk by chunk through the KV cache; its continuation
    check splits one long stream into 8 windows instead of chaining segments."""
    with tempfile.TemporaryDirectory() as tmp:
        scores = _score_prompts(model, Path(tmp), n_seen, n_unseen, steps, guidance, log)
        cont_ok, cont_total = _check_continuations(model, Path(tmp), n_continuation, steps, guidance, log)

    def frac(pred, subset=None):
        chosen = [s for s in scores if subset is None or s.unseen == subset]
        return round(sum(pred(s) for s in chosen) / max(1, len(chosen)), 4)

    return {
        "prompts": len(scores),
        "adherence": frac(lambda s: s.correct),
        "adherence_seen": frac(lambda s: s.correct, False),
        "adherence_unseen": frac(lambda s: s.correct, True),
        "colour_acc": frac(lambda s: s.colour),
        "shape_acc": frac(lambda s: s.shape),
        "motion_acc": frac(lambda s: s.motion),
        "background_acc": frac(lambda s: s.background),
        "temporal_consistency": round(float(np.mean([s.presence for s in scores])), 4) if scores else 0.0,
        # 1: motion spread evenly over frames (as in the scenes); 0: it all happens once per latent frame
        "motion_smoothness": round(float(np.mean(sm)), 4)
        if (sm := [s.smoothness for s in scores if s.smoothness is not None])
        else 0.0,
        "continuation_segments": cont_total,
        "continuation_consistency": round(cont_ok / max(1, cont_total), 4),
    }


def format_json(result: dict) -> str:
    return json.dumps(result)

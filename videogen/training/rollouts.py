"""Training on the model's own multi-segment rollouts, with a corrective target.

A long render fails by compounding: each segment continues the previous one's last frames, and
the model copies and amplifies its own errors there (an object that swells a little at every
seam, then splits or rounds off; docs/builtin-model.md, "What a chain does before it fails").
The one-step self-context (`videogen.training.context`) shows the model its own rendering of a
*clean* context; it never sees what many segments of compounding make.

Here the context is real rollout output: chained gate-off renders of training captions
(`make_pool`), cut at every seam into the prefix the next segment saw. The target is what a
perfect model would draw from there (DAgger, with the scene generator as the expert): each
object measured where the rollout left it (the centroid of its colour's largest piece in the
last context frame), moving on as its caption says (a bounce in the direction the scene had at that
time), drawn clean, at the true size and shape. So the model learns to continue from where its
own output is, and to repair the object rather than copy it. The clip's clock is the video's, as
rendering sees it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from videogen.config.geometry import SINK_POSITION
from videogen.models.codec import PixelCodec, uint8_to_video
from videogen.sampling.health import torus_components
from videogen.training.data import ANCHOR_LATEST, Batch, shifted_sigma
from videogen.training.scenes import (
    PALETTE,
    RADIUS,
    Scene,
    SceneObject,
    _position,
    canonical_start,
    colour_mask,
    random_scene,
    render_scene,
    track_colour,
)

SEGMENT_FRAMES = 33  # the built-in preset's segment (9 latent frames), with a 5-frame (2 latent frame) handoff
PREFIX_FRAMES = 5
PREFIX_LATENT = 2
NEW_FRAMES = SEGMENT_FRAMES - PREFIX_FRAMES


def make_pool(model: Any, path: str | Path, chains: int, seconds: float, seed: int = 0,
              two_objects: float | None = None) -> Path:  # fmt: skip
    """Render `chains` gate-off videos of `seconds` from random training captions (held-out
    colour/shape pairs excluded, no lighting change) with `model` (the `builtin` preset) and save
    their frames and scenes to `path` (.npz). `two_objects`: the share of captions with two
    objects (None: the training mix's, `random_scene`)."""
    from videogen.config.spec import RenderSpec
    from videogen.io.video import VideoReader
    from videogen.rendering.render import prepare, render

    _check_layout(prepare(RenderSpec.single("a white circle on a black background", seconds,
                                            model=model.preset.name), model)[1], model.preset.name)  # fmt: skip
    rng = random.Random(seed * 1_000_003 + 17)
    videos, scenes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(chains):
            scene = dataclasses.replace(canonical_start(pool_scene(rng, two_objects), rng), lighting="none")
            spec = RenderSpec.single(scene.caption(), seconds, model=model.preset.name, seed=seed + i,
                                     health_checks=[])  # fmt: skip
            out = Path(tmp) / "chain.mp4"
            for _ in render(spec, out, model=model, thumbnail=False):
                pass
            videos.append(VideoReader(out).read_all())
            scenes.append(dataclasses.asdict(scene))
    path = Path(path)
    np.savez_compressed(path, videos=np.stack(videos), scenes=json.dumps(scenes))
    return path


def _check_layout(plan: Any, preset: str) -> None:
    """The pool is cut at seams `SEGMENT_FRAMES` apart with a `PREFIX_FRAMES` handoff (the clip
    the model trains on); a preset that chains segments otherwise makes a pool cut in the wrong
    places, so it is refused before any rendering."""
    for seg in plan.segments[1:]:
        if seg.prefix_latent_frames != PREFIX_LATENT or seg.overlap_frames != PREFIX_FRAMES:
            raise ValueError(f"preset {preset!r} hands over {seg.overlap_frames} frames ({seg.prefix_latent_frames} "
                             f"latent) between segments; a rollout pool needs {PREFIX_FRAMES} ({PREFIX_LATENT})")  # fmt: skip
    for seg in plan.segments[:-1]:  # the last one may be cut short to the video's length
        if seg.frames != SEGMENT_FRAMES or seg.keep_frames != SEGMENT_FRAMES:
            raise ValueError(f"preset {preset!r} makes segments of {seg.keep_frames} frames; a rollout pool "
                             f"needs {SEGMENT_FRAMES} (the clip the model trains on)")  # fmt: skip


def pool_scene(rng: random.Random, two_objects: float | None = None) -> Scene:
    """A training caption for a pool chain: `random_scene`'s, or with two objects in a share
    `two_objects` of draws (the captions that fail over minutes, where a pool weighted to them
    shows the model more of its own two-object errors)."""
    if two_objects is None:
        return random_scene(rng)
    objects = 2 if rng.random() < two_objects else 1
    while len((scene := random_scene(rng, max_objects=objects)).objects) != objects:
        pass
    return scene


@dataclasses.dataclass(frozen=True)
class RolloutPool:
    videos: np.ndarray  # (N, T, H, W, 3) uint8
    scenes: list[Scene]

    @classmethod
    def load(cls, path: str | Path) -> RolloutPool:
        data = np.load(path)
        scenes = [Scene(tuple(SceneObject(**o) for o in s["objects"]), s["background"], s["lighting"])
                  for s in json.loads(str(data["scenes"]))]  # fmt: skip
        return cls(data["videos"], scenes)

    @property
    def seams(self) -> int:
        """Continuing segments per video: the seams a clip can be cut at."""
        return (self.videos.shape[1] - SEGMENT_FRAMES) // NEW_FRAMES


def corrected_scene(scene: Scene, last: np.ndarray, frame: int) -> Scene:
    """`scene` restarted at the rollout's frame `frame` (whose pixels are `last` (H, W, 3)): each
    object where the rollout shows it (the scene's own position there when its colour is not
    found), moving on as at that time in the scene (a bounce keeps its current direction)."""
    size = last.shape[0]
    objects = []
    for o in scene.objects:
        found = _largest_piece(last, o.colour)
        if found is not None:  # its largest piece's centroid, less where the shape's centroid sits from its centre
            dx, dy = _centroid_offset(o.shape, size)
            x, y = found[0] - dx, found[1] - dy
        else:
            x, y = _position(o, frame, size)
        angle = o.angle
        if o.motion == "bouncing":
            (x1, y1), (x2, y2) = _position(o, frame, size), _position(o, frame + 1, size)
            angle = math.atan2(y2 - y1, x2 - x1)
            r = RADIUS * size / 64  # a bounce is drawn by reflection inside [r, size - r]
            x, y = min(max(x, r), size - r), min(max(y, r), size - r)
        objects.append(SceneObject(o.colour, o.shape, o.motion, x / size, y / size, angle))
    return Scene(tuple(objects), scene.background, scene.lighting)


def _largest_piece(frame: np.ndarray, colour: str, min_pixels: int = 12) -> tuple[float, float] | None:
    """(x, y) centroid of the largest piece of `colour` in `frame` (H, W, 3) (8-connected on the
    torus, as the scenes wrap), or None when no piece has `min_pixels`: a rollout that split its
    object continues from the piece that holds most of it, not from a point between the pieces."""
    mask = colour_mask(frame[None], PALETTE[colour])
    labels = torus_components(mask)[0]
    ids, sizes = np.unique(labels[mask[0]], return_counts=True)
    if not len(ids) or sizes.max() < min_pixels:
        return None
    piece = (labels == ids[sizes.argmax()])[None]
    track = track_colour(np.where(piece[..., None], frame[None], 0).astype(np.uint8), colour, min_pixels)
    return float(track.centroid[0][0]), float(track.centroid[0][1])


@functools.lru_cache(maxsize=16)
def _centroid_offset(shape: str, size: int) -> tuple[float, float]:
    """Where the generator's `shape` has its pixel centroid, from the centre it is drawn at."""
    still = Scene((SceneObject("white", shape, "still", 0.5, 0.5),), "black")
    track = track_colour(render_scene(still, 1, size=size), "white")
    cx, cy = track.centroid[0]
    return float(cx - size / 2), float(cy - size / 2)


def rollout_clip(pool: RolloutPool, video: int, seam: int, anchor: int = 0) -> tuple[np.ndarray, Scene, float]:
    """(frames (33, H, W, 3), scene, clock): the context segment `seam` (>= 1) of pool video
    `video` continued from, then the corrected target; the clock is that segment's first latent
    frame's time in the video (`segment_times`). `anchor` > 0: the first frame is the video's
    own frame at latent time `anchor` (its first segment's), as an anchored render sees it."""
    end = SEGMENT_FRAMES + NEW_FRAMES * (seam - 1)  # frames written before segment `seam`
    context = pool.videos[video, end - PREFIX_FRAMES : end].copy()
    if anchor:
        context[0] = pool.videos[video, 4 * anchor]
    scene = pool.scenes[video]
    target = corrected_scene(scene, context[-1], end - 1)
    ahead = render_scene(target, NEW_FRAMES + 1, size=context.shape[1])[1:]
    clock = float((SEGMENT_FRAMES // 4 + 1 - PREFIX_LATENT) * seam)
    return np.concatenate([context, ahead]), scene, clock


def mix_rollouts(batch: Batch, pool: RolloutPool | None, fraction: float, seed: int, step: int, shift: float,
                 codec: PixelCodec, anchor_frac: float = 0.0) -> Batch:  # fmt: skip
    """`batch` with a `fraction` of its clips (when they are segment-long, 9 latent frames)
    replaced by rollout clips: the context (2 latent frames, clean, no loss), the corrected target
    at one shifted-uniform sigma, the caption, the video's clock; `anchor_frac` of them anchored
    (the context's first latent frame a frame of the video's first segment, at `SINK_POSITION`).
    Deterministic from (seed, step)."""
    b, f = batch.sigmas.shape
    if pool is None or fraction <= 0 or f != SEGMENT_FRAMES // 4 + 1 or pool.seams < 1:
        return batch
    rng = random.Random(seed * 1_000_003 + step + 3_000_000_019)
    g = torch.Generator().manual_seed(seed * 7_919 + step + 3_000_000_019)
    picks = [i for i in range(b) if rng.random() < fraction]
    if not picks:
        return batch
    latents, sigmas = batch.latents.clone(), batch.sigmas.clone()
    frames, context, captions = batch.frames.clone(), batch.context.clone(), list(batch.captions)
    positions = batch.positions
    if anchor_frac > 0:
        positions = torch.arange(f, dtype=torch.float64).repeat(b, 1) if positions is None else positions.clone()
    for i in picks:
        video, seam = rng.randrange(len(pool.videos)), rng.randint(1, pool.seams)
        anchor = rng.randint(1, ANCHOR_LATEST) if anchor_frac > 0 and rng.random() < anchor_frac else 0
        clip, scene, clock = rollout_clip(pool, video, seam, anchor)
        latents[i] = codec.encode(uint8_to_video(clip))[0]
        sigma = shifted_sigma(torch.rand(1, generator=g), shift)
        sigmas[i] = sigma.expand(f).clone()
        sigmas[i, :PREFIX_LATENT] = 0.0
        context[i] = False
        context[i, :PREFIX_LATENT] = True
        frames[i] = clock + torch.arange(f, dtype=frames.dtype)
        if positions is not None:
            positions[i] = torch.arange(f, dtype=positions.dtype)
            if anchor:
                frames[i, 0], positions[i, 0] = float(anchor), SINK_POSITION
        captions[i] = scene.caption()
    return batch._replace(latents=latents, sigmas=sigmas, frames=frames, context=context, captions=captions,
                          positions=positions)  # fmt: skip

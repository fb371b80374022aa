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
rendering sees it. With a look-back (`rollout_lookback`), an object the last frame hides (behind
the other one, or fading) restarts where the rollout last showed it whole, moved on since.

The causal variant's rollouts are its own gate-off streams (a *stream pool*): a clip is what one
chunk saw in its KV cache (the sink, the stream's first frame, and the window, the 6 latent frames
before the chunk), then the corrected target for the chunk's 3 latent frames, at the RoPE
positions and clock the stream gave them (Self-Forcing's training on the model's own rollouts,
with the scene generator's correction as the target).
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
    _unwrap,
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
# A stream (`videogen stream`, the causal variant): chunks of 3 latent frames after the first frame
# alone; each chunk sees its cache's sink (latent frame 0) and window (the 6 latent frames before
# it) at RoPE positions 0 and 1..6, itself at 7..9: one 10-latent-frame block-causal clip.
STREAM_CHUNK = 3
STREAM_SINK = 1
STREAM_WINDOW = 6
STREAM_CLIP_LATENT = STREAM_SINK + STREAM_WINDOW + STREAM_CHUNK


def make_pool(model: Any, path: str | Path, chains: int, seconds: float, seed: int = 0,
              two_objects: float | None = None) -> Path:  # fmt: skip
    """Render `chains` gate-off videos of `seconds` from random training captions (held-out
    colour/shape pairs excluded, no lighting change) with `model` and save their frames and
    scenes to `path` (.npz). The `builtin` preset chains rendered segments; a causal preset
    (`builtin-causal`) streams them (a *stream pool*, for the causal variant's rollout clips).
    `two_objects`: the share of captions with two objects (None: the training mix's,
    `random_scene`)."""
    streamed = bool(getattr(model.preset, "causal", False))
    if streamed:
        _check_stream_length(seconds, model.preset.fps)
    else:
        from videogen.config.spec import RenderSpec
        from videogen.rendering.render import prepare

        _check_layout(prepare(RenderSpec.single("a white circle on a black background", seconds,
                                                model=model.preset.name), model)[1], model.preset.name)  # fmt: skip
    rng = random.Random(seed * 1_000_003 + 17)
    videos, scenes = [], []
    for i in range(chains):
        scene = dataclasses.replace(canonical_start(pool_scene(rng, two_objects), rng), lighting="none")
        make = _streamed if streamed else _rendered
        videos.append(make(model, scene.caption(), seconds, seed + i))
        scenes.append(dataclasses.asdict(scene))
    path = Path(path)
    np.savez_compressed(path, videos=np.stack(videos), scenes=json.dumps(scenes), streamed=streamed)
    return path


def _rendered(model: Any, caption: str, seconds: float, seed: int) -> np.ndarray:
    """A gate-off chained render's frames (T, H, W, 3) uint8."""
    from videogen.config.spec import RenderSpec
    from videogen.io.video import VideoReader
    from videogen.rendering.render import render

    spec = RenderSpec.single(caption, seconds, model=model.preset.name, seed=seed, health_checks=[])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "chain.mp4"
        for _ in render(spec, out, model=model, thumbnail=False):
            pass
        return VideoReader(out).read_all()


def _streamed(model: Any, caption: str, seconds: float, seed: int) -> np.ndarray:
    """A gate-off stream's frames (T, H, W, 3) uint8, as `videogen stream` makes them."""
    from videogen.config.spec import StreamSpec
    from videogen.streaming.stream import stream

    spec = StreamSpec(caption, seconds, model=model.preset.name, seed=seed, chunk_frames=STREAM_CHUNK,
                      first_chunk_frames=1, sink_frames=STREAM_SINK, window_frames=STREAM_WINDOW,
                      health_checks=[])  # fmt: skip
    return np.concatenate([chunk.frames for chunk in stream(spec, model)])


def stream_pool_seconds(fps: float = 16.0) -> float:
    """The longest stream a pool holds: a stream re-bases its clock once its frames pass
    `CLOCK_PERIOD` latent frames (`videogen.streaming.recache`); a pool stream stays before that,
    so every clip cut from it sees the clock the stream saw (each latent frame's own index)."""
    from videogen.streaming.recache import CLOCK_PERIOD

    return (4 * (CLOCK_PERIOD - 1) + 1) / fps


def _check_stream_length(seconds: float, fps: float) -> None:
    if seconds > (most := stream_pool_seconds(fps)):
        raise ValueError(f"a stream pool's videos are at most {most:g} s (before the stream re-bases its clock), "
                         f"got {seconds:g} s")  # fmt: skip


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
    streamed: bool = False  # streamed by a causal model (`make_pool`), not chained renders

    @classmethod
    def load(cls, path: str | Path) -> RolloutPool:
        data = np.load(path)
        scenes = [Scene(tuple(SceneObject(**o) for o in s["objects"]), s["background"], s["lighting"])
                  for s in json.loads(str(data["scenes"]))]  # fmt: skip
        return cls(data["videos"], scenes, bool(data["streamed"]) if "streamed" in data else False)

    @property
    def seams(self) -> int:
        """Continuing segments per video: the seams a clip can be cut at."""
        return (self.videos.shape[1] - SEGMENT_FRAMES) // NEW_FRAMES

    @property
    def chunk_starts(self) -> list[int]:
        """The latent frames a stream chunk starts at, with a full window before it and its
        window's frames in the pool's videos: where a stream clip (`stream_rollout_clip`) is cut."""
        last = (self.videos.shape[1] - 1) // 4  # the last whole latent frame
        first = STREAM_SINK + STREAM_WINDOW
        return list(range(first, last + 2, STREAM_CHUNK))


# An object's largest piece smaller than this share of its drawn area is not *whole* (split, fading
# or mostly gone); nor is one that touches another object (passing behind it, or in front).
WHOLE_SHARE = 0.6


def corrected_scene(scene: Scene, frames: np.ndarray, frame: int) -> Scene:
    """`scene` restarted at the rollout's frame `frame`, whose pixels are `frames[-1]` (`frames`
    (T, H, W, 3): the rollout's frames up to that one, as many as the target may look back at):
    each object where the rollout shows it, moving on as at that time in the scene (a bounce keeps
    its current direction). An object the last frame shows whole is measured there (its largest
    piece's centroid). One it does not (behind the other object, or fading) is placed where one of
    the earlier `frames` last showed it whole, moved on as its caption says for the frames since,
    so the target brings it out where it went in: a sliver's centroid is pixels off its centre.
    One never whole in them (with the last frame alone: any) keeps its largest piece's place, or
    the scene's own when none is left."""
    size = frames.shape[1]
    objects = []
    for o in scene.objects:
        others = [p.colour for p in scene.objects if p is not o]
        x, y = _measured(o, others, frames, frame)
        angle = o.angle
        if o.motion == "bouncing":
            (x1, y1), (x2, y2) = _position(o, frame, size), _position(o, frame + 1, size)
            angle = math.atan2(y2 - y1, x2 - x1)
            r = RADIUS * size / 64  # a bounce is drawn by reflection inside [r, size - r]
            x, y = min(max(x, r), size - r), min(max(y, r), size - r)
        objects.append(SceneObject(o.colour, o.shape, o.motion, x / size, y / size, angle))
    return Scene(tuple(objects), scene.background, scene.lighting)


def _measured(o: SceneObject, others: list[str], frames: np.ndarray, frame: int) -> tuple[float, float]:
    """Object `o`'s centre (pixels) at `frames[-1]` (frame `frame` of its video, whose other
    objects have the colours `others`), as `corrected_scene` reads it."""
    size = frames.shape[1]
    dx, dy, area = _shape_stats(o.shape, size)
    last = None
    for back in range(len(frames)):
        piece = _piece(frames[-1 - back], o.colour)
        last = piece if back == 0 else last
        if piece is None or piece[2] < WHOLE_SHARE * area or _touches(piece[3], frames[-1 - back], others):
            continue
        x, y = piece[0] - dx, piece[1] - dy  # its largest piece's centroid, less the shape's own offset
        if back == 0:
            return x, y
        # moved on for `back` frames as the caption says (a bounce: as the scene moved it then)
        (x1, y1), (x2, y2) = _position(o, frame - back, size), _position(o, frame, size)
        if o.motion == "bouncing":
            return x + x2 - x1, y + y2 - y1
        return (x + float(_unwrap(x2 - x1, size))) % size, (y + float(_unwrap(y2 - y1, size))) % size
    if last is not None:
        return last[0] - dx, last[1] - dy
    return _position(o, frame, size)


def _touches(piece: np.ndarray, frame: np.ndarray, colours: list[str]) -> bool:
    """Whether `piece` (H, W) bool borders a pixel of one of `colours` in `frame` (8-neighbours,
    on the torus)."""
    if not colours:
        return False
    grown = piece.copy()
    for shift in ((0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (1, -1), (-1, 1), (-1, -1)):
        grown |= np.roll(piece, shift, axis=(0, 1))
    return any(bool((grown & colour_mask(frame[None], PALETTE[c])[0]).any()) for c in colours)


def _piece(frame: np.ndarray, colour: str, min_pixels: int = 12) -> tuple[float, float, int, np.ndarray] | None:
    """(x, y, pixels, mask): the centroid, size and (H, W) mask of the largest piece of `colour` in
    `frame` (H, W, 3) (8-connected on the torus, as the scenes wrap), or None when no piece has
    `min_pixels`: a rollout that split its object continues from the piece that holds most of it,
    not from a point between the pieces."""
    mask = colour_mask(frame[None], PALETTE[colour])
    labels = torus_components(mask)[0]
    ids, sizes = np.unique(labels[mask[0]], return_counts=True)
    if not len(ids) or sizes.max() < min_pixels:
        return None
    piece = labels == ids[sizes.argmax()]
    track = track_colour(np.where(piece[None, ..., None], frame[None], 0).astype(np.uint8), colour, min_pixels)
    return float(track.centroid[0][0]), float(track.centroid[0][1]), int(sizes.max()), piece


@functools.lru_cache(maxsize=16)
def _shape_stats(shape: str, size: int) -> tuple[float, float, int]:
    """(dx, dy, pixels): where the generator's `shape` has its pixel centroid, from the centre it
    is drawn at, and how many pixels it covers."""
    still = Scene((SceneObject("white", shape, "still", 0.5, 0.5),), "black")
    frame = render_scene(still, 1, size=size)
    track = track_colour(frame, "white")
    cx, cy = track.centroid[0]
    return float(cx - size / 2), float(cy - size / 2), int(colour_mask(frame, PALETTE["white"]).sum())


def rollout_clip(
    pool: RolloutPool, video: int, seam: int, anchor: int = 0, lookback: int = 0
) -> tuple[np.ndarray, Scene, float]:
    """(frames (33, H, W, 3), scene, clock): the context segment `seam` (>= 1) of pool video
    `video` continued from, then the corrected target; the clock is that segment's first latent
    frame's time in the video (`segment_times`). `anchor` > 0: the first frame is the video's
    own frame at latent time `anchor` (its first segment's), as an anchored render sees it. The
    target may look `lookback` frames back for an object the context's last frame hides
    (`corrected_scene`; 0: the last frame alone)."""
    end = SEGMENT_FRAMES + NEW_FRAMES * (seam - 1)  # frames written before segment `seam`
    context = pool.videos[video, end - PREFIX_FRAMES : end].copy()
    if anchor:
        context[0] = pool.videos[video, 4 * anchor]
    scene = pool.scenes[video]
    target = corrected_scene(scene, pool.videos[video, max(0, end - 1 - lookback) : end], end - 1)
    ahead = render_scene(target, NEW_FRAMES + 1, size=context.shape[1])[1:]
    clock = float((SEGMENT_FRAMES // 4 + 1 - PREFIX_LATENT) * seam)
    return np.concatenate([context, ahead]), scene, clock


def stream_rollout_clip(
    pool: RolloutPool, video: int, start: int, lookback: int = 0
) -> tuple[np.ndarray, Scene, np.ndarray]:
    """(frames (37, H, W, 3), scene, clock (10,)): what a stream's chunk at latent frame `start`
    (`RolloutPool.chunk_starts`) saw of pool video `video`: its sink (the video's first frame)
    and window (the 6 latent frames before `start`), then the corrected target for the chunk's
    3 latent frames. The clock is each latent frame's index in the stream, as the stream saw it;
    `lookback` as `rollout_clip`'s."""
    window = pool.videos[video, 4 * (start - STREAM_WINDOW) - 3 : 4 * start - 3]  # latent frames start-6 .. start-1
    scene = pool.scenes[video]
    seen = pool.videos[video, max(0, 4 * start - 4 - lookback) : 4 * start - 3]  # up to the window's last
    target = corrected_scene(scene, seen, 4 * start - 4)
    ahead = render_scene(target, 4 * STREAM_CHUNK + 1, size=window.shape[1])[1:]
    clip = np.concatenate([pool.videos[video, :1], window, ahead])
    clock = np.concatenate([[0.0], np.arange(start - STREAM_WINDOW, start + STREAM_CHUNK, dtype=np.float64)])
    return clip, scene, clock


def mix_rollouts(batch: Batch, pool: RolloutPool | None, fraction: float, seed: int, step: int, shift: float,
                 codec: PixelCodec, anchor_frac: float = 0.0, causal_chunk: int = 0,
                 lookback: int = 0) -> Batch:  # fmt: skip
    """`batch` with a `fraction` of its clips (when they are segment-long, 9 latent frames)
    replaced by rollout clips: the context (2 latent frames, clean, no loss), the corrected target
    at one shifted-uniform sigma, the caption, the video's clock; `anchor_frac` of them anchored
    (the context's first latent frame a frame of the video's first segment, at `SINK_POSITION`).
    Deterministic from (seed, step). The causal variant (`causal_chunk`) mixes stream clips
    instead (`stream_rollout_clip`, from a stream pool) into its 10-latent-frame clips. `lookback`:
    the frames a target may look back at for a hidden object (`corrected_scene`; 0: none)."""
    if causal_chunk:
        return _mix_stream_rollouts(batch, pool, fraction, seed, step, shift, codec, causal_chunk, lookback)
    b, f = batch.sigmas.shape
    if pool is None or fraction <= 0 or f != SEGMENT_FRAMES // 4 + 1 or pool.seams < 1:
        return batch
    rng, g, picks = _mixing_draws(b, fraction, seed, step)
    if not picks:
        return batch
    latents, sigmas, frames, context, captions = _copies(batch)
    positions = batch.positions
    if anchor_frac > 0:
        positions = torch.arange(f, dtype=torch.float64).repeat(b, 1) if positions is None else positions.clone()
    for i in picks:
        video, seam = rng.randrange(len(pool.videos)), rng.randint(1, pool.seams)
        anchor = rng.randint(1, ANCHOR_LATEST) if anchor_frac > 0 and rng.random() < anchor_frac else 0
        clip, scene, clock = rollout_clip(pool, video, seam, anchor, lookback)
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


def _mixing_draws(
    batch_size: int, fraction: float, seed: int, step: int
) -> tuple[random.Random, torch.Generator, list[int]]:
    """The mixing's own random streams, deterministic from (seed, step) and apart from the batch's,
    and the clips it replaces (each with probability `fraction`)."""
    rng = random.Random(seed * 1_000_003 + step + 3_000_000_019)
    g = torch.Generator().manual_seed(seed * 7_919 + step + 3_000_000_019)
    return rng, g, [i for i in range(batch_size) if rng.random() < fraction]


def _copies(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[str]]:
    """Copies of the batch fields a mixing rewrites: latents, sigmas, frames, context, captions."""
    return (
        batch.latents.clone(),
        batch.sigmas.clone(),
        batch.frames.clone(),
        batch.context.clone(),
        list(batch.captions),
    )


def _mix_stream_rollouts(batch: Batch, pool: RolloutPool | None, fraction: float, seed: int, step: int, shift: float,
                         codec: PixelCodec, causal_chunk: int, lookback: int = 0) -> Batch:  # fmt: skip
    """`mix_rollouts` for the causal variant: a `fraction` of its 10-latent-frame clips become
    stream clips; sink and window clean (no loss), the chunk at one shifted-uniform sigma."""
    if pool is None or fraction <= 0:
        return batch
    if not pool.streamed or causal_chunk != STREAM_CHUNK:
        raise ValueError(f"the causal variant (chunks of {causal_chunk}) trains on a pool streamed in chunks of "
                         f"{STREAM_CHUNK} (`make_pool` with the causal preset); this pool is "
                         f"{'streamed' if pool.streamed else 'chained renders'}")  # fmt: skip
    b, f = batch.sigmas.shape
    starts = pool.chunk_starts
    if f != STREAM_CLIP_LATENT or not starts:
        return batch
    rng, g, picks = _mixing_draws(b, fraction, seed, step)
    if not picks:
        return batch
    latents, sigmas, frames, context, captions = _copies(batch)
    seen = STREAM_SINK + STREAM_WINDOW
    for i in picks:
        video, start = rng.randrange(len(pool.videos)), rng.choice(starts)
        clip, scene, clock = stream_rollout_clip(pool, video, start, lookback)
        latents[i] = codec.encode(uint8_to_video(clip))[0]
        sigmas[i] = shifted_sigma(torch.rand(1, generator=g), shift).expand(f).clone()
        sigmas[i, :seen] = 0.0
        context[i] = False
        context[i, :seen] = True
        frames[i] = torch.from_numpy(clock).to(frames.dtype)
        captions[i] = scene.caption()
    return batch._replace(latents=latents, sigmas=sigmas, frames=frames, context=context, captions=captions)

"""Training batches for the built-in model: procedural clips, their noise levels and captions.

Noise levels are per latent frame:

    35%  continuation: the first P in 1..4 latent frames clean (timestep 0), the rest at one sigma
    25%  diffusion forcing: an independent sigma for every latent frame
    40%  one sigma for the whole clip (as every still image), 40% of them in [0.85, 1]

so one model generates from scratch and continues from a clean prefix (the chained-segment
handoff). With `anchor_frac`, that share of the continuations on a render's clock (P >= 2) is
anchored: the prefix's first latent frame is replaced by a frame from the video's first segment,
at its own time and at `SINK_POSITION` (`anchored`; rendering's `anchor_frame`). 10% of captions are dropped (empty prompt) so classifier-free guidance works. Every
batch is a pure function of (seed, step): a resumed run sees exactly the data the uninterrupted
run would.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import NamedTuple

import numpy as np
import torch

from videogen.config.geometry import SINK_POSITION
from videogen.models.codec import PixelCodec, uint8_to_video
from videogen.training.config import TrainConfig
from videogen.training.scenes import (
    RADIUS,
    WRAPPING,
    Scene,
    SceneObject,
    _position,
    _unwrap,
    canonical_start,
    random_scene,
    render_scene,
)


class Batch(NamedTuple):
    latents: torch.Tensor  # (B, C, F, h, w) the clean clips
    sigmas: torch.Tensor  # (B, F) each latent frame's noise level (context frames: 0 or `context_noise`)
    noise: torch.Tensor  # like latents
    captions: list[str]
    frames: torch.Tensor  # (B, F) each latent frame's index in its video (the moving frames' clock)
    context: torch.Tensor  # (B, F) bool: a clean context frame (prefix, clean chunk): no loss
    # (B, F) each latent frame's position in the clip (`position_channels`): 0..F-1, the anchor
    # frame of an anchored continuation at `SINK_POSITION`; None: 0..F-1 everywhere
    positions: torch.Tensor | None = None


def shifted_sigma(u: torch.Tensor, shift: float) -> torch.Tensor:
    """Uniform draws in [0, 1] shifted toward high noise, as the sampler's schedule is (Wan's shift)."""
    return shift * u / (1 + (shift - 1) * u)


def fresh_sigma(cfg: TrainConfig, g: torch.Generator) -> torch.Tensor:
    """One noise level for a clip made from scratch: the shifted-uniform draw, or with probability
    `cfg.layout_frac` one in [0.85, 1], where the input holds almost nothing and the prediction
    must come from the caption alone (which object goes where): that is the only place the model
    learns the layout a caption implies, and a plain draw puts only ~1 sample in 15 there."""
    u = torch.rand(2, generator=g)
    if u[0] < cfg.layout_frac:
        return 0.85 + 0.15 * u[1:]
    return shifted_sigma(u[1:], cfg.shift)


def _causal_sigmas(cfg: TrainConfig, frames_lat: int, rng: random.Random, g: torch.Generator) -> torch.Tensor:
    """(frames_lat,) for the block-causal variant: independent noise per chunk; each earlier chunk
    is clean (the KV cache's clean-context pass) with probability 1/2, so both teacher-forced and
    diffusion-forced contexts occur."""
    n_chunks = 1 + (frames_lat - 1) // cfg.causal_chunk
    per_chunk = shifted_sigma(torch.rand(n_chunks, generator=g), cfg.shift)
    clean = torch.tensor([rng.random() < 0.5 for _ in range(n_chunks - 1)] + [False])
    sizes = torch.tensor([1] + [cfg.causal_chunk] * (n_chunks - 1))
    return torch.where(clean, 0.0, per_chunk).repeat_interleave(sizes)


def _clip_sigmas(
    cfg: TrainConfig, frames_lat: int, mode: float, rng: random.Random, g: torch.Generator
) -> torch.Tensor:
    """(frames_lat,) noise levels of one clip; `mode` in [0, 1) picks the kind (module docstring)."""
    if cfg.causal_chunk:
        return _causal_sigmas(cfg, frames_lat, rng, g)
    if frames_lat == 1 or mode >= 0.6:
        return fresh_sigma(cfg, g).expand(frames_lat)
    if mode < 0.35:
        p = rng.randint(1, min(4, frames_lat - 1))
        sigmas = shifted_sigma(torch.rand(1, generator=g), cfg.shift).repeat(frames_lat)
        sigmas[:p] = 0.0
        return sigmas
    return shifted_sigma(torch.rand(frames_lat, generator=g), cfg.shift)


def _place_scene(scene: Scene, made_from_scratch: bool, rng: random.Random) -> tuple[Scene, float, float]:
    """(scene, start frame, clock offset in latent frames) of one clip."""
    if made_from_scratch:  # no clean first frame: the canonical layout
        return canonical_start(scene, rng), 0.0, 0.0
    if rng.random() < 0.5:
        # Continues a clean prefix, later in a video that began with the canonical layout: the
        # clock (`frames`, what the moving frames see) is the video's, as when rendering chains
        # segments (`videogen.rendering.render.segment_times`) or streaming, so prefix and moving
        # frames agree.
        scene, start = canonical_start(scene, rng), rng.uniform(0, 400)
        return scene, start, start / 4
    # Continues a prefix that is anywhere at any time (an extended video, a start image, a prompt
    # switch): the clock says nothing, so only the prefix can tell where it is.
    start = rng.uniform(0, 400)
    return scene, start, rng.uniform(0, 100)


def make_batch(cfg: TrainConfig, step: int, codec: PixelCodec) -> Batch:
    """The `Batch` of `step`, deterministic from (seed, step). `frames`: each clip's latent frames'
    indices in its video (0..F-1; for the causal variant, a clip that continues a clean first frame
    sits anywhere in a long stream). With `cfg.context_noise`, half the clips' context frames are
    noised to one level drawn up to it (they stay `context`: no loss)."""
    rng = random.Random(cfg.seed * 1_000_003 + step)
    frames_lat = rng.choice(cfg.latent_frames)
    if cfg.causal_chunk:  # the first frame alone, then whole chunks (at least two: context + generated)
        frames_lat = 1 + cfg.causal_chunk * max(2, -(-(frames_lat - 1) // cfg.causal_chunk))
    tokens_per_clip = frames_lat * (cfg.size // 8) ** 2
    batch = max(1, cfg.batch_tokens // tokens_per_clip)
    num_frames = 4 * (frames_lat - 1) + 1
    g = torch.Generator().manual_seed(cfg.seed * 7_919 + step)
    sigmas = torch.empty(batch, frames_lat)
    clips, captions = [], []
    frames = torch.arange(frames_lat, dtype=torch.float64).repeat(batch, 1)  # (B, F)
    positions = torch.arange(frames_lat, dtype=torch.float64).repeat(batch, 1) if cfg.anchor_frac > 0 else None
    # anchors draw from their own stream: the base recipe's draws stay as they were
    ra = random.Random(cfg.seed * 1_000_003 + step + 4_000_000_007)
    rl = random.Random(cfg.seed * 1_000_003 + step + 8_000_000_011)  # lost objects: their own stream too
    rb = random.Random(cfg.seed * 1_000_003 + step + 12_000_000_029)  # broken objects: and theirs
    rh = random.Random(cfg.seed * 1_000_003 + step + 16_000_000_057)  # hidden objects: and theirs
    for b in range(batch):
        sigmas[b] = _clip_sigmas(cfg, frames_lat, rng.random(), rng, g)
        scene = random_scene(rng, two_objects=cfg.two_objects)
        scene, start, clock_offset = _place_scene(scene, bool(sigmas[b, 0] > 0), rng)
        two_with_context = len(scene.objects) == 2 and bool(sigmas[b, 0] == 0) and not cfg.causal_chunk
        if cfg.occluded > 0 and two_with_context and rh.random() < cfg.occluded:
            context_end = 4 * (int((sigmas[b] == 0).sum()) - 1)  # the prefix's last pixel frame
            on_clock = clock_offset == start / 4
            hidden = hidden_start(scene, context_end, cfg.size, rh)
            if hidden is not None:  # on a render's clock still, when it was (the moving frames agree)
                clock_offset, start = hidden / 4 if on_clock else clock_offset, hidden
            elif not on_clock:  # anywhere at any time: the first object moved to where it meets the second
                scene = placed_beneath(scene, start + context_end, cfg.size, rh)
        frames[b] += clock_offset
        clip = render_scene(scene, num_frames, cfg.size, start=start)
        caption = "" if rng.random() < cfg.caption_dropout else scene.caption()
        # Before anchoring (an anchored clip's anchor frame still shows every object); only under a
        # caption, which alone says what the context lost.
        lost = caption and cfg.lost_object > 0 and bool((sigmas[b] == 0).any()) and rl.random() < cfg.lost_object
        if lost:
            clip = without_one_object(clip, scene, sigmas[b] == 0, rl.randrange(len(scene.objects)), start, cfg.size)
        elif caption and cfg.broken_object > 0 and bool((sigmas[b] == 0).any()) and rb.random() < cfg.broken_object:
            clip = with_a_broken_object(
                clip, scene, sigmas[b] == 0, rb.randrange(len(scene.objects)), start, cfg.size, rb
            )
        if positions is not None and frames_lat > 2 and not cfg.causal_chunk and bool((sigmas[b, :2] == 0).all()):
            on_clock = clock_offset == start / 4 and start >= 4  # a chained render's continuation
            if on_clock and ra.random() < cfg.anchor_frac:
                clip, frames[b, 0] = anchored(clip, scene, ra.randint(1, min(ANCHOR_LATEST, int(start // 4))), cfg.size)
                positions[b, 0] = SINK_POSITION
        clips.append(clip)
        captions.append(caption)
    video = torch.cat([uint8_to_video(c) for c in clips])  # (B, 3, T, H, W)
    latents = codec.encode(video)
    noise = torch.randn(latents.shape, generator=g)
    context = sigmas == 0
    if cfg.context_noise > 0:  # drawn from their own generator: the base recipe's batches stay as they were
        gc = torch.Generator().manual_seed(cfg.seed * 7_919 + step + 1_000_000_007)
        level = cfg.context_noise * torch.rand(batch, 1, generator=gc)
        noisy = context & (torch.rand(batch, 1, generator=gc) < 0.5)
        sigmas = torch.where(noisy, level.expand_as(sigmas), sigmas)
    return Batch(latents, sigmas, noise, captions, frames, context, positions)


HIDDEN_WITHIN = 0.35  # of the object radius: how near its centre is to the one above's


def hidden_start(scene: Scene, frame: int, size: int, rng: random.Random, horizon: int = 400) -> float | None:
    """A start in 0..`horizon`-1 at which a clip of two-object `scene` shows, at its frame `frame`,
    the first object (drawn beneath) with its centre within `HIDDEN_WITHIN` radii of the second's:
    behind it (a sliver of it showing, or none, by their shapes). Drawn at random from all such
    starts; None when the two do not meet in that time (both still, or moving side by side)."""
    below, above = scene.objects
    starts = [float(s) for s in range(horizon) if hidden_at(below, above, s + frame, size)]
    return rng.choice(starts) if starts else None


def hidden_at(below: SceneObject, above: SceneObject, frame: float, size: int) -> bool:
    """Whether `below`'s centre is within `HIDDEN_WITHIN` radii of `above`'s at `frame` (the short way
    round the frame when either wraps, as it is then drawn on both sides)."""
    (x1, y1), (x2, y2) = _position(below, frame, size), _position(above, frame, size)
    if below.motion in WRAPPING or above.motion in WRAPPING:
        x1, y1 = x2 + float(_unwrap(x1 - x2, size)), y2 + float(_unwrap(y1 - y2, size))
    return math.hypot(x1 - x2, y1 - y2) < HIDDEN_WITHIN * RADIUS * size / 64


def placed_beneath(scene: Scene, frame: float, size: int, rng: random.Random) -> Scene:
    """Two-object `scene` with its first object (drawn beneath) moved so that at its frame `frame`
    its centre is within `HIDDEN_WITHIN` radii of the second's (drawn at random in that disc),
    moving as before. A bouncing first object, or a still one the second passes only at the frame's
    edge, is left where it is."""
    below, above = scene.objects
    if below.motion == "bouncing":
        return scene
    ax, ay = _position(above, frame, size)
    rho, phi = HIDDEN_WITHIN * RADIUS * size / 64 * math.sqrt(rng.random()), rng.uniform(0, 2 * math.pi)
    tx, ty = ax + rho * math.cos(phi), ay + rho * math.sin(phi)
    mx, my = _position(dataclasses.replace(below, x0=0.0, y0=0.0), frame, size)  # its move by then
    if below.motion == "still":
        mx = my = 0.0
    moved = dataclasses.replace(below, x0=(tx - mx) / size % 1.0, y0=(ty - my) / size % 1.0)
    if not hidden_at(moved, above, frame, size):  # a still object kept inside the frame cannot reach an edge
        return scene
    return Scene((moved, above), scene.background, scene.lighting)


def without_one_object(clip, scene: Scene, context: torch.Tensor, drop: int, start: float, size: int):
    """`clip` (uint8 (T, H, W, 3), frames `start..` of `scene`) with object `drop` removed from the
    pixel frames of its `context` latent frames ((F,) bool; latent frame 0 is frame 0, latent
    frame j >= 1 frames 4j-3..4j), as the scene without that object draws them."""
    bare = render_scene(_without(scene, drop), len(clip), size, start=start)
    out = clip.copy()
    for frames in _context_frames(context):
        out[frames] = bare[frames]
    return out


def _without(scene: Scene, drop: int) -> Scene:
    """`scene` less its object `drop`."""
    return Scene(tuple(o for i, o in enumerate(scene.objects) if i != drop), scene.background, scene.lighting)


def _context_frames(context: torch.Tensor) -> list[slice]:
    """The pixel frames of the `context` latent frames ((F,) bool; latent frame 0 is frame 0,
    latent frame j >= 1 frames 4j-3..4j)."""
    return [slice(0 if j == 0 else 4 * j - 3, 4 * j + 1) for j in torch.nonzero(context).flatten().tolist()]


def _part(scene: Scene, which: int, start: float, num_frames: int, size: int, angle: float, cut: float) -> np.ndarray:
    """(T, H, W) bool: the pixels of object `which` in frames `start..` on the far side of a line
    through it (normal `angle`, `cut` pixels from its centre; measured on the frame's torus, so a
    wrapping object's pieces count with the rest of it), as the scene draws it."""
    o = scene.objects[which]
    drawn = render_scene(Scene((o,), scene.background), num_frames, size, start=start)
    ground = render_scene(Scene((), scene.background), 1, size)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    out = (drawn != ground).any(-1)
    for i in range(num_frames):
        cx, cy = _position(o, start + i, size)
        out[i] &= _unwrap(xx - cx, size) * math.cos(angle) + _unwrap(yy - cy, size) * math.sin(angle) > cut
    return out


def with_a_broken_object(clip, scene: Scene, context: torch.Tensor, which: int, start: float, size: int, rng):
    """`clip` (uint8 (T, H, W, 3), frames `start..` of `scene`) with object `which` broken in the
    pixel frames of its `context` latent frames, the way a chain breaks one at a seam: half the
    time *cut* (about 20-80% of it gone, on one side of a random line through it, drawn as what lies
    beneath: the other object, or the background), half the time *left behind* (a piece of it,
    up to half, stays where it was 8-24 frames before the clip, painted where the frame shows
    background). The frames after the context are the scene's: the object whole, the piece gone."""
    r = RADIUS * size / 64
    angle = rng.uniform(0, 2 * math.pi)
    out = clip.copy()
    frames = _context_frames(context)
    if rng.random() < 0.5:
        beneath = render_scene(_without(scene, which), len(clip), size, start=start)
        gone = _part(scene, which, start, len(clip), size, angle, rng.uniform(-0.45, 0.45) * r)
        for f in frames:
            out[f] = np.where(gone[f, ..., None], beneath[f], clip[f])
        return out
    then = start - rng.randint(8, 24)
    piece = _part(scene, which, then, 1, size, angle, rng.uniform(0.0, 0.6) * r)[0]
    ground = render_scene(Scene((), scene.background, scene.lighting), len(clip), size, start=start)
    # its colour as the clip's lighting draws it then
    earlier = render_scene(Scene((scene.objects[which],), scene.background, scene.lighting), 1, size, start=then,
                           total=len(clip) - 1)[0]  # fmt: skip
    for f in frames:
        free = piece & (clip[f] == ground[f]).all(-1)
        out[f] = np.where(free[..., None], earlier, clip[f])
    return out


# Anchors come from a shot's first segment (9 latent frames), before the frames it blends into the
# next segment: clock 1..6 (the built-in preset's `anchor_frame` is 6).
ANCHOR_LATEST = 6


def anchored(clip, scene: Scene, time: int, size: int):
    """(clip with its first frame replaced by the scene's frame at latent time `time`, that
    time): an anchored continuation. The codec reads a clip's first latent frame as that one
    frame, so the clip's latent frame 0 becomes the anchor, at its own place on the clock; the
    prefix proper (latent frames 1..P-1) and the target are unchanged."""
    out = clip.copy()
    out[0] = render_scene(scene, 1, size, start=4 * time)[0]
    return out, float(time)

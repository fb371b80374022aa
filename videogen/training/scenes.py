"""Procedural scenes for the built-in model: generator, caption grammar, parser, and detector.

A scene is one or two objects (circle, square, triangle; 8 colours), each moving left, right, up,
down, bouncing or staying still, on a plain background, optionally under a slow global lighting
change. Scenes are deterministic from a seed and can be rendered from any start time, so any
window of an endless scene is a valid training clip. Horizontal/vertical motion wraps around the
frame (leaving on the right re-enters on the left) so that direction stays measurable over
minutes of chained video.

Caption grammar (README "Built-in model"):

    caption  := object ["and" object] "on a" BG "background" [lighting]
    object   := ("a" | "an") COLOUR SHAPE motion
    motion   := "moving" ("left" | "right" | "up" | "down") | "bouncing" | "staying still"
    lighting := "getting brighter" | "getting darker"

The detector is what the evaluator uses: colour segmentation against the known palette, a
centroid track per object, the blob's radial profile for shape (nearest of the generator's own
three shapes), and the median of non-object pixels for the background.
"""

from __future__ import annotations

import functools
import math
import random
import re
from dataclasses import dataclass

import numpy as np

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (50, 80, 230),
    "yellow": (240, 220, 40),
    "white": (245, 245, 245),
    "orange": (250, 140, 30),
    "purple": (150, 60, 200),
    "cyan": (40, 210, 220),
}
BACKGROUNDS: dict[str, tuple[int, int, int]] = {
    "black": (12, 12, 12),
    "gray": (120, 120, 120),
    "white": (245, 245, 245),
    "blue": (50, 80, 230),
    "green": (40, 180, 60),
}
SHAPES = ("circle", "square", "triangle")
MOTIONS = ("left", "right", "up", "down", "bouncing", "still")
WRAPPING = ("left", "right", "up", "down")  # the motions that leave one edge and re-enter at the other
LIGHTING = ("none", "brighter", "darker")
# (colour, shape) pairs never shown in training: the evaluator's unseen combinations.
HELD_OUT = frozenset(
    {("red", "triangle"), ("blue", "circle"), ("yellow", "square"), ("cyan", "triangle"), ("purple", "circle")}
)

SPEED = 0.75  # pixels per frame at 64 px: crosses the frame in ~5 s at 16 fps
RADIUS = 13.0  # object half-size in pixels at 64 px: 26 px objects, 40% of the frame


@dataclass(frozen=True)
class SceneObject:
    colour: str
    shape: str
    motion: str
    x0: float  # start centre, in [0, 1) of the frame
    y0: float
    angle: float = 0.0  # bouncing direction, radians


@dataclass(frozen=True)
class Scene:
    objects: tuple[SceneObject, ...]
    background: str
    lighting: str = "none"

    def caption(self) -> str:
        parts = []
        for o in self.objects:
            article = "an" if o.colour[0] in "aeiou" else "a"
            motion = {"still": "staying still", "bouncing": "bouncing"}.get(o.motion, f"moving {o.motion}")
            parts.append(f"{article} {o.colour} {o.shape} {motion}")
        text = " and ".join(parts) + f" on a {self.background} background"
        if self.lighting != "none":
            text += f" getting {self.lighting}"
        return text


TWO_OBJECTS = 0.3  # the share of two-object scenes in training's mix


def random_scene(
    rng: random.Random, *, held_out: str = "exclude", max_objects: int = 2, two_objects: float = TWO_OBJECTS
) -> Scene:
    """`held_out`: "exclude" (training), "only" (unseen combinations), "any". `two_objects`: the
    chance of a second object (when `max_objects` allows one)."""
    n = 1 if max_objects == 1 or rng.random() < 1.0 - two_objects else 2
    background = rng.choice(list(BACKGROUNDS))
    objects: list[SceneObject] = []
    for _ in range(n):
        while True:
            colour, shape = rng.choice(list(PALETTE)), rng.choice(SHAPES)
            if colour == background or any(o.colour == colour for o in objects):
                continue
            unseen = (colour, shape) in HELD_OUT
            if (held_out == "exclude" and unseen) or (held_out == "only" and not unseen):
                continue
            break
        # Bouncing runs diagonally (30-60 degrees off the axes) so it never looks like a straight move.
        angle = math.pi / 4 + rng.randrange(4) * math.pi / 2 + rng.uniform(-0.26, 0.26)
        objects.append(SceneObject(colour, shape, rng.choice(MOTIONS), rng.random(), rng.random(), angle))
    lighting = rng.choice(LIGHTING) if rng.random() < 0.2 else "none"
    return Scene(tuple(objects), background, lighting)


def canonical_start(scene: Scene, rng: random.Random, jitter: float = 0.06) -> Scene:
    """`scene` with every object moved to the start position its motion implies, +-`jitter`:
    moving right starts in the left quarter, left in the right quarter, up near the bottom, down
    near the top, still and bouncing in the middle; a second object sits on the other side of the
    cross axis (0.3 / 0.7). A fresh video of a caption then has one likely layout, not a uniform
    spread over the frame: that is what a small model can learn to draw from pure noise (given a
    uniform spread, its denoiser predicts the average, which holds no object). Where the seed puts
    the object within the jitter, and every later position, still vary; continuations start
    wherever the previous segment left off."""
    objects = []
    for i, o in enumerate(scene.objects):
        cross = 0.5 if len(scene.objects) == 1 else (0.3, 0.7)[i]
        x, y = {"right": (0.25, cross), "left": (0.75, cross), "up": (cross, 0.75), "down": (cross, 0.25)}.get(
            o.motion, (cross, 0.5)
        )
        x += rng.uniform(-jitter, jitter)
        y += rng.uniform(-jitter, jitter)
        objects.append(SceneObject(o.colour, o.shape, o.motion, x, y, o.angle))
    return Scene(tuple(objects), scene.background, scene.lighting)


def parse_caption(text: str) -> Scene:
    """The inverse of `Scene.caption` (positions unknown: set to the centre)."""
    t = " ".join(re.findall(r"[a-z]+", text.lower()))
    m = re.fullmatch(r"(?P<objs>.+?) on a (?P<bg>\w+) background(?: getting (?P<light>brighter|darker))?", t)
    if not m or m["bg"] not in BACKGROUNDS:
        raise ValueError(f"caption {text!r} does not follow the built-in grammar")
    objects = []
    for part in m["objs"].split(" and "):
        om = re.fullmatch(r"an? (\w+) (\w+) (?:moving (left|right|up|down)|(bouncing)|staying (still))", part)
        if not om or om[1] not in PALETTE or om[2] not in SHAPES:
            raise ValueError(f"caption {text!r}: cannot read object {part!r}")
        objects.append(SceneObject(om[1], om[2], om[3] or om[4] or om[5], 0.5, 0.5))
    return Scene(tuple(objects), m["bg"], m["light"] or "none")


def _position(o: SceneObject, t: float, size: int) -> tuple[float, float]:
    """Centre in pixels at frame t (16 fps), for a frame of `size` pixels."""
    d = SPEED * t * size / 64
    x, y = o.x0 * size, o.y0 * size
    if o.motion == "left":
        x -= d
    elif o.motion == "right":
        x += d
    elif o.motion == "up":
        y -= d
    elif o.motion == "down":
        y += d
    elif o.motion == "still":  # kept whole inside the frame
        r = RADIUS * size / 64
        return min(max(x, r), size - r), min(max(y, r), size - r)
    elif o.motion == "bouncing":
        r = RADIUS * size / 64
        span = size - 2 * r
        x = r + _reflect(x - r + d * math.cos(o.angle), span)
        y = r + _reflect(y - r + d * math.sin(o.angle), span)
        return x, y
    return x % size, y % size


def _reflect(v: float, span: float) -> float:
    v = v % (2 * span)
    return v if v <= span else 2 * span - v


def _mask(shape: str, cx, cy, r: float, yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
    """Inside `shape` of half-size `r` centred at (cx, cy): scalars, or (T, 1, 1) arrays for T frames."""
    dx, dy = xx - cx, yy - cy
    if shape == "circle":
        return dx * dx + dy * dy <= r * r
    if shape == "square":
        return (np.abs(dx) <= r * 0.9) & (np.abs(dy) <= r * 0.9)
    # triangle pointing up: apex at (cx, cy - r), base at cy + r
    inside_y = (dy >= -r) & (dy <= r)
    half_width = (dy + r) / 2 * 1.1
    return inside_y & (np.abs(dx) <= half_width)


def render_scene(
    scene: Scene, num_frames: int, size: int = 64, start: float = 0.0, total: float | None = None
) -> np.ndarray:
    """Frames `start .. start+num_frames-1` of `scene`, uint8 (T, size, size, 3). `total` is the
    length over which a lighting change runs (default: this clip). All frames at once (a training
    batch draws ~100 of them a step): each frame is exactly the one a clip of that frame alone gives."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5  # (H, W) pixel centres
    bg = np.array(BACKGROUNDS[scene.background])
    total = total or max(num_frames - 1, 1)
    r = RADIUS * size / 64
    times = [start + i for i in range(num_frames)]
    # (T, H, W, 3): integer colours stay exact in uint8; a lighting change needs float32
    frames = np.empty((num_frames, size, size, 3), np.float32 if scene.lighting != "none" else np.uint8)
    frames[:] = bg
    for o in scene.objects:
        centres = np.array([_position(o, t, size) for t in times])  # (T, 2) float64, as the scalar maths
        m = np.zeros((num_frames, size, size), bool)
        wrap = o.motion in WRAPPING
        offsets = (-size, 0, size) if wrap else (0,)
        for ox in offsets:
            for oy in offsets:
                # float64 centre + offset, then float32 against the float32 grid (as a Python float is)
                cx, cy = (centres[:, 0] + ox).astype(np.float32), (centres[:, 1] + oy).astype(np.float32)
                # only the frames whose copy can reach into the frame (every shape fits in 1.1 r)
                near = (np.abs(cx - size / 2) <= size / 2 + 1.2 * r) & (np.abs(cy - size / 2) <= size / 2 + 1.2 * r)
                if near.any():
                    m[near] |= _mask(o.shape, cx[near, None, None], cy[near, None, None], r, yy, xx)
        frames[m] = PALETTE[o.colour]
    if scene.lighting != "none":
        k = np.clip(np.array(times) / total, 0.0, 1.0)
        gain = 0.65 + 0.35 * k if scene.lighting == "brighter" else 1.0 - 0.35 * k
        frames *= gain.astype(np.float32).reshape(-1, 1, 1, 1)
        return np.clip(frames, 0, 255).round().astype(np.uint8)
    return frames


# ---------------------------------------------------------------- detector (for the evaluator)


@dataclass(frozen=True)
class Track:
    colour: str
    present: np.ndarray  # (T,) bool: object found in the frame
    centroid: np.ndarray  # (T, 2) x, y (NaN where absent)
    profile: np.ndarray  # (T, PROFILE_BINS) radial profile (`radial_profile`; NaN where absent)


def colour_mask(frames: np.ndarray, rgb: tuple[int, int, int], tol: float = 45.0) -> np.ndarray:
    """Pixels that are `rgb` under some global gain in [0.58, 1.15] (a lighting change dims the
    whole frame by at most 0.65), within `tol` RGB units after the gain."""
    f = frames.astype(np.float32)
    target = np.array(rgb, np.float32)
    gain = np.clip((f @ target) / float(target @ target), 0.0, 2.0)
    residual = np.linalg.norm(f - gain[..., None] * target, axis=-1)
    return (residual < tol) & (gain > 0.58) & (gain < 1.15)


def track_colour(frames: np.ndarray, colour: str, min_pixels: int = 12) -> Track:
    mask = colour_mask(frames, PALETTE[colour])
    t = len(frames)
    present = np.zeros(t, bool)
    centroid = np.full((t, 2), np.nan)
    profile = np.full((t, PROFILE_BINS), np.nan)
    size = frames.shape[1]
    for i in range(t):
        ys, xs = np.nonzero(mask[i])
        if len(xs) < min_pixels:
            continue
        present[i] = True
        # Circular mean: objects that wrap around the frame stay one blob.
        ang_x, ang_y = xs / size * 2 * np.pi, ys / size * 2 * np.pi
        cx = (np.arctan2(np.sin(ang_x).mean(), np.cos(ang_x).mean()) % (2 * np.pi)) / (2 * np.pi) * size
        cy = (np.arctan2(np.sin(ang_y).mean(), np.cos(ang_y).mean()) % (2 * np.pi)) / (2 * np.pi) * size
        centroid[i] = cx, cy
        # Offsets from the centroid the short way round (a wrapping blob stays whole).
        profile[i] = radial_profile(_unwrap(xs - cx, size), _unwrap(ys - cy, size))
    return Track(colour, present, centroid, profile)


PROFILE_BINS = 16


def radial_profile(dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """A blob's shape, from its pixels' offsets to its centroid: in each of PROFILE_BINS angular
    sectors, the 90th percentile of the pixels' distances (how far the blob reaches that way, not
    swayed by one stray pixel or notch), divided by the mean over the sectors (size-free). An
    axis-aligned square reaches 1.1x its mean towards its corners and 0.9x towards its sides, a
    circle 1.0x everywhere, the upward triangle 1.35x at its apex and base corners; the three
    generator shapes lie >= 0.41 apart (L2), while ragged edges (each boundary pixel replaced,
    with probability 1/2, by a random pixel of its 3x3 neighbourhood) move a profile ~0.05-0.1."""
    sector = (((np.arctan2(dy, dx) + np.pi) / (2 * np.pi) * PROFILE_BINS).astype(int)) % PROFILE_BINS
    dist = np.hypot(dx, dy)
    reach = np.array(
        [np.percentile(dist[sector == k], 90) if (sector == k).any() else 0.0 for k in range(PROFILE_BINS)]
    )
    mean = reach.mean()
    return reach / mean if mean > 0 else reach


@functools.lru_cache(maxsize=8)
def shape_profiles(size: int = 64) -> dict[str, np.ndarray]:
    """The radial profile of each generator shape, drawn by the generator itself (`_mask`)."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    out = {}
    for shape in SHAPES:
        ys, xs = np.nonzero(_mask(shape, size / 2, size / 2, RADIUS * size / 64, yy, xx))
        out[shape] = radial_profile(xs - xs.mean(), ys - ys.mean())
    return out


def classify_shape(track: Track) -> str:
    """The generator shape nearest (L2) to the track's median radial profile over the frames it
    is present in ("none" if it never is). Unlike the blob's fill ratio (area / bounding box:
    square 1.0, circle 0.785, triangle ~0.55), which ragged edges pull down by 0.05-0.15 until a
    square reads as a circle, the profile looks at where the blob reaches: corners or not."""
    if not track.present.any():
        return "none"
    profile = np.median(track.profile[track.present], axis=0)
    templates = shape_profiles()
    return min(templates, key=lambda shape: float(np.linalg.norm(profile - templates[shape])))


def _unwrap(d: np.ndarray, size: int) -> np.ndarray:
    """Displacements taken the short way round a frame that wraps (motion leaves one edge and
    re-enters at the other): into [-size/2, size/2)."""
    return (d + size / 2) % size - size / 2


def classify_motion(track: Track, size: int, stride: int = 16) -> str:
    """The track's motion, from centroid displacements between frames `stride` apart (1 s at 16
    fps; per frame). Over a second a real motion (0.75 px/frame: 12 px) stands well clear of a
    pixel of jitter, and a model that moves an object in steps of a latent frame (4 frames; per-
    frame steps 0, 0, 0, 3) is read by its direction. Smoothness is not this function's question."""
    i = np.nonzero(track.present[:-stride] & track.present[stride:])[0]
    if len(i) < 4:
        return "unknown"
    steps = _unwrap(track.centroid[i + stride] - track.centroid[i], size) / stride
    # Medians: robust to a few frames where another object occludes this one.
    typical = np.median(np.abs(steps), axis=0)  # (|dx|, |dy|) per frame
    scale = size / 64
    if typical.max() < 0.15 * scale:
        return "still"
    if typical.min() > 0.2 * scale:  # both axes move: only bouncing does that
        return "bouncing"
    dx, dy = np.median(steps, axis=0)
    if typical[0] >= typical[1]:
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


def motion_smoothness(track: Track, size: int, group: int = 4) -> float | None:
    """How evenly a moving object's motion is spread over frames, in [0, 1]: per run of `group`
    consecutive frame steps (a latent frame's worth), the largest step's share of the run's path,
    mapped so that an even spread (each step 1/`group`) is 1 and the whole run in one step (the
    object moves once per latent frame, 4 Hz stutter at 16 fps) is 0; the mean over runs that
    move at least half a pixel. None when no run moves."""
    steps = np.linalg.norm(_unwrap(np.diff(track.centroid, axis=0), size), axis=1)  # NaN where the object is missing
    shares = []
    for i in range(0, len(steps) - group + 1, group):
        run = steps[i : i + group]
        if np.isfinite(run).all() and run.sum() >= 0.5:
            shares.append(run.max() / run.sum())
    if not shares:
        return None
    even = 1 / group
    return float(np.clip((1 - np.mean(shares)) / (1 - even), 0.0, 1.0))


def classify_background(frames: np.ndarray, objects: list[str]) -> str:
    sample = frames[:: max(1, len(frames) // 8)].reshape(-1, 3).astype(np.float32)
    keep = np.ones(len(sample), bool)
    for colour in objects:
        keep &= ~colour_mask(sample[None], PALETTE[colour])[0]
    median = np.median(sample[keep] if keep.any() else sample, axis=0)

    def residual(name: str) -> float:  # distance after the best global gain a lighting change allows
        c = np.array(BACKGROUNDS[name], np.float32)
        gain = float(np.clip(median @ c / (c @ c), 0.6, 1.15))
        return float(np.linalg.norm(median - gain * c))

    return min(BACKGROUNDS, key=residual)

"""The segment health gate: cheap, model-agnostic checks on a freshly denoised segment (or stream
chunk) before it is written, and the deterministic noise of a re-sampling.

It lives in `sampling`, below both `rendering` and `streaming` (peers that must not import each
other), beside `segment_noise`, whose stream the retries extend. The checks read only pixel and
latent statistics, so they serve every model; their thresholds are the preset's
(`videogen.config.presets.HealthConfig`).

A segment's new frames (those after its clean prefix) are compared with the previous segment of
its shot and the shot's anchor (first) segment:

* `nonfinite`: the latents hold NaN/Inf (the denoising loop raises `NonFiniteLatents`; the caller
  reports it as this check);
* `black` / `blown`: a share of its frames is nearly all dark / all white;
* `frozen`: the frames stop changing while the previous segment moved (a "staying still" prompt
  moves little in both, so the judgement is relative, never absolute);
* `seam_jump`: the colour histogram jumps where the prefix hands over to new frames, far more
  than it steps between frames inside the segment;
* `content_loss`: the foreground (pixels far from the dominant border colour) collapses against
  the previous segment's or the anchor's, or the colour histogram moves far from the previous
  segment's (a shot keeps its prompt, so its colours hold);
* `copies`: more copies of one colour than the shot's anchor segment shows (separate foreground
  components of a like mean colour, connected on the frame's torus so that an object wrapping
  round an edge is one), or the foreground shrunk well below the anchor's, in more than a small
  share of the new frames: an object split in two, doubled at a seam, or lost. It suits scenes of
  a few distinct objects on a plain background (the built-in model's); real footage's foreground
  is not a countable set of blobs, so the Wan presets leave it off.
* `colours`: a foreground colour the previous segment showed (`colour_palette`: its flat colours
  of at least an object's share of the frame) all but vanishes from a share of the new frames:
  one of two objects lost while the other smears over the frame, or two objects merged into one
  colour, which the foreground mass and the copy count do not see. Judged against the previous
  segment, not the anchor: a colour already lost before this seam is no reason to re-sample (no
  attempt brings it back from a prefix without it), the seam where it goes is. Like `copies`, it
  is for flat scenes; the Wan presets leave it off.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from videogen.config.presets import HealthConfig
from videogen.errors import NonFiniteLatents
from videogen.sampling.loop import Preview, StepProgress, segment_noise

_BINS = 4  # histogram bins per RGB channel: coarse, so noise and small motion barely move it


def attempt_noise(shape: tuple[int, ...], seed: int, segment: int, attempt: int) -> torch.Tensor:
    """The noise of `attempt` at a segment (or chunk): attempt 0 is `segment_noise` exactly, so a
    render whose segments all pass is today's; later attempts draw from a seed derived from
    (seed, segment, attempt) alone, so a retried render is the same every time."""
    if attempt == 0:
        return segment_noise(shape, seed, segment)
    digest = hashlib.sha256(f"videogen-retry:{seed}:{segment}:{attempt}".encode()).digest()
    g = torch.Generator(device="cpu").manual_seed(int.from_bytes(digest[:8], "little") % (2**63 - 1))
    return torch.randn(shape, generator=g, dtype=torch.float32)


def torus_components(mask: np.ndarray) -> np.ndarray:
    """8-connected component labels of `(T, H, W)` masks on the torus (the left edge touches the
    right, the top the bottom): 0 outside the mask. Max-label propagation over 3x3 neighbourhoods
    until nothing changes (about a blob's diameter of rounds), on the frames still changing."""
    t, h, w = mask.shape
    dtype = np.uint16 if h * w < 2**16 else np.int32
    labels = np.where(mask, np.arange(1, h * w + 1, dtype=dtype).reshape(1, h, w), 0).astype(dtype)  # (T, H, W)
    active = np.arange(t)
    for _ in range(h * w):
        cur, m = labels[active], mask[active]
        grown = np.maximum(cur, np.maximum(np.roll(cur, 1, 2), np.roll(cur, -1, 2)))
        grown = np.maximum(grown, np.maximum(np.roll(grown, 1, 1), np.roll(grown, -1, 1)))
        grown *= m
        changed = (grown != cur).any(axis=(1, 2))
        labels[active] = grown
        active = active[changed]
        if not len(active):
            break
    return labels


_PALETTE_SIZE = 4  # at most this many foreground colours are followed
ObjectEntry = tuple[float, float, float, float, float]  # `SegmentStats.objects`: r, g, b, share, copies
OBJECT_SHARE = 2.0  # an anchor's colour is an object's where it holds this many `object_area`s of the frame


def _foreground_pixels(frames: np.ndarray, distance: float) -> tuple[np.ndarray, np.ndarray]:
    """((T, H, W, 3) int16 frames, (T, H, W) bool foreground: farther than `distance` from the
    border's median colour)."""
    f = frames.astype(np.int16)
    border = np.concatenate([f[:, 0], f[:, -1], f[:, :, 0], f[:, :, -1]], axis=1)  # (T, 2H+2W, 3)
    return f, ~_near(f, np.median(border, axis=1)[:, None, :], distance)[..., 0]


def _near(f: np.ndarray, colours: np.ndarray, distance: float) -> np.ndarray:
    """(T, H, W, K) whether each pixel of the (T, H, W, 3) int16 frames `f` is within `distance`
    (max channel) of each colour: `colours` (K, 3), or (T, K, 3) per frame. Compared in integers
    against each channel's bounds (exactly |f - c| <= distance), not in floats: several times
    faster on a segment's frames."""
    c = np.asarray(colours, dtype=np.float64)
    c = c[:, None, None] if c.ndim == 3 else c[None, None, None]  # (T or 1, 1, 1, K, 3)
    lo = np.ceil(c - distance).clip(-(2**15), 2**15 - 1).astype(np.int16)
    hi = np.floor(c + distance).clip(-(2**15), 2**15 - 1).astype(np.int16)
    near = np.ones(f.shape[:3] + c.shape[-2:-1], dtype=bool)
    for ch in range(3):  # per channel, on (T, H, W, K) planes: a reduction over a last axis of 3 is slow
        x = f[:, :, :, ch, None]
        near &= (x >= lo[..., ch]) & (x <= hi[..., ch])
    return near


def colour_copies(frames: np.ndarray, distance: float, min_area: float, max_side: int = 128) -> np.ndarray:
    """(T,) the most separate copies of one colour each frame `(T, H, W, 3)` uint8 shows. The
    foreground is the pixels farther than `distance` (max channel) from the border's median
    colour; its components (8-connected, on the torus) of at least `min_area` of the frame are
    grouped by mean colour (within `distance`), and the largest group is counted. An object split
    in two or doubled is two components of its colour; two objects of different colours, touching
    or apart, are one copy each; pieces within two pixels of each other are one component. Frames are subsampled to at most `max_side` pixels a side first
    (the labelling takes about an object's diameter of passes)."""
    step = max(1, -(-max(frames.shape[1:3]) // max_side))
    f, mask = _foreground_pixels(frames[:, ::step, ::step], distance)  # (T, H, W, 3), (T, H, W)
    # Pieces a pixel or two apart are one object with a ragged edge (a notch, or a wrapped edge
    # that missed the last column): label the mask grown by one pixel, count the mask's own pixels.
    grown = mask | np.roll(mask, 1, 1) | np.roll(mask, -1, 1)
    grown = grown | np.roll(grown, 1, 2) | np.roll(grown, -1, 2)
    labels = torus_components(grown) * mask
    t, h, w = mask.shape
    counts = np.zeros(t, dtype=np.int64)
    for i in range(t):
        ids, sizes = np.unique(labels[i][mask[i]], return_counts=True)
        ids = ids[sizes >= min_area * h * w]
        if not len(ids):
            continue
        means = np.stack([f[i][labels[i] == k].mean(0) for k in ids])  # (K, 3)
        close = np.abs(means[:, None] - means[None]).max(-1) <= distance  # (K, K)
        counts[i] = int(close.sum(1).max())
    return counts


def colour_shares(frames: np.ndarray, palette: np.ndarray, distance: float) -> np.ndarray:
    """(T, K): the share of each frame's pixels that are foreground and within `distance` (max
    channel) of each of the K `palette` colours (K, 3)."""
    return _shares(*_foreground_pixels(frames, distance), palette, distance)


def _shares(f: np.ndarray, fg: np.ndarray, palette: np.ndarray, distance: float) -> np.ndarray:
    """`colour_shares` of frames already split by `_foreground_pixels` into (`f`, `fg`)."""
    return (_near(f, palette[:, :3], distance) & fg[..., None]).mean((1, 2))


def colour_palette(
    frames: np.ndarray, distance: float, min_share: float
) -> tuple[tuple[float, float, float, float], ...]:
    """The flat foreground colours of `frames` (T, H, W, 3) uint8, most common first: (r, g, b,
    median share of a frame's pixels within `distance` of it), each held by at least `min_share` of
    the frame in most frames. Greedy: the commonest coarse colour among the foreground pixels not
    yet taken, refined to the median of the pixels near it. A colour between the background and a
    colour taken (an anti-aliased edge), between two taken ones, or a darkening of one taken (a
    shaded side) is no entry."""
    f, fg = _foreground_pixels(frames, distance)
    pixels = f[fg]  # (N, 3)
    border = np.concatenate([f[:, 0], f[:, -1], f[:, :, 0], f[:, :, -1]], axis=1).reshape(-1, 3)
    ends = [np.median(border, axis=0)]  # the background, then each colour taken
    out: list[tuple[float, float, float, float]] = []
    while len(pixels) and len(out) < _PALETTE_SIZE:
        q = pixels // 32
        codes, counts = np.unique((q[:, 0] * 8 + q[:, 1]) * 8 + q[:, 2], return_counts=True)
        code = int(codes[counts.argmax()])
        seed = np.array([code // 64, (code // 8) % 8, code % 8]) * 32 + 16
        centre = np.median(pixels[np.abs(pixels - seed).max(-1) <= distance], axis=0)
        share = float(np.median(_shares(f, fg, centre[None], distance)[:, 0]))  # the split made once above
        if share < min_share:
            break
        pixels = pixels[np.abs(pixels - centre).max(-1) > distance]
        # An anti-aliased edge is a blend of an object's colour with the background (or with the
        # object it touches), a shaded side the object's colour darkened: a colour on the line
        # between two taken ones, or between a taken one and black, is not an object's.
        lines = [(a, b) for i, a in enumerate(ends) for b in ends[i + 1 :]] + [(np.zeros(3), c) for c in ends[1:]]
        if not any(_off_line(centre, a, b) <= distance / 2 for a, b in lines):
            out.append((float(centre[0]), float(centre[1]), float(centre[2]), share))
            ends.append(centre)
    return tuple(out)


def _off_line(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """How far (max channel) colour `c` lies from the segment between colours `a` and `b`."""
    d = b - a
    t = float(np.clip((c - a) @ d / max(float(d @ d), 1e-6), 0.0, 1.0))
    return float(np.abs(c - (a + t * d)).max())


def object_counts(frames: np.ndarray, colours: np.ndarray, distance: float, min_area: float,
                  max_side: int = 128, with_alone: bool = False) -> tuple[np.ndarray, ...]:  # fmt: skip
    """Per frame of `frames` (T, H, W, 3) uint8 and per colour of `colours` (K, 3): how many
    separate objects of that colour it shows, and the share of the frame in that colour, each
    (T, K). An object is a component (8-connected, on the torus; pieces within two pixels joined)
    of the foreground pixels within `distance` of any of the colours, holding at least `min_area`
    of the frame in this colour: an object passing in front of another does not cut it in two,
    and two objects of one colour are two. Subsampled to at most `max_side` pixels a side.
    `with_alone`: a third (T, K) array, whether the colour shows in a component holding none of
    the colours before it (False throughout: a shade or edge of an earlier colour's object)."""
    step = max(1, -(-max(frames.shape[1:3]) // max_side))
    f, fg = _foreground_pixels(frames[:, ::step, ::step], distance)
    near = _near(f, colours, distance) & fg[..., None]
    body = near.any(-1)  # (T, H, W)
    grown = body | np.roll(body, 1, 1) | np.roll(body, -1, 1)
    grown = grown | np.roll(grown, 1, 2) | np.roll(grown, -1, 2)
    labels = (torus_components(grown) * body).astype(np.int64)
    t, h, w, k = near.shape
    counts = np.zeros((t, k), dtype=np.int64)
    alone = np.zeros((t, k), dtype=bool)  # the colour shows in a component no earlier colour is in
    earlier = np.zeros(0, dtype=np.int64)
    for j in range(k):
        frame_of = np.nonzero(near[..., j])[0]
        keys, sizes = np.unique(frame_of * (h * w + 1) + labels[near[..., j]], return_counts=True)
        counts[:, j] = np.bincount(keys[sizes >= min_area * h * w] // (h * w + 1), minlength=t)
        alone[np.unique(keys[~np.isin(keys, earlier)] // (h * w + 1)), j] = True
        earlier = np.union1d(earlier, keys)
    if with_alone:
        return counts, near.mean((1, 2)), alone
    return counts, near.mean((1, 2))


def object_stats(frames: np.ndarray, colours: np.ndarray, config: HealthConfig
                 ) -> tuple[tuple[ObjectEntry, ...], np.ndarray, np.ndarray]:  # fmt: skip
    """`SegmentStats.objects` of `frames` for the flat `colours` (K, 3), with the (T, K) counts
    and shares it was taken from."""
    counts, shares = object_counts(frames, colours, config.foreground_distance, config.object_area)[:2]
    return _objects(colours, counts, shares), counts, shares


def _objects(colours: np.ndarray, counts: np.ndarray, shares: np.ndarray) -> tuple[ObjectEntry, ...]:
    return tuple((float(c[0]), float(c[1]), float(c[2]), float(s), float(n))
                 for c, s, n in zip(colours, np.median(shares, 0), np.median(counts, 0)))  # fmt: skip


def anchor_objects(frames: np.ndarray, config: HealthConfig) -> tuple[ObjectEntry, ...]:
    """The objects a shot's first segment `frames` shows (`SegmentStats.objects`): its flat
    colours (`colour_palette`) that make an object of their own in most frames: at least
    `OBJECT_SHARE` object areas of the frame, one component or more, and not a shade or ragged edge
    (a colour under half the share of one before it that shows attached to an earlier colour's
    object in most frames)."""
    palette = colour_palette(frames, config.foreground_distance, config.object_area)
    colours = np.asarray([c[:3] for c in palette], dtype=np.float64).reshape(-1, 3)
    counts, shares, alone = object_counts(frames, colours, config.foreground_distance, config.object_area,
                                          with_alone=True)  # fmt: skip
    share = np.median(shares, 0)
    # Attached in most frames and much smaller than a colour before it: a shade or an edge (two
    # objects of a size that touch all along stay two).
    part = (alone.mean(0) <= 0.5) & (share < 0.5 * np.maximum.accumulate(np.r_[0.0, share[:-1]]))
    keep = (np.median(counts, 0) >= 1) & (share >= OBJECT_SHARE * config.object_area) & ~part
    if not keep.all():  # counted again without the colours left out: they no longer join objects
        return object_stats(frames, colours[keep], config)[0]
    return _objects(colours, counts, shares)


@dataclass(frozen=True)
class SegmentStats:
    """What later segments of a shot are compared with (plain floats: it is checkpointed)."""

    motion: float  # median mean-absolute step between consecutive new frames (0..255)
    foreground: float  # low (20th) percentile of the per-frame foreground share
    histogram: tuple[float, ...]  # mean colour histogram of the new frames, gain-normalised (sums to 1)
    copies: float = -1.0  # median `colour_copies` of the new frames (-1: not counted)
    palette: tuple[tuple[float, float, float, float], ...] = ()  # `colour_palette` (empty: not taken)
    # The `objects` check's: per flat colour (r, g, b, median share of a frame, median copies). A
    # shot's first segment takes its own `colour_palette`; a later one is counted in its anchor's
    # colours (empty: not taken).
    objects: tuple[ObjectEntry, ...] = ()

    def to_dict(self) -> dict:
        return {"motion": self.motion, "foreground": self.foreground, "histogram": list(self.histogram),
                "copies": self.copies, "palette": [list(c) for c in self.palette],
                "objects": [list(o) for o in self.objects]}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> SegmentStats:
        palette = tuple((float(r), float(g), float(b), float(a)) for r, g, b, a in d.get("palette", ()))
        objects = tuple((float(r), float(g), float(b), float(a), float(n)) for r, g, b, a, n in d.get("objects", ()))
        return cls(float(d["motion"]), float(d["foreground"]), tuple(float(x) for x in d["histogram"]),
                   float(d.get("copies", -1.0)), palette, objects)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """One attempt's result: the checks it failed and by how much (`severity`: the sum of each
    failed check's ratio past its threshold; a NaN attempt is infinitely bad)."""

    failed: tuple[str, ...] = ()
    severity: float = 0.0
    stats: SegmentStats | None = None
    details: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def score(self) -> tuple[int, float]:
        """Lower is better: fewest failed checks, then least severe (the best attempt is kept)."""
        return len(self.failed), self.severity

    def beyond(self, margin: float) -> Verdict:
        """This verdict with only the checks more than `margin` times past their thresholds failed
        (`nonfinite`, which has no ratio, always): a ladder's early looks judge this way."""
        if margin <= 1.0:
            return self
        failed = tuple(c for c in self.failed if self.details.get(c, math.inf) > margin)
        return replace(self, failed=failed, severity=float(sum(self.details.get(c, math.inf) - 1.0 for c in failed)))


NONFINITE = Verdict(("nonfinite",), float("inf"))


def histograms(frames: np.ndarray) -> np.ndarray:
    """(T, H, W, 3) uint8 -> (T, BINS**3) per-frame colour histograms, each summing to 1."""
    q = (frames.astype(np.int32) * _BINS) >> 8
    codes = ((q[..., 0] * _BINS + q[..., 1]) * _BINS + q[..., 2]).reshape(len(frames), -1)
    counts = np.stack([np.bincount(c, minlength=_BINS**3) for c in codes]).astype(np.float64)
    return counts / codes.shape[1]


def _tv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return 0.5 * np.abs(a - b).sum(-1)


def foreground_share(frames: np.ndarray, distance: float) -> np.ndarray:
    """(T,) share of each frame's pixels farther than `distance` (max channel) from the dominant
    border colour, the background estimate (the border's median colour)."""
    return _foreground_pixels(frames, distance)[1].mean((1, 2))


def segment_stats(frames: np.ndarray, config: HealthConfig, copies: np.ndarray | None = None) -> SegmentStats:
    """`frames`: a segment's new frames (T, H, W, 3) uint8; `copies`: their `colour_copies` when
    already counted (they are counted here when the `copies` check is on)."""
    return _stats_and_foreground(frames, config, copies)[0]


def _stats_and_foreground(frames: np.ndarray, config: HealthConfig, copies: np.ndarray | None,
                          objects: tuple[ObjectEntry, ...] | None = None,
                          ) -> tuple[SegmentStats, np.ndarray]:  # fmt: skip
    """`segment_stats` and the (T,) per-frame `foreground_share` it was taken from (`objects`:
    already counted in an anchor's colours)."""
    if copies is None and "copies" in config.checks:
        copies = colour_copies(frames, config.foreground_distance, config.object_area)
    steps = np.abs(np.diff(frames.astype(np.int16), axis=0)).mean((1, 2, 3)) if len(frames) > 1 else np.zeros(1)
    fg = foreground_share(frames, config.foreground_distance)
    # A global lighting change ("getting darker") is a gain on every pixel, not lost content: the
    # histogram is taken of each frame scaled to a common mean brightness.
    gain = 128.0 / np.maximum(frames.reshape(len(frames), -1).mean(1), 1.0)
    levelled = np.clip(frames * gain[:, None, None, None], 0, 255).astype(np.uint8)
    palette = (colour_palette(frames, config.foreground_distance, config.object_area)
               if "colours" in config.checks else ())  # fmt: skip
    if objects is None and "objects" in config.checks:
        objects = anchor_objects(frames, config)
    stats = SegmentStats(float(np.median(steps)), float(np.percentile(fg, 20)),
                         tuple(histograms(levelled).mean(0).tolist()),
                         -1.0 if copies is None else float(np.median(copies)), palette, objects or ())  # fmt: skip
    return stats, fg


def check_segment(frames: np.ndarray, prefix_frames: int, previous: SegmentStats | None,
                  anchor: SegmentStats | None, config: HealthConfig) -> Verdict:  # fmt: skip
    """Judge a decoded segment `frames` (T, H, W, 3) uint8 whose first `prefix_frames` show its
    clean prefix (0: a fresh start), against its shot's `previous` and `anchor` segments (None:
    none yet). NaN latents never get here (`NONFINITE`)."""
    new = frames[prefix_frames:] if len(frames) > prefix_frames else frames
    counts = colour_copies(new, config.foreground_distance, config.object_area) if "copies" in config.checks else None
    reference = anchor if anchor is not None else previous
    objects, per_object = None, None
    if "objects" in config.checks and reference is not None and reference.objects:
        ref = np.asarray(reference.objects, dtype=np.float64)  # (K, 5)
        objects, n, share = object_stats(new, ref[:, :3], config)
        # An object split or doubled (more copies of its colour than the reference shows), or all
        # but gone (its colour below `vanished` of its share there; one hidden behind another
        # object keeps a sliver).
        per_object = ((n > np.round(ref[:, 4])) | (share < config.vanished * ref[:, 3])).any(1)
    stats, foreground = _stats_and_foreground(new, config, counts, objects)
    ratios: dict[str, float] = {}  # check -> how far past its threshold (> 1: failed)
    if "black" in config.checks or "blown" in config.checks:
        # Per channel (every channel below the dark level, above the bright one): a reduction over
        # a last axis of 3 is slow.
        r, g, b = new[..., 0], new[..., 1], new[..., 2]
        dark = ((r < config.dark_level) & (g < config.dark_level) & (b < config.dark_level)).mean((1, 2))
        bright = ((r > config.bright_level) & (g > config.bright_level) & (b > config.bright_level)).mean((1, 2))
        dark, bright = dark >= config.empty_fraction, bright >= config.empty_fraction
        ratios["black"] = dark.mean() / config.bad_frames
        ratios["blown"] = bright.mean() / config.bad_frames
    if previous is not None and previous.motion >= config.frozen_floor:
        ratios["frozen"] = config.frozen_ratio * previous.motion / max(stats.motion, 1e-6)
    if prefix_frames > 0 and len(frames) > prefix_frames + 1:
        ratios["seam_jump"] = _seam_ratio(frames, prefix_frames, config)
    ratios["content_loss"] = _content_ratio(stats, previous, anchor, config)
    if per_object is not None:
        ratios["objects"] = float(per_object.mean()) / config.copies_fraction
    if counts is not None and reference is not None and reference.copies >= 0:
        # Against the anchor, not the previous segment: a split that got through must not become
        # the norm, and the best of the attempts is the one closest to the shot's own count. A lost
        # object shows as foreground that shrank well below the anchor's.
        lost = foreground < config.lost_share * reference.foreground
        wrong = (counts > round(reference.copies)) | lost
        ratios["copies"] = float(wrong.mean()) / config.copies_fraction
    if "colours" in config.checks and previous is not None and previous.palette:
        # A colour of the previous segment all but gone (below `lost_colour` of its share there).
        palette = np.asarray(previous.palette)  # (K, 4)
        shares = colour_shares(new, palette[:, :3], config.foreground_distance)  # (T, K)
        gone = (shares < config.lost_colour * palette[None, :, 3]).any(1)
        ratios["colours"] = float(gone.mean()) / config.copies_fraction
    failed = tuple(c for c in config.checks if ratios.get(c, 0.0) > 1.0)
    return Verdict(failed, float(sum(ratios[c] - 1.0 for c in failed)), stats, ratios)


def _seam_ratio(frames: np.ndarray, prefix_frames: int, config: HealthConfig) -> float:
    """The histogram step from the last prefix frame to the first new one, over the larger of
    `seam_floor` and `seam_ratio` times the p95 step between new frames."""
    h = histograms(frames[prefix_frames - 1 :])
    steps = _tv(h[1:], h[:-1])
    inside = float(np.percentile(steps[1:], 95)) if len(steps) > 1 else 0.0
    return float(steps[0]) / max(config.seam_floor, config.seam_ratio * inside)


def _content_ratio(stats: SegmentStats, previous: SegmentStats | None, anchor: SegmentStats | None,
                   config: HealthConfig) -> float:  # fmt: skip
    ratio = 0.0
    for ref in (previous, anchor):
        if ref is not None and ref.foreground >= config.foreground_floor:
            ratio = max(ratio, config.foreground_ratio * ref.foreground / max(stats.foreground, 1e-6))
    if previous is not None:
        moved = _tv(np.asarray(stats.histogram), np.asarray(previous.histogram))
        ratio = max(ratio, float(moved) / config.histogram_distance)
    return ratio


@dataclass(frozen=True)
class Retry:
    """Yielded by `run_gate` before each re-sampling."""

    attempt: int  # the attempt about to run (1 = the first retry)
    reasons: tuple[str, ...]  # the checks the previous attempt failed


@dataclass(frozen=True)
class GateResult:
    """The attempt a segment keeps: the first that passed, else the best (`Verdict.score`)."""

    latents: torch.Tensor
    frames: np.ndarray  # the decoded frames it was judged on
    chosen: int  # its attempt number
    verdicts: tuple[Verdict, ...]  # every attempt's, in order (a paused attempt's: its preview's)
    stopped: tuple[int, ...] = ()  # attempts run no further than their preview (`HealthConfig.preview`)
    # Transformer evaluations over all attempts: the denoising steps the transformer ran for (a step
    # the step cache forecast costs next to nothing: `StepProgress.evaluated`).
    evals: int = 0
    retry_evals: int = 0  # of which the attempts not kept (what the retries added)
    withheld: bool = False  # a failing attempt was kept with retries left: the `retry_budget` was spent

    @property
    def attempts(self) -> int:
        return len(self.verdicts)

    @property
    def failed(self) -> tuple[str, ...]:
        return self.verdicts[self.chosen].failed

    def record(self, index: int) -> dict:
        """The segment's line in the drift report and the job's retry list."""
        record = {"segment": index, "attempts": self.attempts, "chosen": self.chosen, "failed_checks": list(self.failed),
                  "reasons": [list(v.failed) for v in self.verdicts], "evals": self.evals,
                  "retry_evals": self.retry_evals}  # fmt: skip
        if self.stopped:
            record["stopped"] = list(self.stopped)
        return record


def retry_guidance(config: HealthConfig, guidance: float, attempt: int) -> float:
    """The guidance scale `attempt` samples at: a retry's `retry_guidance` where the job samples
    with guidance (`guidance` above 1), else the job's own `guidance`."""
    if attempt and config.retry_guidance is not None and guidance > 1.0:
        return float(config.retry_guidance)
    return guidance


def gate_for(config: HealthConfig, failing_run: int) -> HealthConfig:
    """The gate for the next segment after `failing_run` segments in a row kept a failing attempt
    (counted from the shot's, or the prompt's, first): with `give_up_after` N > 0 and a run of N or
    more, the same checks without re-sampling, until a segment passes and the run ends."""
    if config.give_up_after and failing_run >= config.give_up_after and config.retries:
        return replace(config, retries=0)
    return config


def retry_spare(config: HealthConfig, steps: int, kept_evals: int, retry_evals: int) -> float | None:
    """The transformer evaluations the next segment's (or chunk's, of `steps` denoising steps)
    retries may still start with a `retry_budget` B, after `kept_evals` evaluations of kept
    attempts and `retry_evals` of retries before it (the whole render's, or stream's): `retries`
    x `steps` (a bucket that starts full; an attempt evaluates the transformer at most once a step)
    + B x `kept_evals` - `retry_evals`. A retry starts while what this segment's retries ran stays
    below it, so retries add about B to the transformer's work (one attempt more at most) however
    many segments keep failing. Evaluations, not steps: with the step cache a finished attempt
    runs the transformer on part of its steps only, while a retry stopped at its preview ran it on
    nearly all of its early ones; counting steps would price that retry at a third of an attempt
    where it costs over half (docs/builtin-model.md, "A retry budget"). None: no budget."""
    if config.retry_budget is None:
        return None
    return config.retries * steps + config.retry_budget * kept_evals - retry_evals


Sampler = Callable[[int, tuple[float, ...]], Generator[Any, None, torch.Tensor]]


def run_gate(sample: Sampler, decode: Callable[[torch.Tensor], np.ndarray], judge: Callable[[np.ndarray], Verdict],
             config: HealthConfig, spare: float | None = None,
             glance: Callable[[torch.Tensor], np.ndarray] | None = None) -> Generator[Any, None, GateResult]:  # fmt: skip
    """Sample (`sample(attempt, previews)`: a denoising generator; `previews`, the noise levels at
    which it yields a `Preview`, () for none), decode and judge up to `1 + retries` attempts,
    stopping at the first that passes. Yields what the sampler yields (but its previews), and a
    `Retry` before each re-sampling.

    With `config.preview`, each attempt is judged first on the clean frames its model predicts
    at each preview level (`HealthConfig.preview_levels`); one that fails a look is paused and
    the next starts. The last look decodes as the final frames do; the looks before it (a
    ladder's early, cheap screens) through `glance`, the codec's cheapest decode, and fail only
    on a check `config.preview_margin` times past its threshold (`Verdict.beyond`). An
    attempt that passes every look runs to its end and is judged again. When every attempt
    stopped at a preview, the one that got furthest (passed the most looks), then whose failing
    look judged best, runs on to its end and is kept. So a segment that passes at once costs what
    it did; a failing attempt costs the steps down to the look that showed it. The verdicts of
    paused attempts are their failing looks'; `GateResult.stopped` names them, `GateResult.evals`
    counts the transformer evaluations run.

    `spare` (`retry_spare`): the evaluations this segment's retries may start within; a retry
    starts only while the retries so far ran fewer (`GateResult.withheld` when one is refused).

    NaN latents fail `nonfinite` (when that check is on; otherwise `NonFiniteLatents` propagates,
    as without the gate); if every attempt is NaN the last error is raised: NaN frames are never
    kept."""
    can_retry = config.retries > 0 and (spare is None or spare > 0)
    levels = config.preview_levels if can_retry else ()  # nothing to choose between: no preview
    glance, margin = glance or decode, config.preview_margin
    verdicts: list[Verdict] = []
    best: tuple[torch.Tensor, np.ndarray, int] | None = None
    # Paused attempts: (looks passed, their failing look's verdict, attempt, generator).
    paused: list[tuple[int, Verdict, int, Generator[Any, None, torch.Tensor]]] = []
    resumed: list[int] = []
    error: NonFiniteLatents | None = None
    per_attempt = [0] * (1 + config.retries)  # transformer evaluations run, by attempt
    withheld = False

    def run(gen: Generator[Any, None, torch.Tensor], attempt: int, stop_at_preview: bool) -> Generator[Any, None, Any]:
        """Drive `gen`, passing its steps on; its latents, or its next `Preview` when asked to stop there."""
        while True:
            try:
                event = next(gen)
            except StopIteration as done:
                return done.value
            if isinstance(event, Preview):
                if stop_at_preview:
                    return event
                continue
            per_attempt[attempt] += isinstance(event, StepProgress) and event.evaluated
            yield event

    try:
        for attempt in range(1 + config.retries):
            if verdicts:
                if spare is not None and sum(per_attempt[1:]) >= spare:
                    withheld = True
                    break
                yield Retry(attempt, verdicts[-1].failed)
            try:
                gen = sample(attempt, levels)
                out, passed = (yield from run(gen, attempt, stop_at_preview=True)), 0
                while isinstance(out, Preview):
                    verdict = judge(decode(out.latents)) if out.last else judge(glance(out.latents)).beyond(margin)
                    if not verdict.passed:
                        break
                    out, passed = (yield from run(gen, attempt, stop_at_preview=True)), passed + 1
                if isinstance(out, Preview):
                    verdicts.append(verdict)
                    paused.append((passed, verdict, attempt, gen))
                    continue
            except NonFiniteLatents as exc:
                if "nonfinite" not in config.checks:
                    raise
                error = exc
                verdicts.append(NONFINITE)
                continue
            frames = decode(out)
            verdicts.append(judge(frames))
            if best is None or verdicts[-1].score < verdicts[best[2]].score:
                best = (out, frames, attempt)
            if verdicts[-1].passed:
                break
        # Every attempt stopped at a preview (or went NaN): run on the most promising (the most
        # looks passed, then the best failing look), the first of equals, and the next if it goes NaN.
        for _, _, attempt, gen in sorted(paused, key=lambda p: (-p[0], p[1].score)) if best is None else ():
            resumed.append(attempt)
            try:
                latents = yield from run(gen, attempt, stop_at_preview=False)
            except NonFiniteLatents as exc:
                if "nonfinite" not in config.checks:
                    raise
                error = exc
                verdicts[attempt] = NONFINITE
                continue
            frames = decode(latents)
            verdicts[attempt] = judge(frames)
            best = (latents, frames, attempt)
            break
    finally:
        for *_, gen in paused:
            gen.close()
    if best is None:
        assert error is not None
        raise error
    stopped = tuple(a for _, _, a, _ in paused if a not in resumed)
    evals = sum(per_attempt)
    return GateResult(best[0], best[1], best[2], tuple(verdicts), stopped, evals, evals - per_attempt[best[2]],
                      withheld and bool(verdicts[best[2]].failed))  # fmt: skip

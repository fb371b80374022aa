"""Robust colour statistics: drift told apart from content change.

A segment's full-frame statistics move when its content changes (an object vanishes, a big one
appears) as much as when its colours drift, and matching them to the anchor then repaints the
background (measured: a red circle's background turned dark brown, dE 10.5, while the circle was
gone). Two statistics that content does not dominate steer the correction instead:

- the content change: per CIELAB axis, one segment's quantiles against another's after the best
  affine fit. A global drift of brightness, tint or contrast is close to affine in CIELAB and
  leaves a small residual; an object that vanishes or appears changes the distribution's shape
  and leaves a large one. Against the anchor, a drift's small non-affine part compounds over a
  long chain (the drift benchmark: 3 LAB units after 24 steps, 0.3 per step), so the change
  since the anchor counts only steps between neighbouring segments above STEP_FLOOR, and never
  exceeds the direct comparison (`content_since_anchor`). The RMS residual (LAB units) sets the
  weight of the full-frame fit: 1 up to CONTENT_LOW, 0 from CONTENT_HIGH.
- the background: the dominant colour cluster (pixels within BG_RADIUS of a mean-shift mode,
  tracked from the previous segment's), which a minority object does not move. The rest of the
  weight goes to a pure shift moving the background onto the reference's background.

The safety rule (`limit_to_seam`): a correction never moves a segment's robust mean farther from
its seam neighbour's than the drift it removes (beyond SEAM_TOLERANCE); otherwise it is scaled
toward identity until it does not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from videogen.stitch.config import DriftConfig
from videogen.stitch.stats import LabStats, auto_stride, lab_samples
from videogen.stitch.transfer import ColorTransform, fit_transform

SAMPLE_FRAMES = 8  # evenly spaced frames per estimate
SAMPLE_PIXELS = 16384  # pixels per estimate: 25 quantiles and a cluster mean are stable to ~0.1 dE
QUANTILE_LEVELS = np.linspace(0.02, 0.98, 25)
QUANTILE_STEP = 4
# Residual of the affine quantile fit, LAB units. Measured: neighbouring segments of the drift
# benchmark's chain score <= 0.5 (81 frames, 416x240) and <= 3.0 (33 frames, 320x192: its six
# objects move a larger share of a short segment); a scene object (13% of the frame) vanishing
# scores 12-26 on every background of videogen.training.scenes.
STEP_FLOOR = 3.5
CONTENT_LOW, CONTENT_HIGH = 5.0, 10.0
BG_RADIUS = 15.0  # dE76 around the mode: flat backgrounds' noise inside, objects' colours outside
BG_ITERATIONS = 8
MIN_BG_FRACTION = 0.05  # a cluster holding less than this is no background (the track is lost)
MODE_BIN = 6.0  # LAB units of the histogram that seeds the first background mode
SEAM_TOLERANCE = 0.5  # dE76: below the just-noticeable 2.3, so ordinary fits are never scaled


@dataclass
class RobustStats:
    """What content does not dominate: per-axis quantiles `(3, Q)` and the background cluster's
    mean `(3,)` (None when no cluster holds MIN_BG_FRACTION) and share of the pixels."""

    quantiles: np.ndarray
    bg_mean: np.ndarray | None
    bg_fraction: float

    @classmethod
    def of_frames(cls, frames: np.ndarray, stride: int | None, seed: np.ndarray | None = None) -> RobustStats:
        """Of `(T, H, W, 3|4)` uint8 frames; `seed`: where the background was (the previous
        segment's), None to start at the densest colour."""
        n = min(len(frames), SAMPLE_FRAMES)
        s = max(stride or 1, auto_stride(frames.shape[1], frames.shape[2], SAMPLE_PIXELS // n))
        return cls.of_pixels(lab_samples(frames, s, SAMPLE_FRAMES), seed)

    @classmethod
    def of_pixels(cls, lab: np.ndarray, seed: np.ndarray | None = None) -> RobustStats:
        """Of CIELAB pixels, planar `(3, N)`."""
        ranked = np.sort(lab[:, ::QUANTILE_STEP], axis=1)  # 25 levels need no more than every 4th pixel
        idx = np.round(QUANTILE_LEVELS * (ranked.shape[1] - 1)).astype(np.int64)
        quantiles = ranked[:, idx].astype(np.float64)
        mean, fraction = background(lab, seed)
        return cls(quantiles, mean, fraction)

    def to_dict(self) -> dict:
        return {"quantiles": self.quantiles.copy(), "bg_mean": None if self.bg_mean is None else self.bg_mean.copy(),
                "bg_fraction": self.bg_fraction}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict | None) -> RobustStats | None:
        if d is None:
            return None
        bg = None if d["bg_mean"] is None else np.asarray(d["bg_mean"], np.float64)
        return cls(np.asarray(d["quantiles"], np.float64), bg, float(d["bg_fraction"]))


def _densest(lab: np.ndarray) -> np.ndarray:
    """Centre of the most populated MODE_BIN-sized LAB cell."""
    lo = lab.min(1)
    idx = ((lab - lo[:, None]) / MODE_BIN).astype(np.int64)
    dims = tuple(int(d) for d in idx.max(1) + 1)
    best = np.unravel_index(int(np.bincount(np.ravel_multi_index(tuple(idx), dims)).argmax()), dims)
    return lo.astype(np.float64) + (np.array(best) + 0.5) * MODE_BIN


def background(lab: np.ndarray, seed: np.ndarray | None = None) -> tuple[np.ndarray | None, float]:
    """Mean-shift (flat kernel, BG_RADIUS) from `seed` or the densest cell: the cluster's mean and
    share of `lab` `(3, N)`. A track that loses its cluster returns None rather than jumping to
    another colour (that colour may be a large object)."""
    centre = _densest(lab) if seed is None else np.asarray(seed, np.float64)
    fraction = 0.0
    # |x - c|^2 = |x|^2 - 2 c.x + |c|^2: one matrix-vector product per iteration, no (3, N) temporaries
    norms = np.einsum("ij,ij->j", lab, lab)
    for _ in range(BG_ITERATIONS):
        c = centre.astype(np.float32)
        near = (norms - 2 * (c @ lab) + np.float32(c @ c) <= np.float32(BG_RADIUS**2)).astype(np.float32)
        count = float(near.sum())
        fraction = count / lab.shape[1]
        if fraction < MIN_BG_FRACTION:
            return None, fraction
        new = (lab @ near).astype(np.float64) / count
        moved = float(np.linalg.norm(new - centre))
        centre = new
        if moved < 0.1:
            break
    return centre, fraction


def content_change(src: np.ndarray, dst: np.ndarray, max_scale: float) -> float:
    """RMS residual (LAB units) of `dst` quantiles `(3, Q)` after the best affine map of `src`'s,
    per axis, the scale clamped to [1/max_scale, max_scale] (a drift's contrast change)."""
    total = 0.0
    for x, y in zip(src, dst):
        xc, yc = x - x.mean(), y - y.mean()
        var = float(xc @ xc)
        scale = float(np.clip(xc @ yc / var, 1 / max_scale, max_scale)) if var > 1e-9 else 1.0
        total += float(np.mean(np.square(yc - scale * xc)))
    return float(np.sqrt(total))


def content_since_anchor(previous: float, robust: RobustStats, prev_rb: RobustStats | None,
                         anchor_rb: RobustStats, max_scale: float) -> float:  # fmt: skip
    """The content change of a segment since the anchor: the change so far (`previous`) plus this
    seam's step beyond STEP_FLOOR, at most the direct comparison with the anchor."""
    direct = content_change(robust.quantiles, anchor_rb.quantiles, max_scale)
    if prev_rb is None:
        return direct
    step = content_change(robust.quantiles, prev_rb.quantiles, max_scale)
    return min(direct, previous + max(0.0, step - STEP_FLOOR))


def content_weight(change: float) -> float:
    """Weight of the full-frame fit: 1 for a pure drift, 0 for a content change."""
    return float(np.clip((CONTENT_HIGH - change) / (CONTENT_HIGH - CONTENT_LOW), 0.0, 1.0))


def scaled(transform: ColorTransform, s: float) -> ColorTransform:
    """`transform` moved toward identity: x + s (T(x) - x)."""
    eye = np.eye(3)
    return ColorTransform(eye + s * (transform.matrix - eye), s * transform.offset)


def fit_robust(src: LabStats, src_rb: RobustStats | None, dst: LabStats, dst_rb: RobustStats | None,
               config: DriftConfig, change: float | None = None) -> tuple[ColorTransform, float]:  # fmt: skip
    """The transform moving `src` toward `dst` and the full-frame fit's weight w: w = 1 is
    `fit_transform` itself (a pure drift: exactly the plain correction); below 1 the means mix
    toward the backgrounds' and the spread toward the segment's own (w = 0: a shift of the
    background only). Without a background, the full-frame fit scaled by w. `change`: the content
    change (default: `content_change` of the two)."""
    if not config.robust or src_rb is None or dst_rb is None:
        return fit_transform(src, dst, config), 1.0
    if change is None:
        change = content_change(src_rb.quantiles, dst_rb.quantiles, config.max_std_ratio)
    w = content_weight(change)
    if w >= 1.0:
        return fit_transform(src, dst, config), w
    if src_rb.bg_mean is None or dst_rb.bg_mean is None:
        return scaled(fit_transform(src, dst, config), w), w
    src_eff = LabStats(w * src.mean + (1 - w) * src_rb.bg_mean, src.std, src.cov)
    dst_eff = LabStats(w * dst.mean + (1 - w) * dst_rb.bg_mean, w * dst.std + (1 - w) * src.std,
                       w * dst.cov + (1 - w) * src.cov)  # fmt: skip
    return fit_transform(src_eff, dst_eff, config), w


def robust_means(a_rb: RobustStats | None, a: LabStats, b_rb: RobustStats | None, b: LabStats) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The backgrounds' means of `a` and `b` when both have one, else their full-frame means."""
    if a_rb is not None and b_rb is not None and a_rb.bg_mean is not None and b_rb.bg_mean is not None:
        return a_rb.bg_mean, b_rb.bg_mean
    return a.mean, b.mean


def limit_to_seam(transform: ColorTransform, mean: np.ndarray, anchor: np.ndarray,
                  neighbour: np.ndarray) -> tuple[ColorTransform, float]:  # fmt: skip
    """`transform` scaled toward identity (largest s in 1, 15/16, .., 0) until it moves `mean`
    away from the seam `neighbour` by no more than it brings it toward `anchor` (dE76 of robust
    means, SEAM_TOLERANCE allowed). Returns the transform and s."""
    target = transform.apply_lab(mean)
    before_anchor = float(np.linalg.norm(mean - anchor))
    before_neighbour = float(np.linalg.norm(mean - neighbour))
    for s in np.linspace(1.0, 0.0, 17):
        moved = mean + s * (target - mean)
        removed = before_anchor - float(np.linalg.norm(moved - anchor))
        away = float(np.linalg.norm(moved - neighbour)) - before_neighbour
        if away <= removed + SEAM_TOLERANCE:
            return (transform if s == 1.0 else scaled(transform, float(s))), float(s)
    return ColorTransform.identity(), 0.0

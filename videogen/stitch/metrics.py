"""Drift metrics over per-frame CIELAB statistics: frame steps, seam jumps, flicker, start-end contrast.

Seam jump: the colour step across a seam divided by the p95 of in-segment frame-to-frame steps
(so a seam scores 1 when it moves like ordinary motion). Flicker: variance of per-frame L*
around a 5-frame moving average. Start-end contrast: the first vs the last 15% of frames.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from videogen.stitch.colour import delta_e76, delta_e2000

START_END_FRACTION = 0.15
MIN_STEP_P95 = 0.1  # dE76 floor for the seam-jump denominator: static content would divide by ~0


def frame_steps(frame_means: np.ndarray) -> np.ndarray:
    """dE76 between consecutive frames' mean LAB: step t is between frames t-1 and t (t >= 1)."""
    return delta_e76(frame_means[1:], frame_means[:-1])


def seam_jumps(
    frame_means: np.ndarray, seams: Sequence[tuple[int, int]], shot_starts: Sequence[int]
) -> tuple[list[float], float]:
    """Each seam's largest frame step over the p95 of in-segment steps (floored at MIN_STEP_P95),
    and that p95. A seam `[start, end)` covers the steps into its first frame .. out of its last;
    the steps across seams and shot cuts are not in-segment steps."""
    n = len(frame_means)
    steps = frame_steps(frame_means) if n > 1 else np.zeros(0)  # steps[t-1]: frame t-1 -> t
    inside = np.ones(len(steps), bool)
    windows = []
    for a, b in seams:
        lo, hi = max(a, 1), min(b, n - 1)  # steps into the window's first frame .. out of its last
        windows.append((lo, hi))
        inside[lo - 1 : hi] = False
    for c in shot_starts:
        if 0 < c < n:
            inside[c - 1] = False
    p95 = float(np.percentile(steps[inside], 95)) if inside.any() else 0.0
    denom = max(p95, MIN_STEP_P95)
    jumps = [float(steps[lo - 1 : hi].max() / denom) if hi >= lo else 0.0 for lo, hi in windows]
    return jumps, p95


def flicker_index(L: np.ndarray, cuts: Sequence[int] = ()) -> float:
    """Variance of per-frame L* around its centred 5-frame moving average, never across a cut."""
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(L)), len(L)]
    res = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        x = np.asarray(L[a:b], np.float64)
        if len(x) >= 5:
            ma = np.convolve(x, np.ones(5) / 5, mode="valid")  # centred on x[2:-2]
            res.append(x[2:-2] - ma)
    if not res:
        return 0.0
    r = np.concatenate(res)
    return float(np.mean(r * r))


def start_end_contrast(stats: np.ndarray) -> dict:
    """Compare the first and last 15% of frames: mean L*a*b* difference (end - start), dE76,
    dE2000 and the ratio of L* std (contrast) end / start."""
    n = len(stats)
    k = max(1, int(round(n * START_END_FRACTION)))
    s, e = stats[:k], stats[-k:]
    ms, me = s[:, :3].mean(0), e[:, :3].mean(0)
    return {
        "frames": k,
        "dL": float(me[0] - ms[0]),
        "da": float(me[1] - ms[1]),
        "db": float(me[2] - ms[2]),
        "dE76": float(delta_e76(me, ms)),
        "dE2000": float(delta_e2000(me, ms)),
        "contrast_ratio": float(e[:, 3].mean() / max(s[:, 3].mean(), 1e-6)),
    }

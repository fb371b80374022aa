"""The drift report of a video: per-frame LAB statistics, per-segment dE against the shot's anchor,
seam jumps, flicker and start-end contrast; written as `<video>.drift.json` plus a plot.

`build_report` turns the stitcher's (or `videogen drift report`'s) per-frame statistics and the
timeline into a `DriftReport`; the figures are defined in `videogen.stitch.metrics`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from videogen.stitch.colour import delta_e76, delta_e2000
from videogen.stitch.metrics import flicker_index, seam_jumps, start_end_contrast
from videogen.stitch.plot import plot_drift


@dataclass
class SegmentDrift:
    index: int  # segment number in the video
    shot: int
    start: int  # first output frame (the seam crossfade belongs to the incoming segment)
    end: int  # one past the last output frame
    mean_lab: list[float]
    dE76: float  # of the segment's mean vs the shot's anchor
    dE2000: float


@dataclass
class DriftReport:
    """Drift figures of a video: per-frame LAB stats, per-segment dE vs anchor, seams, flicker."""

    num_frames: int
    frame_mean: np.ndarray  # (N, 3) per-frame mean L*, a*, b*
    frame_std: np.ndarray  # (N, 3) per-frame std L*, a*, b*
    segments: list[SegmentDrift]
    seams: list[tuple[int, int]]  # [start, end) of each seam's crossfade (start == end: hard cut)
    seam_jumps: list[float]
    shot_starts: list[int]
    anchor_means: list[list[float]]  # per shot
    step_p95: float  # p95 of in-segment frame-to-frame dE76 steps (the seam-jump denominator)
    flicker: float
    start_end: dict
    fps: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def dE76_mean(self) -> float:
        return float(np.mean([s.dE76 for s in self.segments])) if self.segments else 0.0

    @property
    def dE2000_mean(self) -> float:
        return float(np.mean([s.dE2000 for s in self.segments])) if self.segments else 0.0

    @property
    def seam_jump_max(self) -> float:
        return float(max(self.seam_jumps)) if self.seam_jumps else 0.0

    def to_dict(self, frames: bool = True) -> dict:
        d = {
            "num_frames": self.num_frames,
            "fps": self.fps,
            "num_segments": len(self.segments),
            "num_shots": len(self.shot_starts),
            "dE76_mean": self.dE76_mean,
            "dE76_max": max((s.dE76 for s in self.segments), default=0.0),
            "dE2000_mean": self.dE2000_mean,
            "dE2000_max": max((s.dE2000 for s in self.segments), default=0.0),
            "seam_jump_max": self.seam_jump_max,
            "seam_jump_p95": float(np.percentile(self.seam_jumps, 95)) if self.seam_jumps else 0.0,
            "step_p95": self.step_p95,
            "flicker": self.flicker,
            "start_end": self.start_end,
            "shot_starts": list(self.shot_starts),
            "anchor_means": self.anchor_means,
            "seams": [list(s) for s in self.seams],
            "seam_jumps": list(self.seam_jumps),
            "segments": [s.__dict__.copy() for s in self.segments],
            **self.extra,
        }
        if frames:
            d["frames"] = self._frame_series()
        return d

    def _frame_series(self) -> dict[str, list[float]]:
        """Per-frame mean and std of L*, a*, b*, rounded to 3 decimals for the JSON."""
        return {
            "L_mean": self.frame_mean[:, 0].round(3).tolist(),
            "a_mean": self.frame_mean[:, 1].round(3).tolist(),
            "b_mean": self.frame_mean[:, 2].round(3).tolist(),
            "L_std": self.frame_std[:, 0].round(3).tolist(),
            "a_std": self.frame_std[:, 1].round(3).tolist(),
            "b_std": self.frame_std[:, 2].round(3).tolist(),
        }

    def to_json(self, frames: bool = True, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(frames), indent=indent)

    def plot(self, path: str | os.PathLike) -> Path:
        return plot_drift(self, path)

    def write(self, video_path: str | os.PathLike) -> tuple[Path, Path]:
        """Write `<video>.drift.json` and `<video>.drift.png` next to the video."""
        v = Path(video_path)
        js, png = v.with_name(v.name + ".drift.json"), v.with_name(v.name + ".drift.png")
        js.write_text(self.to_json(indent=1))
        self.plot(png)
        return js, png


def _segment_drifts(
    means: np.ndarray, segment_starts: Sequence[int], segment_shots: Sequence[int], anchor_means: Sequence[np.ndarray]
) -> list[SegmentDrift]:
    """Each segment's mean LAB over its frames and its dE76/dE2000 against its shot's anchor."""
    starts = list(segment_starts) + [len(means)]
    segs = []
    for i in range(len(segment_starts)):
        a, b = starts[i], starts[i + 1]
        m = means[a:b].mean(0) if b > a else np.full(3, np.nan)
        anchor = np.asarray(anchor_means[segment_shots[i]])
        segs.append(
            SegmentDrift(i, int(segment_shots[i]), int(a), int(b), [float(v) for v in m],
                         float(delta_e76(m, anchor)), float(delta_e2000(m, anchor)))
        )  # fmt: skip
    return segs


def build_report(
    stats: np.ndarray,
    segment_starts: Sequence[int],
    segment_shots: Sequence[int],
    seams: Sequence[tuple[int, int]],
    shot_starts: Sequence[int],
    anchor_means: Sequence[np.ndarray],
    fps: float | None = None,
) -> DriftReport:
    """Figures from per-frame stats `(N, 6)` and the timeline: segment i covers
    [segment_starts[i], segment_starts[i+1]); `seams` are the crossfade windows between segments
    of one shot; shots start at `shot_starts` and each has its anchor mean LAB."""
    n = len(stats)
    means, stds = stats[:, :3], stats[:, 3:]
    jumps, p95 = seam_jumps(means, seams, shot_starts)
    cuts = [c for c in shot_starts if c > 0]
    return DriftReport(
        num_frames=n,
        frame_mean=means.copy(),
        frame_std=stds.copy(),
        segments=_segment_drifts(means, segment_starts, segment_shots, anchor_means),
        seams=[(int(a), int(b)) for a, b in seams],
        seam_jumps=jumps,
        shot_starts=[int(s) for s in shot_starts],
        anchor_means=[[float(v) for v in np.asarray(m)] for m in anchor_means],
        step_p95=p95,
        flicker=flicker_index(means[:, 0], cuts),
        start_end=start_end_contrast(stats) if n else {},
        fps=fps,
    )

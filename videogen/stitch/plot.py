"""The drift plot: per-frame mean L*, a*, b* in three stacked panels, with seams, shot cuts and
each shot's anchor level marked. Drawn with PIL only (matplotlib is not a dependency)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class PlottedReport(Protocol):
    """What the plot reads of a `videogen.stitch.report.DriftReport`, so that the plot needs no
    import of the report (the report draws itself through `plot_drift`)."""

    @property
    def num_frames(self) -> int: ...

    @property
    def fps(self) -> float | None: ...

    @property
    def segments(self) -> list[Any]: ...

    @property
    def seams(self) -> list[tuple[int, int]]: ...

    @property
    def shot_starts(self) -> list[int]: ...

    @property
    def frame_mean(self) -> np.ndarray: ...

    @property
    def anchor_means(self) -> list[list[float]]: ...

    @property
    def dE76_mean(self) -> float: ...

    @property
    def seam_jump_max(self) -> float: ...

    @property
    def flicker(self) -> float: ...


_PLOT_COLOURS = {"L*": (20, 20, 20), "a*": (200, 30, 60), "b*": (30, 80, 210)}
_SEAM_COLOUR, _CUT_COLOUR, _ANCHOR_COLOUR = (150, 150, 150), (240, 140, 0), (0, 160, 0)
_PANEL_HEIGHT, _LEFT, _RIGHT, _TOP, _GAP, _BOTTOM = 170, 64, 16, 34, 26, 40  # pixels


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = max(hi - lo, 1e-9)
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


@dataclass
class _Panel:
    """One panel's box in pixels and the data ranges it maps: frames 0..n-1 across, lo..hi up."""

    x0: float
    x1: float
    y0: float
    y1: float
    n: int
    lo: float
    hi: float

    def fx(self, t: float) -> float:
        return self.x0 + (self.x1 - self.x0) * t / (self.n - 1)

    def fy(self, v: float) -> float:
        return self.y1 - (self.y1 - self.y0) * (v - self.lo) / (self.hi - self.lo)


def plot_drift(report: PlottedReport, path: str | os.PathLike, width: int = 1000) -> Path:
    """Three stacked panels (mean L*, a*, b* per frame) with seams (dashed grey), shot cuts (solid
    orange) and each shot's anchor level (dotted), axes with ticks, and a legend."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default()
    height = _TOP + 3 * _PANEL_HEIGHT + 2 * _GAP + _BOTTOM
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    title = f"drift: {report.num_frames} frames, {len(report.segments)} segments, dE76 mean {report.dE76_mean:.2f}, seam jump max {report.seam_jump_max:.2f}, flicker {report.flicker:.3f}"
    d.text((_LEFT, 8), title, fill="black", font=font)
    for p, (name, colour) in enumerate(_PLOT_COLOURS.items()):
        _draw_panel(d, font, report, p, name, colour, width)
    d.text((_LEFT, height - 16), "frame", fill="black", font=font)
    _draw_legend(d, font, width - _RIGHT, height)
    out = Path(path)
    img.save(out)
    return out


def _draw_panel(
    d: Any, font: Any, report: PlottedReport, p: int, name: str, colour: tuple[int, int, int], width: int
) -> None:
    """Panel `p` (0: L*, 1: a*, 2: b*): box, value axis, timeline marks, the series, frame ticks."""
    y0 = _TOP + p * (_PANEL_HEIGHT + _GAP)
    series = report.frame_mean[:, p] if report.num_frames else np.zeros(1)
    anchors = [m[p] for m in report.anchor_means]
    lo, hi = float(min(series.min(), *anchors)), float(max(series.max(), *anchors))
    pad = max((hi - lo) * 0.1, 1.0)
    panel = _Panel(_LEFT, width - _RIGHT, y0, y0 + _PANEL_HEIGHT, max(report.num_frames, 2), lo - pad, hi + pad)
    d.rectangle([panel.x0, panel.y0, panel.x1, panel.y1], outline="black")
    for v in _nice_ticks(panel.lo, panel.hi, 4):
        y = panel.fy(v)
        d.line([panel.x0 - 4, y, panel.x0, y], fill="black")
        d.line([panel.x0 + 1, y, panel.x1 - 1, y], fill=(232, 232, 232))
        d.text((4, y - 6), f"{v:g}", fill="black", font=font)
    d.text((panel.x0 + 6, panel.y0 + 4), f"mean {name}", fill=colour, font=font)
    _draw_timeline_marks(d, report, panel, anchors)
    pts = [(panel.fx(t), panel.fy(float(v))) for t, v in enumerate(series)]
    if len(pts) > 1:
        d.line(pts, fill=colour, width=2)
    fps = report.fps or 0.0
    for t in _nice_ticks(0, panel.n - 1, 8):
        x = panel.fx(t)
        d.line([x, panel.y1, x, panel.y1 + 4], fill="black")
        if p == 2:  # frame labels under the bottom panel only
            label = f"{int(t)}" + (f" ({t / fps:.1f}s)" if fps else "")
            d.text((x - 10, panel.y1 + 6), label, fill="black", font=font)


def _draw_timeline_marks(d: Any, report: PlottedReport, panel: _Panel, anchors: list[float]) -> None:
    """Seam crossfades (dashed grey: first and last frame), shot cuts (solid orange) and each
    shot's anchor level across the shot (dotted green)."""
    y0, y1 = panel.y0, panel.y1
    for a, b in report.seams:
        for x in (panel.fx(a), panel.fx(max(b - 1, a))) if b - a > 1 else (panel.fx(a),):
            for yy in range(int(y0), int(y1), 8):
                d.line([x, yy, x, min(yy + 4, y1)], fill=_SEAM_COLOUR)
    for c in report.shot_starts:
        if c > 0:
            d.line([panel.fx(c), y0, panel.fx(c), y1], fill=_CUT_COLOUR, width=2)
    bounds = [*report.shot_starts, report.num_frames]
    for s, m in enumerate(anchors):
        a, b = bounds[s], bounds[s + 1]
        for xx in range(int(panel.fx(a)), int(panel.fx(max(b - 1, a))), 6):
            d.point([(xx, panel.fy(m)), (xx + 1, panel.fy(m))], fill=_ANCHOR_COLOUR)


def _draw_legend(d: Any, font: Any, x1: float, height: int) -> None:
    legend = [("per-frame mean", (20, 20, 20)), ("seam crossfade", _SEAM_COLOUR),
              ("shot cut", _CUT_COLOUR), ("shot anchor", _ANCHOR_COLOUR)]  # fmt: skip
    lx = x1 - 470
    for label, colour in legend:
        d.line([lx, height - 10, lx + 18, height - 10], fill=colour, width=3)
        d.text((lx + 22, height - 16), label, fill="black", font=font)
        lx += 118

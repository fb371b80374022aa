"""What `render()` yields, in order: `RenderStarted`, then per segment `SegmentStarted`, a
`StepProgress` per denoising step (`videogen.sampling.loop`) and `SegmentFinished`, and last
`RenderFinished`. A resumed segment yields only its `SegmentFinished` (`resumed=True`). Callers
differ only in where these go: progress bars (CLI), the job store (workers)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from videogen.config.plan import RenderPlan
from videogen.config.resolve import ResolvedSettings
from videogen.sampling.loop import StepProgress


@dataclass(frozen=True)
class RenderStarted:
    plan: RenderPlan
    settings: ResolvedSettings
    total_steps: int
    resumed_segments: int  # segments restored from a checkpoint, not generated again


@dataclass(frozen=True)
class SegmentStarted:
    index: int
    shot: int
    frames: int


@dataclass(frozen=True)
class SegmentFinished:
    index: int
    frames_written: int  # total so far
    resumed: bool = False


@dataclass(frozen=True)
class RenderFinished:
    video: Path
    thumbnail: Path | None
    frames: int
    fps: float
    report: Path | None = None


Event = RenderStarted | SegmentStarted | StepProgress | SegmentFinished | RenderFinished

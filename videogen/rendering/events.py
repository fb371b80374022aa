"""What `render()` yields, in order: `RenderStarted`, then per segment `SegmentStarted`, a
`StepProgress` per denoising step (`videogen.sampling.loop`) and `SegmentFinished`, and last
`RenderFinished`. A segment that fails the health gate (`videogen.sampling.health`) yields a
`SegmentRetried` before each re-sampling, between its steps. A resumed segment yields only its
`SegmentFinished` (`resumed=True`). Callers
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
class SegmentRetried:
    index: int
    attempt: int  # the attempt about to run (1 = the first retry)
    reasons: tuple[str, ...]  # the checks the previous attempt failed


@dataclass(frozen=True)
class SegmentFinished:
    index: int
    frames_written: int  # total so far
    resumed: bool = False
    attempts: int = 1  # samplings of this segment (1: it passed, or the gate is off)
    failed_checks: tuple[str, ...] = ()  # checks the kept attempt still fails (none passed: the best is kept)


@dataclass(frozen=True)
class RenderFinished:
    video: Path
    thumbnail: Path | None
    frames: int
    fps: float
    report: Path | None = None


Event = RenderStarted | SegmentStarted | StepProgress | SegmentRetried | SegmentFinished | RenderFinished

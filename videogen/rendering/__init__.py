"""Rendering: `render()`, the one code path from a `RenderSpec` to an MP4 (CLI, server, workers)."""

from videogen.rendering.render import (
    Event,
    RenderFinished,
    RenderStarted,
    SegmentFinished,
    SegmentStarted,
    prepare,
    render,
)

__all__ = ["Event", "RenderFinished", "RenderStarted", "SegmentFinished", "SegmentStarted", "prepare", "render"]

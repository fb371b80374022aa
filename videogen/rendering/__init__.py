"""Rendering: `render()`, the one code path from a `RenderSpec` to an MP4 (CLI, server, workers).

Its stages live in their own modules: `events` (what it yields), `segment` (one segment's
denoise -> stitch), `checkpoints` (resume), `tail` (extensions), `image` (image-to-video).
"""

from videogen.rendering.events import (
    Event,
    RenderFinished,
    RenderStarted,
    SegmentFinished,
    SegmentRetried,
    SegmentStarted,
)
from videogen.rendering.render import prepare, render

__all__ = ["Event", "RenderFinished", "RenderStarted", "SegmentFinished", "SegmentRetried", "SegmentStarted", "prepare",
           "render"]  # fmt: skip

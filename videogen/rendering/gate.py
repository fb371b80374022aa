"""The render's side of the segment health gate (`videogen.sampling.health`): what it remembers
across segments, and one segment's gated sampling.

A shot's segments are judged against the shot's first (anchor) segment and the previous one; a
new shot (a deliberate cut, a new prompt) starts afresh, and so does an extension's first
segment (its source's frames are not at hand, and its prompt may differ). The memory is plain
floats, checkpointed with every segment, so a resumed render judges the next segment exactly as
an uninterrupted one would, and keeps the same attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from videogen.config.plan import SegmentPlan
from videogen.rendering.events import SegmentRetried
from videogen.sampling.health import GateResult, Retry, SegmentStats, check_segment, run_gate
from videogen.sampling.loop import StepProgress


@dataclass
class HealthHistory:
    """The gate's memory across one render's segments."""

    anchor: SegmentStats | None = None  # the shot's first segment
    previous: SegmentStats | None = None  # the shot's last segment
    records: list[dict] = field(default_factory=list)  # `GateResult.record` per generated segment

    def new_shot(self) -> None:
        self.anchor = self.previous = None

    def keep(self, seg: SegmentPlan, result: GateResult) -> None:
        stats = result.verdicts[result.chosen].stats
        if stats is not None:
            self.anchor = self.anchor or stats
            self.previous = stats
        self.records.append(result.record(seg.index))

    @property
    def retries_used(self) -> int:
        return sum(r["attempts"] - 1 for r in self.records)

    def report(self) -> dict:
        """The drift report's `health` entry."""
        return {"retries_used": self.retries_used, "segments": list(self.records)}

    def state_dict(self) -> dict:
        return {"anchor": self.anchor and self.anchor.to_dict(), "previous": self.previous and self.previous.to_dict(),
                "records": list(self.records)}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.anchor = SegmentStats.from_dict(state["anchor"]) if state.get("anchor") else None
        self.previous = SegmentStats.from_dict(state["previous"]) if state.get("previous") else None
        self.records = list(state.get("records", []))


def gated_sample(seg: SegmentPlan, inputs: Any, history: HealthHistory,
                 sample: Callable[[int], Generator[StepProgress, None, torch.Tensor]],
                 decode: Callable[[torch.Tensor], np.ndarray]) -> Generator[StepProgress | SegmentRetried, None, GateResult]:  # fmt: skip
    """Sample `seg` (`sample(attempt)`) until an attempt passes the gate or the retries run out;
    yields its steps and a `SegmentRetried` before each re-sampling; the kept attempt."""
    config = inputs.resolved.health
    if seg.first_in_shot and (seg.index > 0 or not inputs.extends):
        history.new_shot()
    prefix = seg.overlap_frames if not seg.first_in_shot else (1 if _image_prefix(seg, inputs) else 0)

    def judge(frames: np.ndarray) -> Any:
        return check_segment(frames, prefix, history.previous, history.anchor, config)

    gate = run_gate(sample, decode, judge, config)
    while True:
        try:
            event = next(gate)
        except StopIteration as stop:
            result: GateResult = stop.value
            history.keep(seg, result)
            return result
        yield SegmentRetried(seg.index, event.attempt, event.reasons) if isinstance(event, Retry) else event


def _image_prefix(seg: SegmentPlan, inputs: Any) -> bool:
    return seg.index == 0 and inputs.image_latents is not None and seg.latent_frames > 1

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
from videogen.sampling import health
from videogen.sampling.health import GateResult, Retry, Sampler, SegmentStats, check_segment, gate_for, run_gate
from videogen.sampling.loop import StepProgress


@dataclass
class HealthHistory:
    """The gate's memory across one render's segments."""

    anchor: SegmentStats | None = None  # the shot's first segment
    previous: SegmentStats | None = None  # the shot's last segment
    records: list[dict] = field(default_factory=list)  # `GateResult.record` per generated segment
    shot_start: int = 0  # the records of the current shot start here

    def new_shot(self) -> None:
        self.anchor = self.previous = None
        self.shot_start = len(self.records)

    @property
    def failing_run(self) -> int:
        """This shot's last segments in a row that kept a failing attempt (`gate_for`)."""
        run = 0
        for record in reversed(self.records[self.shot_start :]):
            if not record["failed_checks"]:
                break
            run += 1
        return run

    def keep(self, seg: SegmentPlan, result: GateResult, retries_withheld: bool = False) -> None:
        stats = result.verdicts[result.chosen].stats
        if stats is not None:
            self.anchor = self.anchor or stats
            self.previous = stats
        record = result.record(seg.index)
        if retries_withheld or result.withheld:  # `give_up_after` or `retry_budget`: fewer re-samplings than `retries`
            record["retries_withheld"] = True
        self.records.append(record)

    @property
    def retries_used(self) -> int:
        return sum(r["attempts"] - 1 for r in self.records)

    @property
    def retry_evals(self) -> int:
        """Transformer evaluations of the attempts not kept (`GateResult.evals`; a checkpoint
        from before they were counted has its steps, or nothing: 0)."""
        return sum(r.get("retry_evals", r.get("retry_steps", 0)) for r in self.records)

    @property
    def kept_evals(self) -> int:
        return sum(r.get("evals", r.get("steps", 0)) for r in self.records) - self.retry_evals

    @property
    def backtrack_evals(self) -> int:
        """Transformer evaluations of the chains a backtrack dropped (`videogen.rendering.render`)."""
        return sum(r.get("backtrack_evals", 0) for r in self.records)

    def report(self) -> dict:
        """The drift report's `health` entry."""
        return {"retries_used": self.retries_used, "retry_evals": self.retry_evals,
                "backtrack_evals": self.backtrack_evals, "segments": list(self.records)}  # fmt: skip

    def state_dict(self) -> dict:
        return {"anchor": self.anchor and self.anchor.to_dict(), "previous": self.previous and self.previous.to_dict(),
                "records": list(self.records), "shot_start": self.shot_start}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.anchor = SegmentStats.from_dict(state["anchor"]) if state.get("anchor") else None
        self.previous = SegmentStats.from_dict(state["previous"]) if state.get("previous") else None
        self.records = list(state.get("records", []))
        self.shot_start = int(state.get("shot_start", 0))


def gated_sample(seg: SegmentPlan, inputs: Any, history: HealthHistory,
                 sample: Sampler,
                 decode: Callable[[torch.Tensor], np.ndarray],
                 glance: Callable[[torch.Tensor], np.ndarray] | None = None) -> Generator[StepProgress | SegmentRetried, None, GateResult]:  # fmt: skip
    """Sample `seg` (`sample(attempt, previews)`) until an attempt passes the gate or the retries
    run out; yields its steps and a `SegmentRetried` before each re-sampling; the kept attempt.
    `glance`: the cheap decode a preview ladder's early looks are judged on (`run_gate`)."""
    if seg.first_in_shot and (seg.index > 0 or not inputs.extends):
        history.new_shot()
    config = gate_for(inputs.resolved.health, history.failing_run)
    withheld = config.retries < inputs.resolved.health.retries
    spare = health.retry_spare(config, inputs.resolved.settings.steps, history.kept_evals, history.retry_evals)
    prefix = seg.overlap_frames if not seg.first_in_shot else (1 if _image_prefix(seg, inputs) else 0)

    def judge(frames: np.ndarray) -> Any:
        return check_segment(frames, prefix, history.previous, history.anchor, config)

    gate = run_gate(sample, decode, judge, config, spare, glance)
    while True:
        try:
            event = next(gate)
        except StopIteration as stop:
            result: GateResult = stop.value
            history.keep(seg, result, retries_withheld=withheld)
            return result
        yield SegmentRetried(seg.index, event.attempt, event.reasons) if isinstance(event, Retry) else event


def _image_prefix(seg: SegmentPlan, inputs: Any) -> bool:
    return seg.index == 0 and inputs.image_latents is not None and seg.latent_frames > 1

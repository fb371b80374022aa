"""Per-segment checkpoints of a render, so that a restarted render resumes after its last
finished segment and produces the same video an uninterrupted one would.

Each finished segment leaves one file in the work directory: the frames it wrote, the latents it
hands to the next segment, the stitcher's state and the health gate's memory (which attempt each
segment kept, and what the next segment is judged against). Files are keyed by a hash of the spec and the
model's identity, so a changed request never resumes from another request's segments, and each is
written atomically (a crash leaves the old state or the new, never half).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from videogen.config.spec import RenderSpec
from videogen.sampling.loop import SegmentAnchor, anchor_from_dict, anchor_to_dict


@dataclass(frozen=True)
class SegmentCheckpoint:
    written: np.ndarray  # (T, H, W, 3) uint8: the frames the segment wrote to the video
    handoff: torch.Tensor  # (1, C, F, h, w): its latents, the next segment's clean prefix
    stitcher: dict[str, Any]  # `Stitcher.state_dict()` after it
    health: dict[str, Any] | None = None  # `HealthHistory.state_dict()` after it (the kept attempt); None: gate off
    anchor: SegmentAnchor | None = None  # the shot's anchor frame after it (None: the preset has none)


class SegmentCheckpoints:
    """The checkpoints of one render (spec, model, source) in `root`."""

    def __init__(
        self, root: Path, spec: RenderSpec, model: Any, continue_from: str | os.PathLike | None = None
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        ident = {"spec": spec.to_dict(), "model": model.preset.name, "attention": model.attention,
                 "continue_from": str(continue_from)}  # fmt: skip
        if "checkpoint" in model.extras:  # other weights, other video (only then: old workdirs keep their keys)
            ident["checkpoint"] = model.extras["checkpoint"]
        self.key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]

    def _file(self, index: int) -> Path:
        return self.root / f"segment-{self.key}-{index:05d}.pt"

    def finished_segments(self, n: int) -> int:
        """How many of the first `n` segments are checkpointed, without a gap."""
        done = 0
        while done < n and self._file(done).is_file():
            done += 1
        return done

    def save(self, index: int, written: np.ndarray, handoff: torch.Tensor, stitcher_state: dict[str, Any],
             health: dict[str, Any] | None = None, anchor: SegmentAnchor | None = None) -> None:  # fmt: skip
        tmp = self._file(index).with_suffix(".tmp")
        torch.save({"written": written, "handoff": handoff, "stitcher": stitcher_state, "health": health,
                    "anchor": anchor_to_dict(anchor)}, tmp)  # fmt: skip
        os.replace(tmp, self._file(index))  # atomic: a crash leaves the old state or the new, never half

    def load(self, index: int) -> SegmentCheckpoint:
        state = torch.load(self._file(index), weights_only=False)
        return SegmentCheckpoint(state["written"], state["handoff"], state["stitcher"], state.get("health"),
                                 anchor_from_dict(state.get("anchor")))  # fmt: skip

    def clear(self) -> None:
        for f in self.root.glob(f"segment-{self.key}-*.pt"):
            f.unlink(missing_ok=True)

"""Segment stitcher (interim): holds back each segment's overlap and crossfades it into the next.

Drift correction, metrics and reports replace this module in the stitcher issue; the interface
(`DriftConfig`, `Stitcher.new_shot/on_latents/push/flush/report/state_dict`) is the one the render
loop calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class DriftConfig:
    mode: str = "off"
    strength: float = 1.0


class Stitcher:
    def __init__(self, overlap_frames: int, config: DriftConfig | None = None) -> None:
        self.overlap = overlap_frames
        self.config = config or DriftConfig()
        self._held = None

    def new_shot(self) -> np.ndarray:
        held, self._held = self._held, None
        return held if held is not None else np.zeros((0, 0, 0, 3), np.uint8)

    def on_latents(self, latents):
        return latents

    def push(self, frames: np.ndarray) -> np.ndarray:
        o = self.overlap
        if self._held is not None and o:
            w = ((np.arange(o) + 1) / (o + 1)).reshape(-1, 1, 1, 1)
            blend = (self._held * (1 - w) + frames[:o] * w).round().astype(np.uint8)
            frames = np.concatenate([blend, frames[o:]])
        ready, self._held = (frames[:-o], frames[-o:]) if o else (frames, None)
        return ready

    def flush(self) -> np.ndarray:
        return self.new_shot()

    def report(self):
        return None

    def state_dict(self) -> dict:
        return {"held": self._held}

    def load_state_dict(self, state: dict) -> None:
        self._held = state["held"]

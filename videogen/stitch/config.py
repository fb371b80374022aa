"""`DriftConfig`: how the stitcher corrects colour drift and blends seams, validated on construction.

Torch-free and light to import: `videogen.config.spec` validates a render's `drift_correction`
through it in the API process. What each mode does: `docs/drift.md`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import numpy as np

MODES = ("off", "lab-meanstd", "mkl")
BLEND_SPACES = ("linear", "lab")
ANCHORS = ("auto", "source", "new")


@dataclass
class DriftConfig:
    """How the stitcher corrects drift and blends seams. Validated on construction."""

    mode: str = "lab-meanstd"  # "off" | "lab-meanstd" (Reinhard in CIELAB) | "mkl" (covariance map)
    strength: float = 1.0  # 0 = identity, 1 = full move to the anchor (after clamping)
    max_shift: float = 30.0  # the segment mean may move at most this far (dE76, LAB units)
    max_std_ratio: float = 2.0  # per-axis std may be scaled by at most x2 or /2
    ramp: bool = True  # ramp from the previous segment's transform (start) to this one's (end)
    latent: bool = False  # also AdaIN the latents toward the shot's first window before handoff
    latent_factor: float = 0.25  # fraction of the latent AdaIN applied (LTX long pipeline: 0.25)
    reference_image: str | os.PathLike | np.ndarray | None = None  # anchor to an image instead
    blend_space: str = "linear"  # seam crossfade in "linear" light or "lab" (measured: docs/drift.md)
    stats_stride: int | None = None  # spatial subsample stride for statistics; None = ~8k px/frame
    robust: bool = True  # tell content change from drift (videogen.stitch.robust); False: full-frame stats only
    # an extension's colour anchor: "auto" = its own when its prompt differs from the source's
    # last, "source" = the source's, "new" = its own
    anchor: str = "auto"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"`mode` must be one of {', '.join(MODES)}, got {self.mode!r}")
        _check_range("strength", self.strength, 0.0, 1.0)
        _check_range("latent_factor", self.latent_factor, 0.0, 1.0)
        if not _is_number(self.max_shift) or not self.max_shift >= 0:
            raise ValueError(f"`max_shift` must be a number >= 0 (LAB units), got {self.max_shift!r}")
        if not _is_number(self.max_std_ratio) or not self.max_std_ratio >= 1:
            raise ValueError(f"`max_std_ratio` must be a number >= 1, got {self.max_std_ratio!r}")
        if self.blend_space not in BLEND_SPACES:
            raise ValueError(f"`blend_space` must be one of {', '.join(BLEND_SPACES)}, got {self.blend_space!r}")
        if self.stats_stride is not None and (not isinstance(self.stats_stride, int) or self.stats_stride < 1):
            raise ValueError(f"`stats_stride` must be a positive integer or None, got {self.stats_stride!r}")
        if self.anchor not in ANCHORS:
            raise ValueError(f"`anchor` must be one of {', '.join(ANCHORS)}, got {self.anchor!r}")
        for name in ("ramp", "latent", "robust"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be a bool, got {getattr(self, name)!r}")
        if isinstance(self.reference_image, (str, os.PathLike)) and not Path(self.reference_image).is_file():
            raise ValueError(f"`reference_image` {str(self.reference_image)!r} does not exist")


def _is_number(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool) and math.isfinite(v)


def _check_range(name: str, v: object, lo: float, hi: float) -> None:
    if not _is_number(v) or not lo <= v <= hi:
        raise ValueError(f"`{name}` must be a number in [{lo:g}, {hi:g}], got {v!r}")

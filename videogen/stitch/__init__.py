"""Stitching chained segments into one video: seam crossfades, colour drift correction, drift report.

Chained segments drift (each a little darker or more tinted than the last). The correction
follows the practice collected in `shared/REFERENCES.md` ("Long video: chaining and drift") and
is described with its measurements in `docs/drift.md`:

* anchor to the *first* segment of a shot (anchoring to the previous one follows the drift);
* one transform per segment, never per frame (per-frame matching flickers);
* fit it on statistics a moving or vanishing object does not dominate, and never move a segment
  farther from its seam neighbour than the drift it removes (`robust`);
* clamp how far statistics may move, scale by `strength`, ramp between segments;
* optionally an AdaIN of per-channel latent mean/std toward the first window before the handoff.

Where things live:

* `stitcher`  `Stitcher`: the timeline (segments, shots, held-back overlap, crash-resume state);
* `config`    `DriftConfig`, `MODES`, `BLEND_SPACES`: the options and their validation (torch-free);
* `transfer`  `ColorTransform`, `fit_transform`: the per-segment LAB map (`lab-meanstd`, `mkl`), clamps;
* `robust`    `RobustStats`, `fit_robust`: drift told from content change (quantiles, background);
* `lut`       `ColorLUT`, `apply_ramped`: a transform baked into a lookup table and applied, ramped;
* `seams`     `crossfade`: blending the overlap frames of two segments;
* `latent`    `adain_latents`: the latent-space correction (torch);
* `stats`     `frame_lab_stats`, `LabStats`: CIELAB statistics on a pixel subsample;
* `colour`    sRGB <-> linear <-> CIELAB, dE76 / dE2000;
* `metrics`   seam jump, flicker, start-end contrast;
* `report`    `DriftReport`, `build_report`: the `<video>.drift.json` figures; `plot`: its PNG.

Nothing here imports torch at module level: the API process validates `DriftConfig` without it.
"""

from videogen.stitch.colour import delta_e76, delta_e2000, lab_to_rgb, rgb_to_lab
from videogen.stitch.config import ANCHORS, BLEND_SPACES, MODES, DriftConfig
from videogen.stitch.latent import adain_latents, latent_channel_stats
from videogen.stitch.lut import ColorLUT, apply_ramped
from videogen.stitch.metrics import flicker_index, frame_steps, start_end_contrast
from videogen.stitch.plot import plot_drift
from videogen.stitch.report import DriftReport, SegmentDrift, build_report
from videogen.stitch.robust import RobustStats, fit_robust
from videogen.stitch.seams import crossfade
from videogen.stitch.stats import LabStats, frame_lab_stats, load_reference_stats
from videogen.stitch.stitcher import Stitcher
from videogen.stitch.transfer import ColorTransform, fit_transform

__all__ = [
    "ANCHORS",
    "BLEND_SPACES",
    "MODES",
    "ColorLUT",
    "ColorTransform",
    "DriftConfig",
    "DriftReport",
    "LabStats",
    "RobustStats",
    "SegmentDrift",
    "Stitcher",
    "adain_latents",
    "apply_ramped",
    "build_report",
    "crossfade",
    "delta_e76",
    "delta_e2000",
    "fit_robust",
    "fit_transform",
    "flicker_index",
    "frame_lab_stats",
    "frame_steps",
    "lab_to_rgb",
    "latent_channel_stats",
    "load_reference_stats",
    "plot_drift",
    "rgb_to_lab",
    "start_end_contrast",
]

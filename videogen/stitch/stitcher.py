"""The stitcher: joins a long video's chained segments into one frame stream.

Per segment it (1) measures the segment's CIELAB statistics on a pixel subsample, (2) fits one
colour transform toward the shot's anchor (the first segment's *original* statistics, or a
reference image), clamped and scaled by `strength`, (3) applies it ramped from the previous
segment's transform at the first frame to this one's at the last, (4) crossfades the first O
frames with the previous segment's held-back last O frames, and (5) measures what it emits for
the drift report. The other modules of `videogen.stitch` hold the colour science (map in its
`__init__`); this module holds the timeline.

Frame accounting (exact). Segment 0 of a shot has F0 frames; every later segment's first O
frames show the same moments as the previous segment's last O frames. `push()` holds back the
last O frames of each segment and emits everything before them (for a later segment: the O-frame
crossfade first). `flush()` emits the held frames. A shot therefore writes
F0 + sum_{i>0} (F_i - O) frames. O = 0 means hard cuts and no blending.

Shots. `new_shot()` starts a shot: it returns the previous shot's held-back frames (the caller
writes them, possibly an empty array), resets the anchor, and the next `push()` starts fresh
with no crossfade: a new shot's first segment does not overlap the previous shot, and no
correction acts across the cut.

Usage, as the render loop calls it::

    st = Stitcher(overlap_frames=O, config=DriftConfig(mode="lab-meanstd"))
    for shot in shots:
        writer.write(st.new_shot())
        for segment in shot:
            latents = st.on_latents(latents)      # before decode and before the handoff
            writer.write(st.push(decode(latents)))
    writer.write(st.flush())
    st.report().write(video_path)                 # <video>.drift.json and .drift.png
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from videogen.stitch.config import DriftConfig
from videogen.stitch.latent import adain_latents, latent_channel_stats
from videogen.stitch.lut import ColorLUT, apply_ramped
from videogen.stitch.report import DriftReport, build_report
from videogen.stitch.robust import RobustStats, content_since_anchor, fit_robust, limit_to_seam, robust_means
from videogen.stitch.seams import crossfade
from videogen.stitch.stats import LabStats, frame_lab_stats, lab_moments, load_reference_image
from videogen.stitch.transfer import ColorTransform

if TYPE_CHECKING:
    import torch

__all__ = ["DriftConfig", "Stitcher"]

STATE_VERSION = 2  # 2 adds the robust statistics; a version-1 state loads without them (plain fits)
# the seam alignment is continuity, not anchoring: full strength, clamps of the defaults
_SEAM_FIT = DriftConfig(mode="lab-meanstd", strength=1.0)
SEAM_MATCH_FRAMES = 4  # without overlap: frames each side of a hard seam matched (0.25 s at 16 fps)


class Stitcher:
    """Seam blending + drift correction + drift metrics for one output video (see module doc)."""

    def __init__(self, overlap_frames: int = 0, config: DriftConfig | None = None, fps: float | None = None) -> None:
        if not isinstance(overlap_frames, (int, np.integer)) or isinstance(overlap_frames, bool) or overlap_frames < 0:
            raise ValueError(f"`overlap_frames` must be an integer >= 0, got {overlap_frames!r}")
        self.overlap = int(overlap_frames)
        self.config = config if config is not None else DriftConfig()
        if not isinstance(self.config, DriftConfig):
            raise ValueError(f"`config` must be a DriftConfig, got {type(self.config).__name__}")
        self.fps = fps
        self._reference: LabStats | None = None
        self._reference_rb: RobustStats | None = None
        if self.config.reference_image is not None:
            image = load_reference_image(self.config.reference_image)[None]
            self._reference = LabStats.of_frames(image, self.config.stats_stride)
            self._reference_rb = RobustStats.of_frames(image, self.config.stats_stride)
        self._frame_shape: tuple[int, int] | None = None  # (H, W) fixed for the whole video
        # timeline
        self._shot = -1  # index of the current shot; -1 until the first new_shot()/push()
        self._seg_in_shot = 0  # segments pushed in the current shot
        self._emitted = 0  # frames returned so far
        self._held: np.ndarray | None = None  # last O corrected frames of the previous segment
        self._anchor: LabStats | None = None
        self._prev: ColorTransform | None = None  # the previous segment's transform (kept in the saved state)
        self._tail_stats: LabStats | None = None  # LAB stats of the previous segment's corrected tail
        self._latent_anchor: tuple[np.ndarray, np.ndarray] | None = None
        self._latent_segments = 0  # on_latents() calls in the current shot
        # robust statistics (videogen.stitch.robust): the anchor's, the previous segment's original
        # (its background seeds this one's), its corrected robust mean (the seam neighbour), its
        # corrected tail's (the seam fit); and whether the next segment sets a new anchor
        self._anchor_rb: RobustStats | None = None
        self._prev_rb: RobustStats | None = None
        self._prev_out: np.ndarray | None = None
        self._tail_rb: RobustStats | None = None
        self._reanchor = False
        self._content = 0.0  # content change since the anchor (`content_since_anchor`)
        self._fits: list[dict] = []  # per corrected segment: content weight, seam scale (the report)
        # measurements of the output
        self._stats: list[np.ndarray] = []  # (T, 6) blocks of per-frame LAB mean/std
        self._segment_starts: list[int] = []
        self._segment_shots: list[int] = []
        self._seams: list[tuple[int, int]] = []
        self._shot_starts: list[int] = []
        self._anchor_means: list[np.ndarray] = []

    # -- timeline ---------------------------------------------------------------------------------

    def new_shot(self) -> np.ndarray:
        """Start a shot; returns the previous shot's held-back frames for the caller to write."""
        tail = self._release_held()
        self._shot += 1
        self._seg_in_shot = 0
        self._latent_segments = 0
        self._anchor = None
        self._prev = None
        self._tail_stats = None
        self._latent_anchor = None
        self._anchor_rb = self._prev_rb = self._prev_out = self._tail_rb = None
        self._reanchor = False
        self._content = 0.0
        self._shot_starts.append(self._emitted)
        return tail

    def reanchor(self) -> None:
        """The next segment sets a new colour anchor (its own statistics) without a cut: the seam
        crossfade and the ramp from the previous segment stay, so the join is as smooth as any
        seam, and the colours then settle on the new content's own (an extension with a new
        prompt). A no-op before the first segment of a shot, which anchors anyway."""
        self._reanchor = self._seg_in_shot > 0

    def on_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Segment latents `(B, C, F, h, w)` after denoising, before decode and handoff. With
        `config.latent`, the shot's first call sets the anchor and later calls return latents
        AdaIN-ed toward it (clamped, ramped, `latent_factor * strength`); otherwise the input."""
        if not self.config.latent:
            return latents
        if latents.ndim != 5:
            raise ValueError(f"`latents` must be (B, C, F, h, w), got shape {tuple(latents.shape)}")
        if self._shot < 0:
            self.new_shot()
        self._latent_segments += 1
        if self._latent_anchor is None:
            self._latent_anchor = latent_channel_stats(latents)
            return latents
        mean, std = self._latent_anchor
        if mean.shape != tuple(latents.shape[:2]):
            raise ValueError(
                f"`latents` batch/channels {tuple(latents.shape[:2])} differ from the anchor's {mean.shape}"
            )
        return adain_latents(latents, mean, std, self.config)

    def push(self, frames: np.ndarray, inplace: bool = False) -> np.ndarray:
        """Add a decoded segment `(T, H, W, 3)` uint8 (or RGB0 `(T, H, W, 4)`, the fast path of
        `drift fix`); returns the frames ready to write, same channel count as the input.

        `inplace=True` (RGB0 input only) lets the stitcher correct and crossfade `frames` in place
        and return a view of it: no segment-sized allocation (`drift fix` hands it a buffer it
        owns; the buffer stays busy until the returned frames are written)."""
        frames = np.asarray(frames)
        self._check_frames(frames)
        if self._shot < 0:
            self.new_shot()
        first = self._seg_in_shot == 0
        self._check_overlap(len(frames), first)
        inplace = inplace and frames.shape[-1] == 4 and frames.flags.writeable and frames.flags.c_contiguous
        # (1)-(3): one transform per segment toward the anchor, ramped
        if self.config.mode != "off" and self.config.strength > 0:
            corrected, owned = self._correct(frames, first, inplace)
        else:
            if first or self._reanchor:
                self._anchor = (
                    self._reference
                    if self._reference is not None and first
                    else LabStats.of_frames(frames, self.config.stats_stride)
                )
                self._reanchor = False
            corrected, owned = frames, inplace
        if first:
            assert self._anchor is not None
            self._anchor_means.append(self._anchor.mean.copy())
        # (4): seam crossfade with the held-back frames
        return self._blend_and_emit(corrected, owned, first)

    def flush(self) -> np.ndarray:
        """The held-back frames of the last segment (call once, at the end)."""
        return self._release_held()

    # -- one segment, step by step ----------------------------------------------------------------

    def _check_frames(self, frames: np.ndarray) -> None:
        """uint8 `(T, H, W, 3|4)` of the video's frame size (the first segment fixes it)."""
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] not in (3, 4):
            raise ValueError(f"`frames` must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
        if self._frame_shape is None:
            self._frame_shape = (frames.shape[1], frames.shape[2])
        elif frames.shape[1:3] != self._frame_shape:
            raise ValueError(f"`frames` are {frames.shape[2]}x{frames.shape[1]}, earlier segments were "
                             f"{self._frame_shape[1]}x{self._frame_shape[0]}")  # fmt: skip

    def _check_overlap(self, num_frames: int, first: bool) -> None:
        """A later segment must cover the overlap, and so must the frames held back from the last."""
        overlap = self.overlap
        if num_frames < 1 or (not first and num_frames < overlap):
            raise ValueError(
                f"`frames`: a later segment with overlap {overlap} needs at least {overlap} frames, got {num_frames}"
            )
        if not first and overlap and (self._held is None or len(self._held) < overlap):
            raise ValueError(f"`frames`: the previous segment was shorter than the {overlap}-frame overlap")

    def _correct(self, frames: np.ndarray, first: bool, inplace: bool) -> tuple[np.ndarray, bool]:
        """Fit this segment's transform toward the anchor from its ORIGINAL frames and apply it,
        ramped in from the seam. Returns the corrected frames and whether they may be written
        (ours, or the caller's with `inplace`)."""
        cfg, T = self.config, len(frames)
        k = self.overlap if self.overlap else min(SEAM_MATCH_FRAMES, T)  # frames matched at a seam
        mean, cov = lab_moments(frames, cfg.stats_stride)  # per frame, pooled below
        stats = LabStats.of_moments(mean, cov)
        seed = None if first or self._prev_rb is None else self._prev_rb.bg_mean  # track the background
        robust = RobustStats.of_frames(frames, cfg.stats_stride, seed) if cfg.robust else None
        if first or self._reanchor:
            use_reference = first and self._reference is not None
            self._anchor = self._reference if use_reference else stats
            self._anchor_rb = self._reference_rb if use_reference else robust
            self._reanchor = False
            self._content = 0.0
        transform = self._fit(stats, robust, first)
        lut = None if transform.is_identity else ColorLUT(transform)
        # a shot's first segment has no ramp-in
        start_lut = lut if first else self._ramp_start(frames[:k], mean[:k], cov[:k], robust)
        corrected = apply_ramped(frames, start_lut, lut, cfg.ramp, out=frames if inplace else None)
        self._prev, self._prev_rb = transform, robust  # its 32 MiB table is not kept: at most two live per push
        out_mean = robust_means(robust, stats, robust, stats)[0]
        self._prev_out = transform.apply_lab(out_mean)
        tail = corrected[T - k :]
        self._tail_stats = LabStats.of_frames(tail, cfg.stats_stride)
        tail_seed = self._prev_out if robust is not None and robust.bg_mean is not None else None
        self._tail_rb = RobustStats.of_frames(tail, cfg.stats_stride, tail_seed) if cfg.robust else None
        return corrected, inplace or corrected is not frames

    def _fit(self, stats: LabStats, robust: RobustStats | None, first: bool) -> ColorTransform:
        """This segment's transform toward the anchor: robust to content change, and never moving
        the segment farther from its seam neighbour than the drift it removes (`videogen.stitch.robust`)."""
        assert self._anchor is not None  # set by the shot's first segment
        change = None
        if robust is not None and self._anchor_rb is not None:
            prev_rb = None if first else self._prev_rb
            change = content_since_anchor(self._content, robust, prev_rb, self._anchor_rb, self.config.max_std_ratio)
            self._content = change
        transform, weight = fit_robust(stats, robust, self._anchor, self._anchor_rb, self.config, change)
        scale = 1.0
        if self.config.robust and not first and self._prev_out is not None:
            mean, anchor = robust_means(robust, stats, self._anchor_rb, self._anchor)
            transform, scale = limit_to_seam(transform, mean, anchor, self._prev_out)
        self._fits.append({"segment": len(self._segment_starts), "content_weight": round(weight, 4),
                           "seam_scale": round(scale, 4)})  # fmt: skip
        return transform

    def _ramp_start(self, head: np.ndarray, head_mean: np.ndarray, head_cov: np.ndarray,
                    robust: RobustStats | None) -> ColorLUT | None:  # fmt: skip
        """The ramp's start for a later segment, from its first k frames (original), their moments
        `(k, 3)`, `(k, 3, 3)` and the segment's robust statistics (their background seeds the head's).

        The ramp starts where the previous segment ended: the first frames are matched to the
        previous segment's corrected last frames (with overlap: the same moments; without: the
        adjacent ones), so no drift step is left at the seam (docs/drift.md, "Correction", step 4).
        Without `ramp` the start is not used. The previous segment of a shot went through
        `_correct` too, so its tail statistics exist whenever this runs."""
        if not self.config.ramp or self._tail_stats is None:
            return None
        head_rb = None
        if robust is not None:
            head_rb = RobustStats.of_frames(head, self.config.stats_stride, robust.bg_mean)
        head_stats = LabStats.of_moments(head_mean, head_cov)
        seam, _weight = fit_robust(head_stats, head_rb, self._tail_stats, self._tail_rb, _SEAM_FIT)
        return None if seam.is_identity else ColorLUT(seam)

    def _blend_and_emit(self, corrected: np.ndarray, owned: bool, first: bool) -> np.ndarray:
        """Record the segment on the timeline, crossfade its first O frames with the held-back
        ones, hold back its own last O frames and emit the rest."""
        overlap, T = self.overlap, len(corrected)
        self._segment_starts.append(self._emitted)
        self._segment_shots.append(self._shot)
        keep_back = min(overlap, T)  # a shot shorter than the overlap is a single segment: hold it all
        if not first and overlap == 0:
            self._seams.append((self._emitted, self._emitted))  # hard cut inside the shot
        elif not first:
            assert self._held is not None  # _check_overlap
            if not owned:
                corrected = corrected.copy()  # never write into the caller's frames
            # in place: the blend replaces the first O frames (they show the same moments); a
            # short segment (the trimmed last one of a shot, T < 2*O) holds back part of its own
            # crossfade, with the same arithmetic
            crossfade(self._held, corrected[:overlap], self.config.blend_space, out=corrected[:overlap])
            self._seams.append((self._emitted, self._emitted + overlap))
        body = corrected[: T - keep_back]
        self._held = corrected[T - keep_back :].copy() if overlap else None
        self._seg_in_shot += 1
        return self._emit(body)

    # -- report -----------------------------------------------------------------------------------

    def report(self) -> DriftReport:
        """Drift figures of everything emitted so far (held-back frames are not yet included)."""
        stats = np.concatenate(self._stats) if self._stats else np.zeros((0, 6))
        report = build_report(
            stats,
            self._segment_starts,
            self._segment_shots,
            self._seams,
            self._shot_starts,
            self._anchor_means,
            fps=self.fps,
        )
        if self._fits:
            report.extra["corrections"] = [dict(f) for f in self._fits]
        return report

    # -- crash-resume -----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything needed to continue identically: plain numpy / Python types, picklable."""
        return {
            "version": STATE_VERSION,
            "overlap": self.overlap,
            "frame_shape": None if self._frame_shape is None else list(self._frame_shape),
            "shot": self._shot,
            "seg_in_shot": self._seg_in_shot,
            "emitted": self._emitted,
            "held": None if self._held is None else self._held.copy(),
            "anchor": None if self._anchor is None else self._anchor.to_dict(),
            "prev_transform": None if self._prev is None else self._prev.to_dict(),
            "tail_stats": None if self._tail_stats is None else self._tail_stats.to_dict(),
            "latent_anchor": None if self._latent_anchor is None else [a.copy() for a in self._latent_anchor],
            "latent_segments": self._latent_segments,
            "stats": np.concatenate(self._stats) if self._stats else np.zeros((0, 6)),
            "segment_starts": list(self._segment_starts),
            "segment_shots": list(self._segment_shots),
            "seams": [list(s) for s in self._seams],
            "shot_starts": list(self._shot_starts),
            "anchor_means": [m.copy() for m in self._anchor_means],
            "anchor_robust": None if self._anchor_rb is None else self._anchor_rb.to_dict(),
            "prev_robust": None if self._prev_rb is None else self._prev_rb.to_dict(),
            "prev_out": None if self._prev_out is None else self._prev_out.copy(),
            "tail_robust": None if self._tail_rb is None else self._tail_rb.to_dict(),
            "reanchor": self._reanchor,
            "content": self._content,
            "fits": [dict(f) for f in self._fits],
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") not in (1, STATE_VERSION):
            raise ValueError(f"`state` version {state.get('version')!r} is not 1 or {STATE_VERSION}")
        if state["overlap"] != self.overlap:
            raise ValueError(f"`state` was saved with overlap {state['overlap']}, this stitcher has {self.overlap}")
        shape = state["frame_shape"]
        self._frame_shape = None if shape is None else (shape[0], shape[1])
        self._shot = int(state["shot"])
        self._seg_in_shot = int(state["seg_in_shot"])
        self._emitted = int(state["emitted"])
        self._held = None if state["held"] is None else np.array(state["held"], np.uint8)
        self._anchor = None if state["anchor"] is None else LabStats.from_dict(state["anchor"])
        self._prev = None if state["prev_transform"] is None else ColorTransform.from_dict(state["prev_transform"])
        self._tail_stats = None if state["tail_stats"] is None else LabStats.from_dict(state["tail_stats"])
        la = state["latent_anchor"]
        self._latent_anchor = None if la is None else (np.asarray(la[0]), np.asarray(la[1]))
        self._latent_segments = int(state["latent_segments"])
        self._stats = [np.asarray(state["stats"], np.float64)]
        self._segment_starts = list(state["segment_starts"])
        self._segment_shots = list(state["segment_shots"])
        self._seams = [(a, b) for a, b in state["seams"]]
        self._shot_starts = list(state["shot_starts"])
        self._anchor_means = [np.asarray(m) for m in state["anchor_means"]]
        self._anchor_rb = RobustStats.from_dict(state.get("anchor_robust"))  # version 1: None, plain fits
        self._prev_rb = RobustStats.from_dict(state.get("prev_robust"))
        prev_out = state.get("prev_out")
        self._prev_out = None if prev_out is None else np.asarray(prev_out, np.float64)
        self._tail_rb = RobustStats.from_dict(state.get("tail_robust"))
        self._reanchor = bool(state.get("reanchor", False))
        self._content = float(state.get("content", 0.0))
        self._fits = [dict(f) for f in state.get("fits", [])]

    # -- internals --------------------------------------------------------------------------------

    def _emit(self, frames: np.ndarray) -> np.ndarray:
        if len(frames):
            self._stats.append(frame_lab_stats(frames, self.config.stats_stride))
            self._emitted += len(frames)
        return frames

    def _release_held(self) -> np.ndarray:
        held, self._held = self._held, None
        if held is None:
            shape = (0, *self._frame_shape, 3) if self._frame_shape else (0, 0, 0, 3)
            return np.zeros(shape, np.uint8)
        return self._emit(held)

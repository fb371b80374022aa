"""Segment planning: a timeline of shots -> segments whose frame counts the codec accepts.

Wan's causal VAE encodes `tf*k + 1` frames into `k + 1` latent frames (tf = 4): the first latent
frame holds one frame, every later one `tf` frames. A long shot becomes a chain of segments:

    segment 0:  L latent frames              -> tf*(L-1)+1 frames
    segment i:  P prefix latent frames (the previous segment's last P, held clean)
                + n new latent frames        -> O + tf*n frames, of which the first
                                                O = tf*(P-1)+1 repeat the previous segment's end

The overlap O is what the stitcher blends across the seam; each continuation adds tf*n new
frames. The last segment of a shot is shortened (n as small as needed) and trimmed, so a shot
has exactly round(seconds * fps) frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from videogen.errors import InvalidOption


@dataclass(frozen=True)
class SegmentPlan:
    index: int  # position in the whole render
    shot: int  # which shot of the timeline
    prompt: str
    prefix_latent_frames: int  # P: clean latent frames handed over from the previous segment (0 = fresh)
    latent_frames: int  # P + n: the whole latent sequence the denoiser sees
    frames: int  # decoded frames, tf*(latent_frames-1)+1
    overlap_frames: int  # leading frames that repeat the previous segment (0 for a shot's first)
    keep_frames: int  # leading decoded frames that are used (overlap included); the rest is trimmed

    @property
    def new_frames(self) -> int:
        return self.keep_frames - self.overlap_frames

    @property
    def first_in_shot(self) -> bool:
        return self.prefix_latent_frames == 0


@dataclass(frozen=True)
class RenderPlan:
    segments: tuple[SegmentPlan, ...]
    fps: float
    total_frames: int
    temporal_factor: int

    def __len__(self) -> int:
        return len(self.segments)


def frames_for(seconds: float, fps: float, option: str = "seconds") -> int:
    """Exact frame count of `seconds` at `fps`; it must come out whole (to 1e-6)."""
    exact = seconds * fps
    n = round(exact)
    if abs(exact - n) > 1e-6 * max(1.0, exact):
        raise InvalidOption(option, seconds, f"at {fps:g} fps gives {exact:g} frames; must be a whole number")
    if n < 1:
        raise InvalidOption(option, seconds, f"at {fps:g} fps gives no frame")
    return n


def plan_render(
    shots: list[tuple[str, int]],
    *,
    fps: float,
    segment_frames: int,
    overlap_frames: int,
    temporal_factor: int = 4,
    continue_first: bool = False,
) -> RenderPlan:
    """Plan `shots` [(prompt, frames)] into segments of about `segment_frames` frames (the nearest
    tf*k+1).

    `overlap_frames` must be tf*m + 1 (m >= 0) so that it is a whole number of latent frames,
    and a segment must hold the overlap plus at least one new latent frame.

    `continue_first`: the first shot continues an earlier video (an extension): its first segment
    is already a continuation (clean prefix, overlap), and its frames count after the overlap.
    """
    tf = temporal_factor
    if overlap_frames < 1 or (overlap_frames - 1) % tf:
        examples = ", ".join(str(tf * m + 1) for m in (1, 2, 4))
        raise InvalidOption("overlap_frames", overlap_frames, f"must be {tf}k+1 for this model (e.g. {examples})")
    prefix = (overlap_frames - 1) // tf + 1  # P latent frames
    # L latent frames per full segment: the nearest legal length (5 s at 16 fps = 80 -> Wan's 81).
    seg_latents = int((segment_frames - 1) / tf + 0.5) + 1
    if seg_latents <= prefix:
        raise InvalidOption(
            "segment_seconds",
            segment_frames / fps,
            f"a segment of {segment_frames} frames cannot hold the {overlap_frames}-frame overlap plus new frames",
        )

    segments: list[SegmentPlan] = []
    for shot_index, (prompt, total) in enumerate(shots):
        produced = 0
        if not (continue_first and shot_index == 0):
            # Fresh segment: just enough latent frames for the shot, at most a full segment.
            latents = min(seg_latents, math.ceil((total - 1) / tf) + 1)
            frames = tf * (latents - 1) + 1
            keep = min(frames, total)
            segments.append(SegmentPlan(len(segments), shot_index, prompt, 0, latents, frames, 0, keep))
            produced = keep
        while produced < total:
            remaining = total - produced
            new_latents = min(seg_latents - prefix, math.ceil(remaining / tf))
            frames = overlap_frames + tf * new_latents
            new = min(tf * new_latents, remaining)
            segments.append(
                SegmentPlan(
                    len(segments), shot_index, prompt, prefix, prefix + new_latents, frames,
                    overlap_frames, overlap_frames + new,
                )
            )  # fmt: skip
            produced += new
    return RenderPlan(tuple(segments), fps, sum(t for _, t in shots), tf)

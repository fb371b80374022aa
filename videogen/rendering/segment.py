"""One segment of a render: its inputs, its clock, and the denoise -> stitch stages that turn it
into frames.

A segment is denoised with its shot's prompt (and the negative prompt under guidance), from a
clean prefix: the previous segment's last latent frames (a continuation), the start image (the
first segment of an image-to-video render) or nothing (a shot's first segment). The stitcher
corrects latent drift before the latents are handed on, then blends the decoded frames into the
seam and corrects their colour (`videogen.stitch.stitcher`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from videogen.config.plan import RenderPlan, SegmentPlan
from videogen.config.resolve import ResolvedRender
from videogen.rendering.events import SegmentRetried
from videogen.rendering.gate import HealthHistory, gated_sample
from videogen.rendering.image import encode_start_image
from videogen.rendering.tail import RenderTail
from videogen.sampling.health import attempt_noise, retry_guidance
from videogen.sampling.loop import Preview, SegmentAnchor, StepProgress, anchor_latent, denoise_segment


@dataclass(frozen=True)
class SegmentInputs:
    """What every segment of one render is denoised with."""

    model: Any  # videogen.models.loader.VideoModel
    resolved: ResolvedRender
    embeds: dict[str, torch.Tensor]  # (1, L, D) per distinct prompt
    uncond: torch.Tensor | None  # (1, L, D) negative prompt; None without guidance
    image_latents: torch.Tensor | None  # (1, C, 1, h, w): the start image, the first segment's prefix
    times: list[float]  # each segment's clock (`segment_times`)
    offset: int  # an extension's segments continue the source's numbering (and so its noise stream)
    extends: bool  # the render continues a source video: its first segment is no new shot
    cancel: Callable[[], bool] | None


@dataclass(frozen=True)
class SegmentOutput:
    latents: torch.Tensor  # (1, C, F, h, w), after latent drift correction: the next segment's prefix
    frames: np.ndarray  # (T, H, W, 3) uint8: what the segment adds to the video
    stitcher_state: dict[str, Any] | None  # the last segment's, before the final flush (for the tail)
    attempts: int = 1  # samplings (the health gate's retries + 1)
    failed_checks: tuple[str, ...] = ()  # checks the kept attempt still fails


def segment_times(plan: RenderPlan, time_end: float | None = None) -> list[float]:
    """Each segment's first latent frame's time within its shot, in latent frames: 0 for a shot's
    first segment; a continuing segment's prefix is the previous segment's last latent frames, so
    it starts that many frames before the previous one ended. `time_end`: where the source of an
    extension ended (None: unknown, count from 0). Models with time-dependent conditioning (the
    built-in model's moving frames) see one clock across a shot's segments, as in training."""
    out: list[float] = []
    end = time_end
    for seg in plan.segments:
        t = 0.0 if seg.first_in_shot or end is None else end - seg.prefix_latent_frames
        out.append(t)
        end = t + seg.latent_frames
    return out


def segment_inputs(model: Any, resolved: ResolvedRender, source: RenderTail | None,
                   cancel: Callable[[], bool] | None) -> SegmentInputs:  # fmt: skip
    """Prompt embeddings (once per distinct prompt), the start image's latent, every segment's clock."""
    settings, plan = resolved.settings, resolved.plan
    encode = model.prompt_encoder.encode
    embeds = {p: encode([p]) for p in dict.fromkeys(seg.prompt for seg in plan.segments)}
    uncond = encode([resolved.negative_prompt]) if settings.guidance > 1.0 else None
    image = (encode_start_image(resolved.image, model, settings, resolved.image_fit)
             if resolved.image and source is None else None)  # fmt: skip
    times = segment_times(plan, source.time_end if source is not None else None)
    offset = source.segments if source is not None else 0
    return SegmentInputs(model, resolved, embeds, uncond, image, times, offset, source is not None, cancel)


def make_segment(seg: SegmentPlan, inputs: SegmentInputs, stitcher: Any, handoff: torch.Tensor | None,
                 history: HealthHistory | None, *, last: bool, keep_state: bool,
                 anchor: SegmentAnchor | None = None, redo: int = 0) -> Generator[StepProgress | SegmentRetried, None, SegmentOutput]:  # fmt: skip
    """Denoise `seg` and stitch it: yields a `StepProgress` per step (and a `SegmentRetried`
    before each re-sampling the health gate asks for), returns its frames. `handoff`: the
    previous segment's latents; `history`: the gate's memory (None: the gate is off); `last`: the
    render's last segment (the stitcher flushes what it holds back); `keep_state`: also return
    the stitcher's state before that flush; `anchor`: the shot's anchor frame (`segment_anchor`);
    `redo`: how many times the render generated `seg` before (a backtrack): its attempts then
    draw noise no earlier generation of it drew."""
    model, settings = inputs.model, inputs.resolved.settings
    first = redo * (1 + inputs.resolved.health.retries)  # the attempt numbers of earlier generations come first
    written: list[np.ndarray] = []
    if seg.first_in_shot and (seg.index > 0 or not inputs.extends):
        written.append(stitcher.new_shot())  # the previous shot's held-back tail

    def sample(attempt: int, previews: tuple[float, ...] = ()) -> Generator[StepProgress | Preview, None, torch.Tensor]:
        return _denoise(seg, inputs, handoff, first + attempt, anchor, previews)

    def decode(latents: torch.Tensor, glance: bool = False) -> np.ndarray:
        from videogen.models.codec import video_to_uint8

        video = model.codec.glance(latents) if glance else model.codec.decode(latents)
        return video_to_uint8(video)[: seg.keep_frames]

    gate = None
    if history is None:  # the gate is off: today's path, step for step (no preview asked: steps only)
        latents = yield from cast(Generator[StepProgress, None, torch.Tensor], sample(0))
    else:  # the gate judges the model's own output, before drift correction
        gate = yield from gated_sample(seg, inputs, history, sample, decode, lambda latents: decode(latents, True))
        latents = gate.latents
    corrected = stitcher.on_latents(latents)
    frames = gate.frames if gate is not None and corrected is latents else decode(corrected)
    written.append(stitcher.push(frames))
    state = stitcher.state_dict() if last and keep_state else None
    if last:
        written.append(stitcher.flush())
    out = concat_frames(written, settings.height, settings.width)
    return SegmentOutput(corrected, out, state, gate.attempts if gate else 1, gate.failed if gate else ())


def _denoise(seg: SegmentPlan, inputs: SegmentInputs, handoff: torch.Tensor | None, attempt: int,
             anchor: SegmentAnchor | None, previews: tuple[float, ...] = ()) -> Generator[StepProgress | Preview, None, torch.Tensor]:  # fmt: skip
    """Denoise `seg` from `attempt`'s noise (attempt 0: the segment's own, `segment_noise`);
    `previews`: the noise levels at which the gate takes a look (`run_gate`)."""
    model, settings = inputs.model, inputs.resolved.settings
    h, w = settings.height // model.codec.spatial_factor, settings.width // model.codec.spatial_factor
    index = inputs.offset + seg.index
    shape = (1, model.codec.latent_channels, seg.latent_frames, h, w)
    return denoise_segment(
        model,
        cond=inputs.embeds[seg.prompt],
        uncond=inputs.uncond,
        latent_frames=seg.latent_frames,
        latent_size=(h, w),
        prefix=_prefix(seg, inputs, handoff),
        steps=settings.steps,
        guidance=retry_guidance(inputs.resolved.health, settings.guidance, attempt),
        flow_shift=settings.flow_shift,
        seed=inputs.resolved.seed,
        segment=index,
        cancel=inputs.cancel,
        time=inputs.times[seg.index],
        noise=attempt_noise(shape, inputs.resolved.seed, index, attempt) if attempt else None,
        cache=inputs.resolved.cache,
        context_noise=model.preset.context_noise if seg.prefix_latent_frames else 0.0,
        continuation=inputs.resolved.continuation,  # the start image's prefix too: one kind of conditioning
        guidance_2=settings.guidance_2,
        anchor=anchor if _anchored(seg, anchor) else None,
        preview_sigmas=previews,
    )


def _anchored(seg: SegmentPlan, anchor: SegmentAnchor | None) -> bool:
    """Whether `seg` sees `anchor` in place of its prefix's first latent frame: a continuation of a
    handoff of >= 2 latent frames, under the prompt the anchor was drawn with."""
    return anchor is not None and seg.prefix_latent_frames >= 2 and anchor.prompt == seg.prompt


def _prefix(seg: SegmentPlan, inputs: SegmentInputs, handoff: torch.Tensor | None) -> torch.Tensor | None:
    """The clean latent frames `seg` starts from: (1, C, P, h, w), or None for a fresh start."""
    if seg.index == 0 and inputs.image_latents is not None and seg.latent_frames > 1:
        return inputs.image_latents  # image-to-video: the first latent frame is the image, held clean
    if seg.first_in_shot:
        return None
    assert handoff is not None, "a continuing segment follows one that handed over its latents"
    return handoff[:, :, -seg.prefix_latent_frames :]


def segment_anchor(seg: SegmentPlan, inputs: SegmentInputs, latents: torch.Tensor,
                   current: SegmentAnchor | None) -> SegmentAnchor | None:  # fmt: skip
    """The anchor the segments after `seg` (whose latents are `latents`) are anchored on: with a
    preset's `anchor_frame`, a shot's first segment (or the first under a new prompt) sets it to
    its latent frame `anchor_frame`; otherwise `current` stands. None: the preset has none."""
    frame = inputs.model.preset.anchor_frame
    if frame is None:
        return None
    if current is not None and not seg.first_in_shot and current.prompt == seg.prompt:
        return current
    frame = min(frame, latents.shape[2] - 1)
    latent = anchor_latent(inputs.model.codec, latents, frame).detach().to("cpu")
    return SegmentAnchor(latent, inputs.times[seg.index] + frame, seg.prompt)


def concat_frames(parts: Sequence[np.ndarray | None], height: int, width: int) -> np.ndarray:
    """(T, H, W, 3) uint8: `parts` joined in time, skipping empty ones."""
    kept = [p for p in parts if p is not None and len(p)]
    if not kept:
        return np.zeros((0, height, width, 3), np.uint8)
    return np.concatenate(kept)

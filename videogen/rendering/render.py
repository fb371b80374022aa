"""`render()`: the one code path from a `RenderSpec` to an MP4, shared by the CLI, server and workers.

    for event in render(spec, "out.mp4"):
        ...  # RenderStarted, SegmentStarted, StepProgress, SegmentFinished, RenderFinished

`render()` reads as its stages: load the model -> resolve the request and plan its segments
(`videogen.config.resolve`) -> restore (checkpoints of an interrupted run, an extension's source)
-> per segment: denoise -> stitch (`segment.make_segment`) -> write -> checkpoint -> report ->
finish (length check, drift report, tail). See docs/architecture.md for the flow per segment.

Callers differ only in where events go. Stopping the generator (or `cancel()` returning True)
stops the work within one denoising step and deletes the partial video. With `workdir` set,
every finished segment is checkpointed there (frames written, handoff latents, stitcher state;
each file written atomically), and a render restarted with the same spec and workdir resumes
after the last finished segment, producing the same video an uninterrupted render would.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from videogen.config.geometry import geometry_of
from videogen.config.plan import RenderPlan, SegmentPlan
from videogen.config.resolve import ResolvedRender, ResolvedSettings, resolve_render
from videogen.config.spec import RenderSpec
from videogen.errors import RenderCancelled
from videogen.io.video import VideoWriter, check_output_path
from videogen.models.lora import load_loras, lora_adapters
from videogen.rendering.checkpoints import SegmentCheckpoints
from videogen.rendering.events import Event, RenderFinished, RenderStarted, SegmentFinished, SegmentStarted
from videogen.rendering.gate import HealthHistory
from videogen.rendering.segment import SegmentInputs, make_segment, segment_anchor, segment_inputs
from videogen.rendering.tail import RenderTail, load_tail, save_tail
from videogen.sampling.loop import SegmentAnchor


def prepare(spec: RenderSpec, model: Any, continue_first: bool = False) -> tuple[ResolvedSettings, RenderPlan]:
    """Validate `spec` against a loaded `model` without rendering: settings and plan, or InvalidOption."""
    resolved = resolve_render(spec, model.preset, geometry_of(model), continue_first=continue_first)
    return resolved.settings, resolved.plan


@dataclass
class _Progress:
    """What the segment loop carries from one segment to the next."""

    handoff: torch.Tensor | None = None  # (1, C, F, h, w): the last segment's latents, on the CPU
    skip: int = 0  # leading output frames the source video already shows (an extension's overlap)
    frames_written: int = 0
    tail: RenderTail | None = None  # the last segment's tail, when one is to be saved
    health: HealthHistory | None = None  # the health gate's memory (None: the gate is off)
    anchor: SegmentAnchor | None = None  # the shot's anchor frame (a preset's `anchor_frame`; `segment_anchor`)


def render(
    spec: RenderSpec,
    output: str | os.PathLike,
    *,
    model: Any = None,
    workdir: str | os.PathLike | None = None,
    cancel: Callable[[], bool] | None = None,
    thumbnail: str | os.PathLike | bool | None = True,
    continue_from: str | os.PathLike | None = None,
    tail: str | os.PathLike | None = None,
) -> Iterator[Event]:
    """Render `spec` to `output` (see the module docstring).

    `tail`: where to save this render's tail (last segment's latents, stitcher state, settings),
    so that a later render can continue it. `continue_from`: such a tail file; this render then
    continues that video (an extension): its first segment is conditioned on the source's last
    latent frames, colour stays anchored to the source's first segment, and `output` holds only
    the new frames, which follow the source's last frame (`videogen.io.video.concat_videos` joins them
    without re-encoding).
    """
    from videogen.stitch.stitcher import Stitcher

    # 1. Load the model (unless the caller holds one).
    spec.validate()
    output = check_output_path(output)
    if model is None:
        from videogen.models.loader import load_model

        model = load_model(spec.model, device=spec.device, dtype=spec.dtype, attention=spec.attention)
    # 2. Resolve the request against the model and plan its segments.
    resolved = resolve_render(spec, model.preset, geometry_of(model), continue_first=continue_from is not None)
    settings, plan = resolved.settings, resolved.plan
    load_loras(model, resolved.loras)  # a LoRA that does not fit the model fails here, before any work
    source = load_tail(continue_from, model.preset.name, settings) if continue_from is not None else None
    # 3. Restore: the checkpoints of an interrupted run, an extension's source.
    checkpoints = SegmentCheckpoints(Path(workdir), spec, model, continue_from) if workdir is not None else None
    done = checkpoints.finished_segments(len(plan)) if checkpoints else 0
    yield RenderStarted(plan, settings, resolved.total_steps, done)
    inputs = segment_inputs(model, resolved, source, cancel)
    stitcher = Stitcher(settings.overlap_frames, spec.drift_config(), fps=settings.fps)
    progress = _restore_source(source, stitcher, resolved, done)
    progress.health = HealthHistory() if resolved.health.enabled else None
    thumb = _thumbnail_path(output, thumbnail)
    writer = VideoWriter(output, settings.width, settings.height, settings.fps, thumbnail=thumb)
    # 4. Per segment: denoise -> stitch -> write -> checkpoint -> report.
    try:
        for seg in plan.segments:
            if checkpoints is not None and seg.index < done:
                yield _replay(seg, checkpoints, done, writer, stitcher, progress)
            else:
                yield from _generate(seg, inputs, stitcher, writer, checkpoints, progress, keep_tail=tail is not None)
        if cancel is not None and cancel():
            raise RenderCancelled("cancelled before the video was finalised")
        writer.close()
    except BaseException:
        writer.abort()
        raise
    # 5. Finish: the length is the plan's, the drift report and the tail beside the video.
    yield _finish(output, thumb, resolved, stitcher, checkpoints, progress, tail)


def _thumbnail_path(output: Path, thumbnail: str | os.PathLike | bool | None) -> Path | None:
    # `<name>.thumb.png`, never `<stem>.png`: that could be the very image the video starts from.
    if thumbnail is True:
        return output.with_name(output.stem + ".thumb.png")
    return Path(thumbnail) if thumbnail else None


def _restore_source(source: RenderTail | None, stitcher: Any, resolved: ResolvedRender, done: int) -> _Progress:
    """An extension starts from its source's last latents and stitcher state. Its colour anchor
    (`DriftConfig.anchor`): "auto" starts its own when its first prompt differs from the source's
    last (the source's anchor would paint the new content in the old one's colours), "new"
    always, "source" never; the seam into it stays blended either way."""
    if source is None:
        return _Progress()
    stitcher.load_state_dict(source.stitcher)
    anchor, prompt = stitcher.config.anchor, resolved.plan.segments[0].prompt
    if anchor == "new" or (anchor == "auto" and source.prompt is not None and source.prompt != prompt):
        stitcher.reanchor()  # kept in the stitcher's state: a resumed extension restores it from its checkpoint
    skip = resolved.settings.overlap_frames if done == 0 else 0  # a resumed extension already skipped them
    return _Progress(handoff=source.handoff, skip=skip, anchor=source.anchor)


def _replay(seg: SegmentPlan, checkpoints: SegmentCheckpoints, done: int, writer: VideoWriter, stitcher: Any,
            progress: _Progress) -> SegmentFinished:  # fmt: skip
    """Resume: write what a checkpointed segment wrote; the last one restores the loop's state."""
    saved = checkpoints.load(seg.index)
    writer.write(saved.written)
    progress.frames_written += len(saved.written)
    if seg.index == done - 1:
        progress.handoff, progress.anchor = saved.handoff, saved.anchor
        stitcher.load_state_dict(saved.stitcher)
        if progress.health is not None and saved.health is not None:
            progress.health.load_state_dict(saved.health)
    record = next((r for r in (saved.health or {}).get("records", []) if r["segment"] == seg.index), None)
    attempts, failed = (record["attempts"], tuple(record["failed_checks"])) if record else (1, ())
    return SegmentFinished(seg.index, progress.frames_written, resumed=True, attempts=attempts, failed_checks=failed)


def _generate(seg: SegmentPlan, inputs: SegmentInputs, stitcher: Any, writer: VideoWriter,
              checkpoints: SegmentCheckpoints | None, progress: _Progress, *, keep_tail: bool) -> Iterator[Event]:  # fmt: skip
    """One new segment: denoise and stitch it, write its frames, checkpoint it, report it."""
    yield SegmentStarted(seg.index, seg.shot, seg.frames)
    last = seg.index == len(inputs.resolved.plan) - 1
    with lora_adapters(inputs.model, inputs.resolved.loras):  # the request's LoRAs; the base model after
        out = yield from make_segment(seg, inputs, stitcher, progress.handoff, progress.health, last=last,
                                      keep_state=keep_tail, anchor=progress.anchor)  # fmt: skip
    handoff = out.latents.detach().to("cpu")
    progress.anchor = segment_anchor(seg, inputs, handoff, progress.anchor)
    if out.stitcher_state is not None:
        progress.tail = RenderTail(handoff, out.stitcher_state, asdict(inputs.resolved.settings),
                                   inputs.model.preset.name, inputs.offset + len(inputs.resolved.plan),
                                   inputs.times[seg.index] + seg.latent_frames, seg.prompt, progress.anchor)  # fmt: skip
    frames = out.frames
    if progress.skip:  # an extension: the source video already shows the overlap
        frames, progress.skip = frames[progress.skip :], max(0, progress.skip - len(frames))
    writer.write(frames)
    progress.frames_written += len(frames)
    progress.handoff = handoff
    if checkpoints:
        health = progress.health.state_dict() if progress.health is not None else None
        checkpoints.save(seg.index, frames, handoff, stitcher.state_dict(), health, progress.anchor)
    yield SegmentFinished(seg.index, progress.frames_written, attempts=out.attempts, failed_checks=out.failed_checks)


def _finish(output: Path, thumb: Path | None, resolved: ResolvedRender, stitcher: Any,
            checkpoints: SegmentCheckpoints | None, progress: _Progress, tail: str | os.PathLike | None) -> RenderFinished:  # fmt: skip
    if progress.frames_written != resolved.plan.total_frames:  # the plan's arithmetic is the contract
        raise RuntimeError(
            f"internal error: wrote {progress.frames_written} frames, planned {resolved.plan.total_frames}"
        )
    drift = stitcher.report()
    if progress.health is not None:  # every segment's attempts and the checks they failed
        drift.extra["health"] = progress.health.report()
    report, _plot = drift.write(output)  # `<video>.drift.json`, `<video>.drift.png`
    if tail is not None and progress.tail is not None:
        save_tail(tail, progress.tail)
    if checkpoints:
        checkpoints.clear()
    return RenderFinished(output, thumb, progress.frames_written, resolved.settings.fps, report)

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

import copy
import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from videogen.config.geometry import geometry_of
from videogen.config.plan import RenderPlan, SegmentPlan
from videogen.config.resolve import ResolvedRender, ResolvedSettings, resolve_render
from videogen.config.spec import RenderSpec
from videogen.errors import RenderCancelled
from videogen.io.video import VideoWriter, check_output_path
from videogen.models.lora import load_loras, lora_adapters
from videogen.rendering import events
from videogen.rendering.checkpoints import SegmentCheckpoints
from videogen.rendering.events import Event, RenderFinished, RenderStarted, SegmentFinished
from videogen.rendering.gate import HealthHistory
from videogen.rendering.segment import SegmentInputs, SegmentOutput, make_segment, segment_anchor, segment_inputs
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
    # With `backtrack` the loop holds each generated segment back until the next one is kept.
    hold = progress.health is not None and resolved.health.backtrack > 0
    held: _Made | None = None
    try:
        for seg in plan.segments:
            if checkpoints is not None and seg.index < done:
                yield _replay(seg, checkpoints, done, writer, stitcher, progress)
                continue
            made = yield from _make(seg, inputs, stitcher, progress, keep_tail=tail is not None, hold=hold)
            while held is not None and _may_backtrack(held, made, resolved.health.backtrack):
                held, made = yield from _backtrack(held, made, inputs, stitcher, progress, keep_tail=tail is not None)
            if held is not None:
                yield _commit(held, writer, checkpoints, progress, stitcher)
                held = None
            if hold:
                held = made
            else:
                yield _commit(made, writer, checkpoints, progress, stitcher)
        if held is not None:
            yield _commit(held, writer, checkpoints, progress, stitcher)
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


@dataclass
class _Made:
    """A generated segment, with what the loop carried before it and after it (`_snapshot`): the
    state its checkpoint holds, and the state a backtrack into it restores."""

    seg: SegmentPlan
    out: SegmentOutput
    frames: np.ndarray  # what it writes (an extension's overlap skipped)
    before: dict | None  # None: not held back (written at once from the live state)
    after: dict | None
    redo: int = 0  # times the render generated it before (backtracks into it)


def _carried(stitcher: Any, progress: _Progress) -> dict:
    """The loop's carried state as it stands: what a checkpoint saves and a backtrack restores."""
    return {"stitcher": stitcher.state_dict(), "handoff": progress.handoff, "skip": progress.skip,
            "tail": progress.tail, "anchor": progress.anchor,
            "health": progress.health.state_dict() if progress.health is not None else None}  # fmt: skip


def _snapshot(stitcher: Any, progress: _Progress) -> dict:
    """`_carried`, deep-copied: the stitcher's and the gate's states are mutated in place by the
    segments after."""
    return copy.deepcopy(_carried(stitcher, progress))


def _restore(state: dict, stitcher: Any, progress: _Progress) -> None:
    state = copy.deepcopy(state)
    stitcher.load_state_dict(state["stitcher"])
    progress.handoff, progress.skip, progress.tail, progress.anchor = (state["handoff"], state["skip"],
                                                                       state["tail"], state["anchor"])  # fmt: skip
    if progress.health is not None and state["health"] is not None:
        progress.health.load_state_dict(state["health"])


def _make(seg: SegmentPlan, inputs: SegmentInputs, stitcher: Any, progress: _Progress, *, keep_tail: bool,
          hold: bool, redo: int = 0) -> Generator[Any, None, _Made]:  # fmt: skip
    """Denoise and stitch one new segment (not yet written): a `_Made`, as the generator's value."""
    before = _snapshot(stitcher, progress) if hold else None
    yield events.SegmentStarted(seg.index, seg.shot, seg.frames)
    last = seg.index == len(inputs.resolved.plan) - 1
    with lora_adapters(inputs.model, inputs.resolved.loras):  # the request's LoRAs; the base model after
        out = yield from make_segment(seg, inputs, stitcher, progress.handoff, progress.health, last=last,
                                      keep_state=keep_tail, anchor=progress.anchor, redo=redo)  # fmt: skip
    handoff = out.latents.detach().to("cpu")
    progress.anchor = segment_anchor(seg, inputs, handoff, progress.anchor)
    if out.stitcher_state is not None:
        progress.tail = RenderTail(handoff, out.stitcher_state, asdict(inputs.resolved.settings),
                                   inputs.model.preset.name, inputs.offset + len(inputs.resolved.plan),
                                   inputs.times[seg.index] + seg.latent_frames, seg.prompt, progress.anchor)  # fmt: skip
    frames = out.frames
    if progress.skip:  # an extension: the source video already shows the overlap
        frames, progress.skip = frames[progress.skip :], max(0, progress.skip - len(frames))
    progress.handoff = handoff
    after = _snapshot(stitcher, progress) if hold else None
    return _Made(seg, out, frames, before, after, redo)


def _may_backtrack(held: _Made, made: _Made, limit: int) -> bool:
    """Whether `made` (which kept a failing attempt) sends the render back into `held`, the segment
    before it: the same shot, `held` passed the gate, `made` was re-sampled as often as the gate
    allows (not held back by `give_up_after` or `retry_budget`), and `held` has backtracks left."""
    record = made.after["health"]["records"][-1] if made.after and made.after["health"] else {}
    return (bool(made.out.failed_checks) and not held.out.failed_checks and not made.seg.first_in_shot
            and held.seg.shot == made.seg.shot and held.redo < limit
            and not record.get("retries_withheld"))  # fmt: skip


def _backtrack(held: _Made, made: _Made, inputs: SegmentInputs, stitcher: Any, progress: _Progress, *,
               keep_tail: bool) -> Generator[Any, None, tuple[_Made, _Made]]:  # fmt: skip
    """Generate `held` again from fresh attempts, then `made` after it; keep the chain whose two
    segments fail fewer checks (the earlier chain on a tie). The chain not kept is charged to the
    kept `held`'s gate record (`backtracks`, `backtrack_evals`: the transformer evaluations it
    ran), so the cost of a backtrack shows in the drift report beside the retries'."""
    assert held.before is not None and made.after is not None
    _restore(held.before, stitcher, progress)
    yield events.SegmentRetried(held.seg.index, (held.redo + 1) * (1 + inputs.resolved.health.retries),
                         ("backtrack", *made.out.failed_checks))  # fmt: skip
    held2 = yield from _make(held.seg, inputs, stitcher, progress, keep_tail=keep_tail, hold=True, redo=held.redo + 1)
    made2 = yield from _make(made.seg, inputs, stitcher, progress, keep_tail=keep_tail, hold=True, redo=made.redo)
    new = len(held2.out.failed_checks) + len(made2.out.failed_checks)
    old = len(held.out.failed_checks) + len(made.out.failed_checks)
    keep, drop = ((held2, made2), (held, made)) if new < old else ((held, made), (held2, made2))
    if keep[0] is held:
        _restore(made.after, stitcher, progress)
    spent = sum(_record(m)["evals"] for m in drop)
    for records in (progress.health.records if progress.health is not None else [],
                    *(m.after["health"]["records"] for m in keep if m.after and m.after["health"])):  # fmt: skip
        _charge(records, held.seg.index, spent)
    keep[0].redo = held.redo + 1
    return keep


def _record(made: _Made) -> dict:
    """The gate's record of `made`'s generation (the last record in the state after it)."""
    assert made.after is not None and made.after["health"] is not None
    return made.after["health"]["records"][-1]


def _charge(records: list[dict], index: int, spent: int) -> None:
    """Charge a dropped chain's transformer evaluations to segment `index`'s last record. Beside
    `evals` and `retry_evals`, not in them: a `retry_budget` counts the gate's own retries, so a
    resumed render (whose history has the charge before it generates the next segment, where the
    uninterrupted one had it after) budgets exactly as the uninterrupted one did."""
    record = next(r for r in reversed(records) if r["segment"] == index)
    record["backtracks"] = record.get("backtracks", 0) + 1
    record["backtrack_evals"] = record.get("backtrack_evals", 0) + spent


def _commit(made: _Made, writer: VideoWriter, checkpoints: SegmentCheckpoints | None, progress: _Progress,
            stitcher: Any) -> SegmentFinished:  # fmt: skip
    """Write `made`'s frames, checkpoint it (with the state after it: its snapshot when it was held
    back, else the live state of `stitcher` and `progress`), report it."""
    writer.write(made.frames)
    progress.frames_written += len(made.frames)
    if checkpoints:
        state = made.after or _carried(stitcher, progress)
        checkpoints.save(made.seg.index, made.frames, state["handoff"], state["stitcher"], state["health"],
                         state["anchor"])  # fmt: skip
    out = made.out
    return SegmentFinished(made.seg.index, progress.frames_written, attempts=out.attempts,
                           failed_checks=out.failed_checks)  # fmt: skip


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

"""`render()`: the one code path from a `RenderSpec` to an MP4, shared by the CLI, server and workers.

    for event in render(spec, "out.mp4"):
        ...  # RenderStarted, SegmentStarted, StepProgress, SegmentFinished, RenderFinished

Flow per segment (see ARCHITECTURE.md §1): denoise (clean prefix = the previous segment's last
latent frames) -> stitcher.on_latents (latent drift correction, before the handoff) -> decode ->
stitcher.push (seam blend, colour drift correction) -> pipe frames to ffmpeg -> checkpoint.

Callers differ only in where events go. Stopping the generator (or `cancel()` returning True)
stops the work within one denoising step and deletes the partial video. With `workdir` set,
every finished segment is checkpointed there (frames written, handoff latents, stitcher state;
each file written atomically), and a render restarted with the same spec and workdir resumes
after the last finished segment, producing the same video an uninterrupted render would.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from videogen.errors import InvalidOption, RenderCancelled
from videogen.io.video import VideoWriter, check_output_path
from videogen.sampling.loop import StepProgress, denoise_segment
from videogen.sampling.plan import RenderPlan, frames_for, plan_render
from videogen.config.spec import RenderSpec


@dataclass(frozen=True)
class ResolvedSettings:
    """A spec with every default filled in from the model's preset."""

    width: int
    height: int
    fps: float
    steps: int
    guidance: float
    flow_shift: float
    segment_seconds: float
    overlap_frames: int


@dataclass(frozen=True)
class RenderStarted:
    plan: RenderPlan
    settings: ResolvedSettings
    total_steps: int
    resumed_segments: int  # segments restored from a checkpoint, not generated again


@dataclass(frozen=True)
class SegmentStarted:
    index: int
    shot: int
    frames: int


@dataclass(frozen=True)
class SegmentFinished:
    index: int
    frames_written: int  # total so far
    resumed: bool = False


@dataclass(frozen=True)
class RenderFinished:
    video: Path
    thumbnail: Path | None
    frames: int
    fps: float
    report: Path | None = None


Event = RenderStarted | SegmentStarted | StepProgress | SegmentFinished | RenderFinished


def resolve_settings(spec: RenderSpec, model) -> ResolvedSettings:
    p = model.preset
    width, height = spec.size or p.size
    mw, mh = model.size_multiple
    if width % mw or height % mh:
        raise InvalidOption(
            "size", f"{width}x{height}", f"width must be a multiple of {mw} and height of {mh} for this model"
        )
    return ResolvedSettings(
        width=width,
        height=height,
        fps=spec.fps if spec.fps is not None else p.fps,
        steps=spec.steps if spec.steps is not None else p.steps,
        guidance=spec.guidance if spec.guidance is not None else p.guidance,
        flow_shift=spec.flow_shift if spec.flow_shift is not None else p.flow_shift,
        segment_seconds=spec.segment_seconds if spec.segment_seconds is not None else p.segment_seconds,
        overlap_frames=spec.overlap_frames if spec.overlap_frames is not None else p.overlap_frames,
    )


def plan_for(spec: RenderSpec, settings: ResolvedSettings, temporal_factor: int, continue_first: bool = False) -> RenderPlan:
    shots = []
    for i, shot in enumerate(spec.shots):
        option = "seconds" if len(spec.shots) == 1 else f"shots[{i}].seconds"
        shots.append((shot.prompt, frames_for(shot.seconds, settings.fps, option)))
    segment_frames = max(1, round(settings.segment_seconds * settings.fps))
    return plan_render(
        shots,
        fps=settings.fps,
        segment_frames=segment_frames,
        overlap_frames=settings.overlap_frames,
        temporal_factor=temporal_factor,
        continue_first=continue_first,
    )


def prepare(spec: RenderSpec, model, continue_first: bool = False) -> tuple[ResolvedSettings, RenderPlan]:
    """Validate `spec` against `model` without rendering: settings and plan, or InvalidOption."""
    spec.validate()
    settings = resolve_settings(spec, model)
    return settings, plan_for(spec, settings, model.codec.temporal_factor, continue_first)


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


def load_tail(path: str | os.PathLike, model, settings: ResolvedSettings) -> dict:
    """A finished render's tail (see `render(tail=...)`), checked to fit this render."""
    p = Path(path)
    if not p.is_file():
        raise InvalidOption("continue_from", str(path), "no such render tail file")
    tail = torch.load(p, weights_only=False)
    src = tail["settings"]
    mine = asdict(settings)
    for key in ("width", "height", "fps", "overlap_frames"):
        if src[key] != mine[key]:
            raise InvalidOption("continue_from", str(path),
                                f"the source video has {key}={src[key]}, this render {mine[key]}; they must match")  # fmt: skip
    if tail["model"] != model.preset.name:
        raise InvalidOption("continue_from", str(path), f"the source was rendered by {tail['model']!r}, not {model.preset.name!r}")
    return tail


def render(
    spec: RenderSpec,
    output: str | os.PathLike,
    *,
    model=None,
    workdir: str | os.PathLike | None = None,
    cancel: Callable[[], bool] | None = None,
    thumbnail: str | os.PathLike | None | bool = True,
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
    from videogen.models.codec import video_to_uint8
    from videogen.models.loader import load_model
    from videogen.stitch.stitcher import Stitcher

    spec.validate()
    output = check_output_path(output)
    if model is None:
        model = load_model(spec.model, device=spec.device, dtype=spec.dtype, attention=spec.attention)
    settings = resolve_settings(spec, model)  # spec validated above
    source = load_tail(continue_from, model, settings) if continue_from is not None else None
    plan = plan_for(spec, settings, model.codec.temporal_factor, continue_first=source is not None)
    # `<name>.thumb.png`, never `<stem>.png`: that could be the very image the video starts from.
    thumb = output.with_name(output.stem + ".thumb.png") if thumbnail is True else (Path(thumbnail) if thumbnail else None)

    checkpoints = _Checkpoints(Path(workdir), spec, model, continue_from) if workdir is not None else None
    done = checkpoints.finished_segments(len(plan)) if checkpoints else 0
    total_steps = settings.steps * len(plan)
    yield RenderStarted(plan, settings, total_steps, done)

    # Prompt embeddings once per distinct prompt.
    encode = model.prompt_encoder.encode
    embeds = {p: encode([p]) for p in dict.fromkeys(seg.prompt for seg in plan.segments)}
    uncond = encode([spec.negative_prompt]) if settings.guidance > 1.0 else None

    stitcher = Stitcher(settings.overlap_frames, spec.drift_config(), fps=settings.fps)
    writer = VideoWriter(output, settings.width, settings.height, settings.fps, thumbnail=thumb)
    handoff: torch.Tensor | None = None
    skip = 0  # leading output frames the source video already shows (an extension's overlap)
    offset = 0  # an extension's segments continue the source's numbering (and so its noise stream)
    if source is not None:
        offset = int(source["segments"])
        handoff = source["handoff"]
        stitcher.load_state_dict(source["stitcher"])
        skip = settings.overlap_frames if done == 0 else 0  # a resumed extension already skipped them
    image_latents = _encode_image(spec.image, model, settings) if spec.image and source is None else None
    tail_state: dict | None = None
    frames_written = 0
    times = segment_times(plan, source.get("time_end") if source is not None else None)
    latent_hw = (settings.height // model.codec.spatial_factor, settings.width // model.codec.spatial_factor)
    try:
        for seg in plan.segments:
            if seg.index < done:  # resume: replay what this segment wrote, restore its state
                state = checkpoints.load(seg.index)
                writer.write(state["written"])
                frames_written += len(state["written"])
                if seg.index == done - 1:
                    handoff = state["handoff"]
                    stitcher.load_state_dict(state["stitcher"])
                yield SegmentFinished(seg.index, frames_written, resumed=True)
                continue

            yield SegmentStarted(seg.index, seg.shot, seg.frames)
            written: list[np.ndarray] = []
            if seg.first_in_shot and (seg.index > 0 or source is None):
                written.append(stitcher.new_shot())  # previous shot's held-back tail
                handoff = None
            prefix = None if seg.first_in_shot else handoff[:, :, -seg.prefix_latent_frames :]
            if seg.index == 0 and image_latents is not None and seg.latent_frames > 1:
                prefix = image_latents  # image-to-video: the first latent frame is the image, held clean
            latents = yield from denoise_segment(
                model,
                cond=embeds[seg.prompt],
                uncond=uncond,
                latent_frames=seg.latent_frames,
                latent_size=latent_hw,
                prefix=prefix,
                steps=settings.steps,
                guidance=settings.guidance,
                flow_shift=settings.flow_shift,
                seed=spec.seed,
                segment=offset + seg.index,
                cancel=cancel,
                time=times[seg.index],
            )
            latents = stitcher.on_latents(latents)
            frames = video_to_uint8(model.codec.decode(latents))[: seg.keep_frames]
            written.append(stitcher.push(frames))
            if seg.index == len(plan) - 1:
                if tail is not None:
                    tail_state = {"handoff": latents.detach().to("cpu"), "stitcher": stitcher.state_dict(),
                                  "settings": asdict(settings), "model": model.preset.name,
                                  "segments": offset + len(plan),
                                  "time_end": times[seg.index] + seg.latent_frames}  # fmt: skip
                written.append(stitcher.flush())
            written_frames = _concat(written, settings)
            if skip:
                written_frames, skip = written_frames[skip:], max(0, skip - len(written_frames))
            writer.write(written_frames)
            frames_written += len(written_frames)
            handoff = latents.detach().to("cpu")
            if checkpoints:
                checkpoints.save(seg.index, written_frames, handoff, stitcher.state_dict())
            yield SegmentFinished(seg.index, frames_written)
        if cancel is not None and cancel():
            raise RenderCancelled("cancelled before the video was finalised")
        writer.close()
    except BaseException:
        writer.abort()
        raise
    if frames_written != plan.total_frames:  # the plan's arithmetic is the contract; never ship a wrong length
        raise RuntimeError(f"internal error: wrote {frames_written} frames, planned {plan.total_frames}")
    report_path = _write_report(stitcher, output)
    if tail is not None and tail_state is not None:
        tmp = Path(tail).with_suffix(".tmp")
        torch.save(tail_state, tmp)
        os.replace(tmp, tail)
    if checkpoints:
        checkpoints.clear()
    yield RenderFinished(output, thumb, frames_written, settings.fps, report_path)


def _encode_image(path: str, model, settings: ResolvedSettings) -> torch.Tensor:
    """An image file -> one clean latent frame (1, C, 1, h, w), resized to cover the frame and
    centre-cropped. This is Wan 2.2 TI2V's image conditioning (the image's latent as the first
    latent frame at timestep 0), done through the same clean-prefix path as segment handoffs."""
    from PIL import Image, UnidentifiedImageError

    from videogen.models.codec import uint8_to_video

    try:
        img = Image.open(path).convert("RGB")
    except (OSError, UnidentifiedImageError):
        raise InvalidOption("image", path, "not a readable image (PNG, JPEG, WebP ...)") from None
    w, h = settings.width, settings.height
    scale = max(w / img.width, h / img.height)
    img = img.resize((max(w, round(img.width * scale)), max(h, round(img.height * scale))), Image.LANCZOS)
    left, top = (img.width - w) // 2, (img.height - h) // 2
    frame = np.asarray(img.crop((left, top, left + w, top + h)), np.uint8)[None]  # (1, H, W, 3)
    return model.codec.encode(uint8_to_video(frame).to(model.device)).float().cpu()


def _concat(parts: list[np.ndarray], settings: ResolvedSettings) -> np.ndarray:
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        return np.zeros((0, settings.height, settings.width, 3), np.uint8)
    return np.concatenate(parts)


def _write_report(stitcher, output: Path) -> Path:
    """The drift report (JSON + PNG plot) next to the video: `<video>.drift.json`, `<video>.drift.png`."""
    json_path, _png = stitcher.report().write(output)
    return json_path


class _Checkpoints:
    """Per-segment checkpoints in `workdir`, keyed by a hash of the spec and model identity."""

    def __init__(self, root: Path, spec: RenderSpec, model, continue_from=None) -> None:
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
        done = 0
        while done < n and self._file(done).is_file():
            done += 1
        return done

    def save(self, index: int, written: np.ndarray, handoff: torch.Tensor, stitcher_state: dict) -> None:
        tmp = self._file(index).with_suffix(".tmp")
        torch.save({"written": written, "handoff": handoff, "stitcher": stitcher_state}, tmp)
        os.replace(tmp, self._file(index))  # atomic: a crash leaves the old state or the new, never half

    def load(self, index: int) -> dict:
        return torch.load(self._file(index), weights_only=False)

    def clear(self) -> None:
        for f in self.root.glob(f"segment-{self.key}-*.pt"):
            f.unlink(missing_ok=True)

"""Admission control: the most work one job may ask of a worker, per model, checked at create time.

A job is admitted when its frame size is one the model serves (`sizes`, or at most `max_pixels`),
it makes at most `max_frames` frames, and its work, width x height x frames x denoising steps,
is at most `max_work`. The limits are the preset's (`limits:` in configs/models.yaml, read by
`videogen.config.presets.AdmissionLimits`); a limit the preset leaves out is the service's own
default (`ServiceSettings.max_frame_pixels`, `max_job_work`), which is also what an operator's
VIDEOGEN_MODELS folder gets. Anything beyond them is an `InvalidOption` naming the field to change,
with the value and the limit (the catalog answers it as a 400): `size`; `seconds` (or `shots`, or
`fps` when a higher frame rate than the model's is what overflows); for the work, the field whose
model default would make it fit (`steps`, `size`, `fps`), else `seconds`. An extension's only
field is `seconds`. The numbers behind each preset's limits are in docs/service.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from videogen.config.presets import AdmissionLimits, Preset
from videogen.errors import InvalidOption


@dataclass(frozen=True)
class JobShape:
    """What one job asks of a worker, resolved (the request's values, else the preset's)."""

    width: int
    height: int
    fps: float
    frames: int  # frames the job makes (an extension: its new frames; a stream: all of them)
    steps: int  # denoising steps per segment (a stream: per chunk)

    @property
    def work(self) -> int:
        return self.width * self.height * self.frames * self.steps


@dataclass(frozen=True)
class Asked:
    """Which fields the client set (the rest are the model's defaults): what a refusal may name."""

    size: bool
    fps: bool
    steps: bool
    seconds_param: str = "seconds"  # "shots" for a multi-shot render


def effective_limits(preset: Preset, max_frame_pixels: int, max_job_work: int) -> AdmissionLimits:
    """The preset's limits, with the service's defaults where the preset sets none."""
    limits = preset.limits
    return replace(limits, max_pixels=limits.max_pixels or (None if limits.sizes else max_frame_pixels),
                   max_work=limits.max_work or max_job_work)  # fmt: skip


def admit(job: JobShape, asked: Asked, preset: Preset, limits: AdmissionLimits, model: str) -> None:
    """Raise InvalidOption naming the field when `job` asks more of model `model` (its public
    name) than `limits` allow."""
    size = f"{job.width}x{job.height}"
    if limits.sizes and (job.width, job.height) not in limits.sizes:
        served = " or ".join(f"{w}x{h}" for w, h in limits.sizes)
        raise InvalidOption("size", size, f"model '{model}' is served at {served} only")
    if limits.max_pixels is not None and job.width * job.height > limits.max_pixels:
        raise InvalidOption("size", size, f"{job.width * job.height:,} pixels per frame; model '{model}' is served "
                            f"at up to {limits.max_pixels:,} (its default is {_size(preset)})")  # fmt: skip
    if limits.max_frames is not None and job.frames > limits.max_frames:
        at_default_fps = round(job.frames * preset.fps / job.fps)
        param = "fps" if asked.fps and job.fps > preset.fps and at_default_fps <= limits.max_frames else None
        raise InvalidOption(param or asked.seconds_param, job.fps if param else _seconds(job),
                            f"{job.frames} frames at {job.fps:g} fps; model '{model}' makes at most "
                            f"{limits.max_frames} frames per job")  # fmt: skip
    if limits.max_work is not None and job.work > limits.max_work:
        param, value = _over_budget(job, asked, preset, limits.max_work)
        raise InvalidOption(param, value, f"the job's work, {job.width}x{job.height} pixels x {job.frames} frames x "
                            f"{job.steps} steps = {job.work:.3g}, is over the budget of model '{model}', "
                            f"{limits.max_work:.3g} per job (lower the seconds, steps or size)")  # fmt: skip


def _over_budget(job: JobShape, asked: Asked, preset: Preset, budget: int) -> tuple[str, object]:
    """The field to blame for a job over its work budget: the first the client raised above the
    model's default whose default alone would make the job fit; else its length."""
    pw, ph = preset.size
    if asked.steps and job.steps > preset.steps and replace(job, steps=preset.steps).work <= budget:
        return "steps", job.steps
    if asked.size and job.width * job.height > pw * ph and replace(job, width=pw, height=ph).work <= budget:
        return "size", f"{job.width}x{job.height}"
    frames_at_default_fps = round(job.frames * preset.fps / job.fps)
    if asked.fps and job.fps > preset.fps and replace(job, frames=frames_at_default_fps).work <= budget:
        return "fps", job.fps
    return asked.seconds_param, _seconds(job)


def _seconds(job: JobShape) -> float:
    return round(job.frames / job.fps, 6)


def _size(preset: Preset) -> str:
    return f"{preset.size[0]}x{preset.size[1]}"

"""Request parameters and the response objects of `/v1/videos`, shaped like OpenAI's Videos API.

The video object carries OpenAI's fields (id, object, model, status, progress, created_at,
completed_at, expires_at, seconds, size, prompt, remixed_from_video_id, error) plus ours:
`extended_from_video_id`, `steps_done`/`steps_total`, `segments_done`/`segments_total`,
`started_at`, `stream` (null, or a live stream's frames, chunks and prompt switches), and the
health gate's re-samplings: `retries_used` and `segment_retries` (`{segment, attempt, reasons}`
each; a stream's chunks count as segments), and `webhook` (null, or the delivery of the job's
webhook event: `api.webhooks`), and `queued_reason` (a fleet's queued job whose model no live
worker serves: why it waits; else null). Status
adds `cancelled` to OpenAI's four.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .tables import Job
from .webhooks import webhook_object


class ShotParam(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str
    seconds: float


class LoraParam(BaseModel):
    """One of `loras`: a file in the server's LoRA folder (`VIDEOGEN_LORA_DIR`) and its scale."""

    model_config = ConfigDict(extra="forbid")
    name: str
    scale: float = 1.0


class CreateParams(BaseModel):
    """`POST /v1/videos`. Multipart sends strings; lax validation turns "4" into 4.0."""

    model_config = ConfigDict(extra="forbid")
    prompt: str | None = None
    model: str | None = None
    seconds: float | None = None
    size: str | None = None
    # ours
    fps: float | None = None
    seed: int = Field(0, ge=0, le=2**63 - 1)  # the library's range (`videogen.config.spec`)
    steps: int | None = None
    guidance_scale: float | None = None
    guidance_scale_2: float | None = (
        None  # two-expert models (Wan 2.2 A14B): the low-noise expert's; None: guidance_scale
    )
    flow_shift: float | None = None  # the scheduler's shift; None: the preset's, else the model folder's
    negative_prompt: str = ""
    attention: str | None = None
    drift_correction: dict[str, Any] | None = None
    retries: int | None = None  # the health gate's re-samplings per segment (0..10); None: the preset's
    health_checks: list[str] | None = None  # the gate's checks; None: the preset's; []: the gate is off
    continuation: str | None = None  # "clean" | "renoise": how segments condition on their prefix; None: the preset's
    image_fit: str = (
        "cover"  # how an input_reference of another aspect ratio fills the frame: cover | stretch | contain
    )
    shots: list[ShotParam] | None = Field(None, min_length=1)
    loras: list[LoraParam] | None = None  # LoRA adapters from the server's folder, applied to the transformer
    stream: bool = False  # a live stream: frames are served as they are made (docs/service.md)
    webhook_url: str | None = None  # video.completed/failed/cancelled go here (`api.webhooks`); default: the tenant's


class ExtendParams(BaseModel):
    """`POST /v1/videos/extensions`: `video` is `{"id": ...}` (multipart: `video[id]`)."""

    model_config = ConfigDict(extra="forbid")
    prompt: str
    seconds: float
    video: dict[str, str]
    drift_correction: dict[str, Any] | None = None  # merged over the source's; e.g. {"anchor": "source"}
    webhook_url: str | None = None  # as in `CreateParams`


class PromptParams(BaseModel):
    """`POST /v1/videos/{id}/prompt` (and the WebSocket's `{"type": "prompt"}`): switch a live stream's prompt."""

    model_config = ConfigDict(extra="forbid")
    prompt: str


def _ts(t: float | None) -> int | None:
    return None if t is None else int(t)


def video_object(job: Job) -> dict[str, Any]:
    error = None
    if job.error_code:
        error = {"code": job.error_code, "message": job.error_message or "", "param": job.error_param}
    return {
        "id": job.id,
        "object": "video",
        "model": job.model,
        "status": job.status,
        "progress": job.progress,
        "created_at": _ts(job.created_at),
        "completed_at": _ts(job.completed_at),
        "expires_at": _ts(job.expires_at),
        "seconds": job.seconds,
        "size": job.size,
        "prompt": job.prompt,
        "remixed_from_video_id": None,
        "error": error,
        "extended_from_video_id": job.source_video_id,
        "started_at": _ts(job.started_at),
        "steps_done": job.steps_done,
        "steps_total": job.steps_total,
        "segments_done": job.segments_done,
        "segments_total": job.segments_total,
        "stream": stream_object(job) if job.is_stream else None,
        "retries_used": len(job.spec.get("segment_retries", [])),
        "segment_retries": job.spec.get("segment_retries", []),
        "webhook": webhook_object(job),
        "queued_reason": job.queued_reason
        if job.status == "queued"
        else None,  # fleet: no live worker serves its model
    }


def stream_object(job: Job) -> dict[str, Any]:
    """A live stream's state: frames and chunks made, the prompt shown now, and every prompt
    switch with the frame (and second) from which it was shown."""
    switches = job.spec.get("prompt_switches", [])
    return {
        "fps": job.spec.get("fps"),
        "frames_done": job.steps_done,
        "frames_total": job.steps_total,
        "chunks_done": job.segments_done,
        "chunks_total": job.segments_total,
        "prompt": switches[-1]["prompt"] if switches else job.prompt,
        "prompt_switches": switches,
    }

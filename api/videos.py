"""`/v1/videos` routes: OpenAI's create, retrieve, list, delete, content and extensions, plus our
cancel and Server-Sent Events (a live stream's own routes: `api.streams`). Every read and write
is scoped to the caller's tenant: another tenant's job answers 404 exactly like a job that does
not exist."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from videogen.config.presets import parse_size
from videogen.config.spec import (
    API_DEFAULT_SECONDS,
    DEFAULT_STREAM_MODEL,
    Lora,
    RenderSpec,
    Shot,
    StreamSpec,
    approved_lora,
)
from videogen.errors import InvalidOption

from .auth import CurrentTenant
from .catalog import ModelCatalog, invalid
from .dispatch import QueueUnavailable
from .errors import APIError, not_found
from .limits import check_values, parse_json
from .quotas import CreateRateLimiter, RateLimited, limit_response
from .routing import ModelNotServed
from .schemas import CreateParams, ExtendParams, video_object
from .storage import OutputStorage
from .store import JobStore, TenantQueueFull
from .tables import COMPLETED, TERMINAL, Job, is_job_id, new_job_id
from .webhooks import WebhookConfig

log = logging.getLogger("videogen.api")
router = APIRouter(prefix="/v1/videos", tags=["videos"])

# Magic numbers of the image formats `input_reference` may be.
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"RIFF")


class Service:
    """What the routes need, built once by the app factory (`request.app.state.service`)."""

    def __init__(self, settings, store: JobStore, storage: OutputStorage, catalog: ModelCatalog, queue) -> None:
        self.settings, self.store, self.storage, self.catalog, self.queue = settings, store, storage, catalog, queue
        self.rate_limiter = CreateRateLimiter(settings.tenant_rate, settings.tenant_burst)  # per tenant
        self.webhooks = WebhookConfig.from_settings(settings)  # `videogen serve` checked it at start-up


def get_service(request: Request) -> Service:
    return request.app.state.service


Svc = Annotated[Service, Depends(get_service)]


# -- request parsing ----------------------------------------------------------------------------
async def read_params(request: Request, svc: Service) -> tuple[dict[str, Any], UploadFile | None]:
    """JSON or multipart body -> (fields, upload). The body's size is bounded by `BodySizeLimit`
    (413); its values by `check_values` (400 naming the field)."""
    ctype = request.headers.get("content-type", "")
    max_text = svc.settings.max_prompt_chars
    if ctype.startswith("multipart/form-data") or ctype.startswith("application/x-www-form-urlencoded"):
        form = await request.form(max_files=1, max_fields=100)
        fields: dict[str, Any] = {}
        upload = None
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                if key != "input_reference":
                    raise APIError(400, f"Unexpected file field '{key}'.", param=key, code="unknown_parameter")
                upload = value
            elif key.startswith("video[") and key.endswith("]"):  # the openai client's nested form encoding
                fields.setdefault("video", {})[key[6:-1]] = value
            else:
                fields[key] = value
        for key in ("shots", "drift_correction", "video", "health_checks", "loras"):  # JSON inside a form field
            if isinstance(fields.get(key), str):
                try:
                    fields[key] = parse_json(fields[key])
                except APIError:
                    raise APIError(400, f"'{key}' must be JSON.", param=key, code="invalid_value") from None
        check_values(fields, max_text=max_text)
        return fields, upload
    body = parse_json(await request.body())
    if not isinstance(body, dict):
        raise APIError(400, "The body must be a JSON object.", code="invalid_json")
    check_values(body, max_text=max_text)
    return body, None


def _validated(model, fields: dict[str, Any]):
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(x) for x in err["loc"]) or None
        if err["type"] == "missing":
            raise APIError(400, f"Missing required parameter: '{param}'.", param=param,
                           code="missing_required_parameter") from None  # fmt: skip
        if err["type"] == "extra_forbidden":
            raise APIError(400, f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter") from None
        raise APIError(400, f"Invalid '{param}': {err['msg']}.", param=param, code="invalid_value") from None


async def read_upload(upload: UploadFile | None, svc: Service) -> bytes | None:
    """`input_reference`: an image the video starts from (its first frame). Size and type are
    checked here; the worker encodes it as the first latent frame (`RenderSpec.image`)."""
    if upload is None:
        return None
    limit = svc.settings.max_upload_bytes
    chunks: list[bytes] = []
    size = 0
    while chunk := await upload.read(1 << 20):
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"'input_reference' is larger than {limit} bytes.", param="input_reference",
                           code="payload_too_large")  # fmt: skip
        chunks.append(chunk)
    data = b"".join(chunks)
    if not data.startswith(_IMAGE_MAGIC):
        raise APIError(400, "'input_reference' must be a PNG, JPEG or WebP image.", param="input_reference",
                       code="invalid_value")  # fmt: skip
    return data


def spec_from_params(p: CreateParams, lora_dir=None) -> RenderSpec:
    """The request's `RenderSpec`; `lora_dir`: the folder its `loras` name files in."""
    try:
        if p.shots:
            if p.seconds is not None and abs(p.seconds - sum(s.seconds for s in p.shots)) > 1e-6:
                raise InvalidOption(
                    "seconds", p.seconds, "must be omitted or equal the shots' total when 'shots' is given"
                )
            shots = [Shot(s.prompt, s.seconds) for s in p.shots]
        else:
            if p.prompt is None:
                raise APIError(400, "Missing required parameter: 'prompt'.", param="prompt",
                               code="missing_required_parameter")  # fmt: skip
            shots = [Shot(p.prompt, API_DEFAULT_SECONDS if p.seconds is None else p.seconds)]
        return RenderSpec(
            shots=shots,
            size=parse_size(p.size, "size") if p.size is not None else None,
            fps=p.fps,
            steps=p.steps,
            guidance=p.guidance_scale,
            guidance_2=p.guidance_scale_2,
            flow_shift=p.flow_shift,
            seed=p.seed,
            negative_prompt=p.negative_prompt,
            attention=p.attention,
            drift_correction=p.drift_correction or {},
            retries=p.retries,
            health_checks=p.health_checks,
            loras=_loras(p, lora_dir),
            continuation=p.continuation,
            image_fit=p.image_fit,
        )
    except InvalidOption as exc:
        raise invalid(exc) from None


def _loras(p: CreateParams, lora_dir) -> list[Lora]:
    """`loras` as the spec's: each name a file inside `lora_dir` (InvalidOption naming `loras`)."""
    loras, seen = [], set()
    for lora in p.loras or []:
        path = approved_lora(lora_dir, lora.name)
        if path in seen:
            raise InvalidOption("loras", lora.name, "is given twice")
        seen.add(path)
        loras.append(Lora(path, lora.scale))
    return loras


def _seconds_str(seconds: float) -> str:
    return f"{seconds:g}"


def _new_job(tenant: str, entry, checked, prompt: str, source: str | None = None) -> Job:
    spec = checked.spec
    spec.model = entry.ref
    w, h = checked.size
    return Job(id=new_job_id(), tenant=tenant, model=entry.name, prompt=prompt, seconds=_seconds_str(spec.seconds),
               size=f"{w}x{h}", spec=spec.to_dict(), source_video_id=source, steps_total=checked.steps_total,
               segments_total=checked.segments)  # fmt: skip


def _new_stream_job(svc: Service, tenant: str, p: CreateParams) -> Job:
    """`stream: true`: one prompt (switchable while it runs), a required length, a block-causal model."""
    for name in ("shots", "drift_correction"):
        if getattr(p, name) is not None:
            raise APIError(400, f"'{name}' cannot be combined with 'stream': a stream shows one prompt at a time "
                           "(switch it while it runs: POST /v1/videos/{id}/prompt).", param=name,
                           code="unsupported_parameter")  # fmt: skip
    if p.attention not in (None, "dense"):
        raise APIError(400, f"Invalid 'attention' ({p.attention!r}): a stream uses dense attention.", param="attention",
                       code="invalid_value")  # fmt: skip
    for name in ("prompt", "seconds"):  # a stored stream has an end (the CLI's --forever does not)
        if getattr(p, name) is None:
            raise APIError(400, f"Missing required parameter: '{name}' (a stream needs it).", param=name,
                           code="missing_required_parameter")  # fmt: skip
    try:
        size = parse_size(p.size, "size") if p.size is not None else None
        loras = _loras(p, svc.settings.lora_dir)
    except InvalidOption as exc:
        raise invalid(exc) from None
    if p.guidance_scale_2 is not None:
        raise APIError(400, "Invalid 'guidance_scale_2': it applies only to two-expert models (Wan 2.2 A14B); a "
                       "stream's block-causal model has one transformer.", param="guidance_scale_2",
                       code="invalid_value")  # fmt: skip
    entry = svc.catalog.resolve(p.model or DEFAULT_STREAM_MODEL)
    spec = StreamSpec(prompt=p.prompt, seconds=p.seconds, model=entry.ref, size=size, fps=p.fps, steps=p.steps,
                      guidance=p.guidance_scale, flow_shift=p.flow_shift, negative_prompt=p.negative_prompt,
                      seed=p.seed, retries=p.retries, health_checks=p.health_checks, loras=loras)  # fmt: skip
    checked = svc.catalog.check_stream(spec, entry)
    w, h = spec.size
    return Job(id=new_job_id(), tenant=tenant, model=entry.name, prompt=p.prompt, seconds=_seconds_str(p.seconds),
               size=f"{w}x{h}", spec={"kind": "stream", **spec.to_dict()}, steps_total=checked.frames,
               segments_total=checked.chunks)  # fmt: skip


def _ensure_storage(svc: Service) -> None:
    """A create is refused (503 storage_error) while the data dir cannot take the job's files
    (disk below `min_free_bytes`, or not writable), rather than accepted to fail half-way."""
    problem = svc.storage.recent_problem()
    if problem is not None:
        log.warning("create refused: the data dir is %s", problem)
        raise APIError(503, "The server cannot store new videos right now (its disk is full or not writable); "
                       "retry later.", code="storage_error")  # fmt: skip


def _route(svc: Service, model: str) -> str | None:
    """Fleet (`api.routing`): None when a live worker serves `model`, else why its job will wait
    (its workers are down); a 400 naming `model` when no worker of the fleet serves it."""
    try:
        return svc.queue.check(model)
    except ModelNotServed as exc:
        raise APIError(400, str(exc), param="model", code="model_not_served") from None


def _create_and_submit(svc: Service, job: Job, prefer_worker: str | None = None) -> None:
    _ensure_storage(svc)
    svc.store.create(job, max_queued=svc.settings.tenant_max_queued)
    try:
        svc.queue.submit(job.id, model=job.model, prefer_worker=prefer_worker)
    except QueueUnavailable as exc:  # the job is in the store: the reaper dispatches it when Redis is back
        log.warning("job %s tenant %s: queued, but the broker did not take its wake-up (%s); the reaper "
                    "sends it again", job.id, job.tenant, str(exc)[:200])  # fmt: skip


async def _submit(svc: Service, job: Job, prefer_worker: str | None = None) -> JSONResponse:
    try:
        job.queued_reason = await run_in_threadpool(_route, svc, job.model)
        svc.rate_limiter.take(job.tenant)
        await run_in_threadpool(_create_and_submit, svc, job, prefer_worker)  # one hop: SQL insert, then the queue
    except (RateLimited, TenantQueueFull, APIError) as exc:  # 429 with Retry-After; 400 model not served
        if "image" in job.spec:  # the upload saved for this job
            await run_in_threadpool(svc.storage.remove, job.id)
        if isinstance(exc, APIError):
            raise
        return limit_response(exc)
    return JSONResponse(video_object(job))


def _webhook_url(svc: Service, tenant: str, url: str | None) -> str | None:
    """The job's webhook URL: the request's (checked: `WebhookConfig.url_problem`; "" = none), else
    the tenant's (`VIDEOGEN_WEBHOOKS`). Resolves the host: run it in a thread."""
    if url is None:
        return svc.webhooks.tenant_urls.get(tenant)
    if url == "":
        return None
    problem = svc.webhooks.url_problem(url)
    if problem is not None:
        raise APIError(400, f"Invalid 'webhook_url' ({url[:100]!r}): it {problem}.", param="webhook_url",
                       code="invalid_value")  # fmt: skip
    if svc.webhooks.key_for(tenant) is None:
        raise APIError(400, "'webhook_url' cannot be used: this server has no webhook signing secret for your "
                       "tenant (ask its operator).", param="webhook_url", code="unsupported_parameter")  # fmt: skip
    return url


def _owned(svc: Service, tenant: str, video_id: str) -> Job:
    job = svc.store.get(tenant, video_id) if is_job_id(video_id) else None
    if job is None:
        raise not_found(video_id)
    return job


# -- routes -------------------------------------------------------------------------------------
@router.post("")
async def create_video(request: Request, tenant: CurrentTenant, svc: Svc) -> JSONResponse:
    fields, upload = await read_params(request, svc)
    image = await read_upload(upload, svc)
    params = _validated(CreateParams, fields)
    hook = await run_in_threadpool(_webhook_url, svc, tenant, params.webhook_url)
    if params.stream:
        if image is not None:
            raise APIError(400, "'input_reference' cannot be combined with 'stream'.", param="input_reference",
                           code="unsupported_parameter")  # fmt: skip
        job = _new_stream_job(svc, tenant, params)
        job.webhook_url = hook
        return await _submit(svc, job)
    spec = spec_from_params(params, svc.settings.lora_dir)
    entry = svc.catalog.resolve(params.model)
    checked = svc.catalog.check(spec, entry)
    prompt = params.prompt if params.prompt is not None else " | ".join(s.prompt for s in spec.shots)
    job = _new_job(tenant, entry, checked, prompt)
    job.webhook_url = hook
    if image is not None:  # stored under the job's own folder; the path comes from the job id only
        await run_in_threadpool(_ensure_storage, svc)
        path = await run_in_threadpool(_save_input, svc, job.id, image)
        job.spec = {**job.spec, "image": str(path)}
    return await _submit(svc, job)


def _save_input(svc: Service, job_id: str, data: bytes):
    try:
        return svc.storage.save_input(job_id, data)
    except OSError as exc:  # the bucket failed (a local disk failure is caught by _ensure_storage first)
        log.warning("job %s: the upload could not be stored: %s", job_id, exc)
        raise APIError(503, "The server cannot store new videos right now (its object storage does not answer); "
                       "retry later.", code="storage_error") from None  # fmt: skip


@router.post("/extensions")
async def extend_video(request: Request, tenant: CurrentTenant, svc: Svc) -> JSONResponse:
    """A new job that continues a completed video with a new prompt: its first segment is
    conditioned on the source's last latent frames (the source's `tail.pt`), and the result is the
    source video followed by the new frames, joined without re-encoding. Same model, size, fps and
    settings as the source; `drift_correction` is merged over the source's (with the default
    `anchor: "auto"`, a new prompt gets its own colour anchor). See docs/service.md."""
    fields, upload = await read_params(request, svc)
    if upload is not None:
        raise APIError(400, "Only videos of this server can be extended: pass video={'id': ...}.", param="video",
                       code="unsupported_parameter")  # fmt: skip
    params = _validated(ExtendParams, fields)
    hook = await run_in_threadpool(_webhook_url, svc, tenant, params.webhook_url)
    source_id = params.video.get("id", "")
    source = await run_in_threadpool(_owned, svc, tenant, source_id)
    if source.status != COMPLETED:
        raise APIError(400, f"Video '{source_id}' is {source.status}; only a completed video can be extended.",
                       param="video", code="invalid_value")  # fmt: skip
    if source.is_stream:
        raise APIError(400, f"Video '{source_id}' is a stream; streams cannot be extended (start a new one).",
                       param="video", code="invalid_value")  # fmt: skip
    spec = RenderSpec.from_dict(source.spec)
    spec.shots = [Shot(params.prompt, params.seconds)]
    if params.drift_correction is not None:  # validated with the rest: 400 naming drift_correction.<key>
        spec.drift_correction = {**spec.drift_correction, **params.drift_correction}
    entry = svc.catalog.resolve(source.model)
    checked = svc.catalog.check(spec, entry, extends=True)
    job = _new_job(tenant, entry, checked, params.prompt, source=source.id)
    job.seconds = _seconds_str(float(source.seconds) + spec.seconds)  # the whole extended video
    job.webhook_url = hook
    return await _submit(svc, job, prefer_worker=source.finished_by)  # its model and tail are warm there


@router.get("")
def list_videos(
    tenant: CurrentTenant,
    svc: Svc,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> dict[str, Any]:
    page = svc.store.list(tenant, after=after, limit=limit, order=order) if not after or is_job_id(after) else None
    if page is None:
        raise APIError(400, f"'after' is not one of your videos: {after[:64]!r}.", param="after", code="invalid_value")
    data = [video_object(j) for j in page.jobs]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": page.has_more}  # fmt: skip


@router.get("/{video_id}")
def retrieve_video(video_id: str, tenant: CurrentTenant, svc: Svc) -> JSONResponse:
    # The hot path of every polling client: a plain JSONResponse skips FastAPI's re-encoding.
    return JSONResponse(video_object(_owned(svc, tenant, video_id)))


@router.delete("/{video_id}")
def delete_video(video_id: str, tenant: CurrentTenant, svc: Svc) -> dict[str, Any]:
    job = svc.store.delete(tenant, video_id) if is_job_id(video_id) else None
    if job is None:
        raise not_found(video_id)
    if job.status in TERMINAL:  # a running job's files go when its worker stops (the reaper purges it)
        try:
            svc.storage.remove(job.id)
            svc.store.purge(job.id)
        except OSError as exc:  # the bucket failed: deleted for the caller; the reaper removes the objects
            log.warning("job %s: outputs not removed yet: %s", job.id, exc)
    return {"id": video_id, "object": "video.deleted", "deleted": True}


@router.post("/{video_id}/cancel")
def cancel_video(video_id: str, tenant: CurrentTenant, svc: Svc) -> dict[str, Any]:
    """Queued: cancelled now. In progress: the worker stops within one transformer block (it
    polls the store every `cancel_poll_seconds`) and sets `cancelled` (poll, or watch the
    events). Finished: returned unchanged."""
    job = svc.store.request_cancel(tenant, video_id) if is_job_id(video_id) else None
    if job is None:
        raise not_found(video_id)
    return video_object(job)


@router.get("/{video_id}/content")
def download_content(video_id: str, tenant: CurrentTenant, svc: Svc,
                     variant: Literal["video", "thumbnail", "spritesheet", "drift_report", "drift_plot"] = "video",
                     range_header: Annotated[str | None, Header(alias="Range", include_in_schema=False)] = None,
                     ) -> Response:  # fmt: skip
    job = _owned(svc, tenant, video_id)
    if variant == "spritesheet":
        raise APIError(400, "variant 'spritesheet' is not available on this server.", param="variant",
                       code="invalid_value")  # fmt: skip
    if job.status != COMPLETED:
        raise APIError(404, f"Video '{video_id}' is {job.status}; content exists only for completed videos.",
                       param="video_id", code="video_not_ready")  # fmt: skip
    path, media, ext = {
        "video": (svc.storage.video(job.id), "video/mp4", "mp4"),
        "thumbnail": (svc.storage.thumbnail(job.id), "image/png", "png"),
        "drift_report": (svc.storage.drift_report(job.id), "application/json", "drift.json"),  # ours
        "drift_plot": (svc.storage.drift_plot(job.id), "image/png", "drift.png"),  # ours
    }[variant]
    gone = APIError(404, f"The {variant} of '{video_id}' is gone (expired or deleted).", param="variant",
                    code="not_found")  # fmt: skip
    if svc.storage.remote is not None:
        return _remote_content(svc, job.id, path.name, media, f"{job.id}.{ext}", range_header, gone)
    if not path.is_file():
        raise gone
    return FileResponse(path, media_type=media, filename=f"{job.id}.{ext}")


def _remote_content(svc: Service, job_id: str, name: str, media: str, filename: str, range_header: str | None,
                    gone: APIError) -> Response:  # fmt: skip
    """A variant in the bucket: a 307 to a presigned URL (`storage_redirect`), or its bytes streamed
    through the API, one `Range` honoured (206) like the local file's."""
    remote = svc.storage.remote
    try:
        if svc.settings.storage_redirect:
            if remote.size(job_id, name) is None:
                raise gone
            return RedirectResponse(remote.presign(job_id, name, filename, media), 307,
                                    headers={"Cache-Control": "no-store"})  # fmt: skip
        obj = remote.open(job_id, name, range_header)
    except OSError as exc:
        log.warning("job %s: the bucket did not serve %s: %s", job_id, name, exc)
        raise APIError(503, "The server's object storage does not answer; retry later.", code="storage_error") from None
    if obj is None:
        raise gone
    if "unsatisfiable" in obj:
        return Response(status_code=416, headers={"Content-Range": f"bytes */{obj['unsatisfiable']}"})
    headers = {"Content-Length": str(obj["length"]), "Accept-Ranges": "bytes",
               "Content-Disposition": f'attachment; filename="{filename}"'}  # fmt: skip
    if obj.get("etag"):
        headers["ETag"] = obj["etag"]
    if obj["content_range"]:
        headers["Content-Range"] = obj["content_range"]
    return StreamingResponse(obj["body"], 206 if obj["content_range"] else 200, headers, media_type=media)


def _last_event_id(last: str | None) -> int:
    """The event id an SSE client resumes after (ids are database integers: at most 2**63-1)."""
    if last is None or last == "":
        return 0
    if not (last.isascii() and last.isdigit() and len(last) <= 19 and int(last) < 2**63):
        raise APIError(400, f"Invalid 'Last-Event-ID' ({last[:32]!r}): must be an event id, a whole number in "
                       "0..2**63-1.", param="Last-Event-ID", code="invalid_value")  # fmt: skip
    return int(last)


LastEventID = Annotated[str | None, Header(alias="Last-Event-ID", description="Resume after this event id.")]


@router.get("/{video_id}/events")
async def video_events(video_id: str, request: Request, tenant: CurrentTenant, svc: Svc,
                       last_event_id: LastEventID = None) -> StreamingResponse:  # fmt: skip
    """Server-Sent Events: `status` (every state change), `progress` (every denoising step),
    `segment` (every finished segment). Ends after the terminal status. Resumes after
    `Last-Event-ID`."""
    after = _last_event_id(last_event_id)
    job = await run_in_threadpool(_owned, svc, tenant, video_id)

    async def stream():
        nonlocal after
        idle = 0.0
        ended = job.status in TERMINAL
        while True:
            events = await run_in_threadpool(svc.store.events_after, job.id, after)
            for ev in events:
                after = ev.id
                yield f"id: {ev.id}\nevent: {ev.type}\ndata: {json.dumps({'id': job.id, **ev.data})}\n\n"
                if ev.type == "status" and ev.data.get("status") in TERMINAL:
                    return
            if events:
                idle = 0.0
                continue
            if ended or await request.is_disconnected():  # ended: resumed after its last event
                return
            await asyncio.sleep(0.2)
            idle += 0.2
            if idle >= 15.0:  # keep proxies from closing a quiet stream
                idle = 0.0
                yield ": keep-alive\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})  # fmt: skip

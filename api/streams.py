"""Live streams: the routes that serve a stream job's frames while its worker makes them, and
switch its prompt. A stream job is created by `POST /v1/videos` with `stream: true` (`api.videos`)
and is a video job in every other respect (retrieve, list, events, cancel, content, delete).

    GET  /v1/videos/{id}/stream?from=      MJPEG (multipart/x-mixed-replace), one JPEG part per frame
    WS   /v1/videos/{id}/stream/ws?from=   binary messages: JPEG frames; text: JSON chunk/status
                                           messages; the client sends {"type": "prompt"|"cancel"}
    POST /v1/videos/{id}/prompt            {"prompt": ...}: switch at the next chunk boundary

Frames come from the job's spool (`api.spool`), written by the worker as each chunk is decoded:
they are delivered as they are made, not paced at the video's fps. Without `from` a viewer gets
the frames made after it connects (all of them when the job has not started); `from=N` starts at
frame N (`from=0`: the beginning, or the oldest frame the spool's ring still keeps).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from .auth import CurrentTenant, StreamTenant, tenant_for
from .errors import APIError, error_body, not_found
from .limits import check_text, check_values, parse_json
from .schemas import PromptParams
from .spool import CHUNK, FRAME, SpoolReader, SpoolRecord
from .tables import CANCELLED, COMPLETED, FAILED, TERMINAL, Job, is_job_id
from .videos import Service, Svc, _owned, _validated, read_params

router = APIRouter(prefix="/v1/videos", tags=["streams"])

POLL_SECONDS = 0.05  # spool poll while no frame waits; a 64x64 chunk takes 0.06-0.16 s on one CPU thread
STATUS_POLL_SECONDS = 1.0  # no frame for this long: has the job ended without an END record (worker lost)?
BOUNDARY = "frame"


def _check_streamable(svc: Service, job: Job, start: int | None) -> None:
    """400: not a stream. 409: its stream is over (a completed stream's spool is kept for a minute
    for `?from=` replays, see `stream_spool_keep_seconds`)."""
    if not job.is_stream:
        raise APIError(400, f"Video '{job.id}' is not a stream (it was created without 'stream': true).",
                       param="video_id", code="not_a_stream")  # fmt: skip
    if job.status in (FAILED, CANCELLED):
        raise APIError(409, f"Video '{job.id}' is {job.status}; its stream has ended.", param="video_id",
                       code="stream_ended")  # fmt: skip
    if job.status == COMPLETED and (start is None or not svc.storage.stream_dir(job.id).is_dir()):
        raise APIError(409, f"Video '{job.id}' is completed; its stream has ended. Download the video: "
                       f"GET /v1/videos/{job.id}/content.", param="video_id", code="stream_ended")  # fmt: skip


def request_prompt_switch(svc: Service, tenant: str, video_id: str, prompt: Any) -> Job:
    """Queue a prompt switch (HTTP and WebSocket); APIError naming what is wrong."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise APIError(
            400, f"Invalid 'prompt' ({prompt!r:.64}): must not be empty.", param="prompt", code="invalid_value"
        )
    check_text("prompt", prompt, svc.settings.max_prompt_chars)  # the WebSocket's switch (HTTP's: read_params)
    job = svc.store.request_prompt(tenant, video_id, prompt) if is_job_id(video_id) else None
    if job is None:
        raise not_found(video_id)
    if not job.is_stream:
        raise APIError(400, f"Video '{video_id}' is not a stream (it was created without 'stream': true); "
                       "its prompt cannot be switched.", param="video_id", code="not_a_stream")  # fmt: skip
    if job.status in TERMINAL or job.cancel_requested:
        state = job.status if job.status in TERMINAL else "being cancelled"
        raise APIError(409, f"Video '{video_id}' is {state}; a prompt switch needs a stream that is queued or "
                       "in progress.", param="video_id", code="stream_ended")  # fmt: skip
    return job


async def _records(svc: Service, job_id: str, reader: SpoolReader,
                   gone: Callable[[], Awaitable[bool]]) -> AsyncIterator[SpoolRecord]:  # fmt: skip
    """The spool's records as they are written, until its END record, the job's end, or `gone()`."""
    idle = 0.0
    while True:
        records = await run_in_threadpool(reader.read)
        for r in records:
            yield r
        if reader.ended:
            return
        if records:
            idle = 0.0
            continue
        if await gone():
            return
        await asyncio.sleep(POLL_SECONDS)
        idle += POLL_SECONDS
        if idle >= STATUS_POLL_SECONDS:  # the worker writes END before it finishes the job; this is for lost workers
            idle = 0.0
            job = await run_in_threadpool(svc.store.get_any, job_id)
            if job is None or job.status in TERMINAL:
                for r in await run_in_threadpool(reader.read):
                    yield r
                return


def _start(value: str | None) -> int | None:
    """The WebSocket's `from` (FastAPI validates the MJPEG route's)."""
    if value is None:
        return None
    if not value.isdigit():
        raise APIError(400, f"Invalid 'from' ({value!r}): must be a frame number >= 0.", param="from",
                       code="invalid_value")  # fmt: skip
    return int(value)


# -- routes -------------------------------------------------------------------------------------
@router.post("/{video_id}/prompt")
async def switch_prompt(video_id: str, request: Request, tenant: CurrentTenant, svc: Svc) -> dict[str, Any]:
    """Switch a stream's prompt: its worker applies it before the next chunk (LongLive's re-cache:
    the new prompt steers at once, without a jump). The switch is recorded when a chunk first shows
    it: `stream.prompt_switches` of the video, and a `prompt` event. Of several switches requested
    within one chunk only the last is shown."""
    fields, upload = await read_params(request, svc)
    if upload is not None:
        raise APIError(400, "A prompt switch takes no file.", param=upload.filename, code="unknown_parameter")
    params = _validated(PromptParams, fields)
    job = await run_in_threadpool(request_prompt_switch, svc, tenant, video_id, params.prompt)
    return {"object": "video.prompt_switch", "video_id": job.id, "prompt": params.prompt, "status": "requested"}


@router.get("/{video_id}/stream")
async def mjpeg_stream(video_id: str, request: Request, tenant: StreamTenant, svc: Svc,
                       start: Annotated[int | None, Query(alias="from", ge=0)] = None) -> StreamingResponse:  # fmt: skip
    """MJPEG (`multipart/x-mixed-replace; boundary=frame`): one `image/jpeg` part per frame as it is
    made (an `<img>` shows it live; `X-Frame-Index` numbers the frames). Ends when the stream does.
    Authorization header, or `?api_key=` for a browser's `<img>`."""
    job = await run_in_threadpool(_owned, svc, tenant, video_id)
    _check_streamable(svc, job, start)
    reader = await run_in_threadpool(SpoolReader, svc.storage.stream_dir(job.id), start)

    async def parts():
        try:
            async for r in _records(svc, job.id, reader, request.is_disconnected):
                if r.kind == FRAME:
                    head = (f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(r.payload)}\r\n"
                            f"X-Frame-Index: {r.index}\r\n\r\n")  # fmt: skip
                    yield head.encode() + r.payload + b"\r\n"
            yield f"--{BOUNDARY}--\r\n".encode()
        finally:
            reader.close()

    return StreamingResponse(parts(), media_type=f"multipart/x-mixed-replace; boundary={BOUNDARY}",
                             headers={"Cache-Control": "no-cache, no-store", "X-Accel-Buffering": "no"})  # fmt: skip


@router.websocket("/{video_id}/stream/ws")
async def websocket_stream(websocket: WebSocket, video_id: str) -> None:
    """Server -> client: `{"type": "status"}` first, then per chunk a `{"type": "chunk", index,
    first_frame, frames, prompt, fps}` text message followed by its frames as binary JPEG messages,
    and `{"type": "end", "status", ...}` last (then close 1000). Client -> server:
    `{"type": "prompt", "prompt": "..."}` and `{"type": "cancel"}`, each answered with a
    `prompt_requested` / `cancel_requested` or an `error` message. Auth: the Authorization header
    or `?api_key=`; a refused handshake is answered with the HTTP error (401, 404, 400, 409)."""
    svc: Service = websocket.app.state.service
    try:
        tenant = tenant_for(websocket, query_key=True)
        start = _start(websocket.query_params.get("from"))
        job = await run_in_threadpool(_owned, svc, tenant, video_id)
        _check_streamable(svc, job, start)
    except APIError as exc:
        await _deny(websocket, exc)
        return
    reader = await run_in_threadpool(SpoolReader, svc.storage.stream_dir(job.id), start)
    await websocket.accept()
    lock, closed = asyncio.Lock(), asyncio.Event()

    async def send(message: dict[str, Any] | bytes) -> None:
        async with lock:  # the frame sender and the control replies share the socket
            if isinstance(message, bytes):
                await websocket.send_bytes(message)
            else:
                await websocket.send_text(json.dumps(message))

    async def receive() -> None:
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                await send(await _control(svc, tenant, job.id, message.get("text")))
        except (WebSocketDisconnect, RuntimeError):
            return
        finally:
            closed.set()

    async def gone() -> bool:
        return closed.is_set()

    receiver = asyncio.create_task(receive())
    try:
        await send({"type": "status", "id": job.id, "status": job.status})
        async for r in _records(svc, job.id, reader, gone):
            if r.kind == FRAME:
                await send(r.payload)
            elif r.kind == CHUNK:
                await send({"type": "chunk", **r.info})
        if not closed.is_set():
            end = reader.end_info
            if end is None:  # ended without an END record (the worker was lost): the store knows
                final = await run_in_threadpool(svc.store.get_any, job.id)
                end = {"status": final.status if final is not None else "deleted"}
            await send({"type": "end", **end})
            await websocket.close(1000)
    except (WebSocketDisconnect, RuntimeError):  # the client went away mid-send
        pass
    finally:
        receiver.cancel()
        reader.close()


async def _control(svc: Service, tenant: str, job_id: str, text: str | None) -> dict[str, Any]:
    """One client message -> the reply."""
    try:
        try:
            message = parse_json(text) if text is not None else None  # hostile JSON: the same bounds as HTTP
        except APIError:
            message = None
        if not isinstance(message, dict):
            raise APIError(400, 'Messages must be JSON text: {"type": "prompt", "prompt": "..."} or {"type": "cancel"}.',
                           param="type", code="invalid_json")  # fmt: skip
        check_values(message, max_text=svc.settings.max_prompt_chars)
        kind = message.get("type")
        if kind == "prompt":
            await run_in_threadpool(request_prompt_switch, svc, tenant, job_id, message.get("prompt"))
            return {"type": "prompt_requested", "prompt": message["prompt"]}
        if kind == "cancel":
            job = await run_in_threadpool(svc.store.request_cancel, tenant, job_id)
            if job is None:
                raise not_found(job_id)
            return {"type": "cancel_requested", "status": job.status}
        raise APIError(400, f"Unknown message type {kind!r}: expected 'prompt' or 'cancel'.", param="type",
                       code="invalid_value")  # fmt: skip
    except APIError as exc:
        return {"type": "error", **error_body(exc.message, exc.type, exc.param, exc.code)}


async def _deny(websocket: WebSocket, exc: APIError) -> None:
    """Refuse the handshake with the HTTP error every other endpoint answers."""
    response = JSONResponse(error_body(exc.message, exc.type, exc.param, exc.code), exc.status,
                            headers={"WWW-Authenticate": "Bearer"} if exc.status == 401 else None)  # fmt: skip
    try:
        await websocket.send_denial_response(response)
    except RuntimeError:  # a server without the denial-response extension: close with a policy code
        await websocket.close(code=1008, reason=exc.message[:120])

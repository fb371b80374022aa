"""`run_job(job_id, ctx)`: claim a job in the store, render it with `videogen.render()` (a stream
job: `videogen.streaming.stream.stream()`), record what happens. The embedded runner and the Celery task
both call exactly this.

* **Claim and lease.** The store's atomic claim succeeds only if no live lease is held, so a
  redelivered Celery message or a second worker never renders a job that is running. A
  `LeaseKeeper` thread renews the lease every `lease_seconds / 4`, also while the model loads;
  when the worker dies the lease runs out and the reaper requeues the job.
* **Resume.** The render checkpoints every finished segment in the job's work directory
  (`OutputStorage.workdir`); a job that is claimed again resumes after the last finished segment
  and produces the same video an uninterrupted render would.
* **Cancel.** `render(cancel=...)` is asked before every denoising step and every transformer
  block (`videogen.sampling.interrupt`); it reads a flag that the `LeaseKeeper` thread sets when
  the store's `cancel_requested` is (it asks every `cancel_poll_seconds`) or the lease was lost,
  so a cancel stops the GPU within that plus one block, and the per-block check costs an attribute
  read, not a query. The partial video and the checkpoints are removed. A stream checks the same
  flag, also before every chunk.
* **Streams.** Each chunk goes to the MP4 and to the job's spool (`api.spool`), which the API
  tails to serve the frames live; prompt switches come through the store (`JobStore.record_chunk`).
* **Failures.** Known errors keep their code (`invalid_option`, ...); a full or unwritable disk
  is `storage_error` with a message a user can act on and no server path (`_failure`); anything
  else is `internal_error`. The traceback goes to the log.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass

from videogen.api.logs import bind_tenant, job_log_context
from videogen.api.settings import ServiceSettings
from videogen.api.spool import SpoolWriter
from videogen.api.storage import OutputStorage
from videogen.api.store import JobStore
from videogen.api.tables import CANCELLED, COMPLETED, FAILED, IN_PROGRESS

from .metrics import worker_metrics
from .models import ModelCache

log = logging.getLogger("videogen.worker")


@dataclass
class WorkerContext:
    """What a worker process (or the embedded thread) holds for its whole life."""

    settings: ServiceSettings
    store: JobStore
    storage: OutputStorage
    models: ModelCache
    worker_id: str
    serves: tuple[str, ...] | None = None  # the models it runs (`videogen worker --model`); None: any

    def __post_init__(self) -> None:
        worker_metrics().worker_started(self.worker_id)


class LeaseKeeper:
    """Renews a job's lease in the background (every `lease_seconds / 4`) and watches for a cancel
    (every `poll_seconds`): `lost` turns True if another worker took the job, and `cancelled()`
    (the render's cancel callback) turns True then or once the job's cancel (or delete) is asked."""

    def __init__(self, store: JobStore, job_id: str, worker: str, lease_seconds: float,
                 poll_seconds: float = 0.5) -> None:  # fmt: skip
        self.store, self.job_id, self.worker, self.lease = store, job_id, worker, lease_seconds
        self.poll = min(poll_seconds, lease_seconds / 4)
        self.lost = False
        self._cancel = threading.Event()  # read between transformer blocks: a flag, never a query
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{job_id[-6:]}", daemon=True)

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        renew_at = time.monotonic() + self.lease / 4
        while not self._stop.wait(max(0.0, min(self.poll, renew_at - time.monotonic()))):
            if time.monotonic() >= renew_at:
                renew_at = time.monotonic() + self.lease / 4
                try:
                    if not self.store.renew(self.job_id, self.worker, self.lease):
                        self.lost = True
                        self._cancel.set()
                        return
                except Exception:  # a failed renewal is retried; the lease has 3 more periods to live
                    log.exception("job %s: lease renewal failed", self.job_id)
            try:
                if self.store.cancel_requested(self.job_id):
                    self._cancel.set()
            except Exception:  # asked again at the next poll; a store that stays down fails the renewal
                log.debug("job %s: cancel poll failed", self.job_id, exc_info=True)


class _StepBatcher:
    """Collects denoising-step events and writes them at most every `interval` seconds (and before
    any other event). Each step still becomes its own progress event; a fast model's dozens of steps
    per second just share a transaction instead of each taking SQLite's write lock."""

    def __init__(self, store: JobStore, job_id: str, worker: str, interval: float = 0.2) -> None:
        self.store, self.job_id, self.worker, self.interval = store, job_id, worker, interval
        self.pending: list[tuple[int, int, int]] = []
        self.last = 0.0

    def add(self, segment: int, step: int, steps: int) -> None:
        self.pending.append((segment, step, steps))
        if time.monotonic() - self.last >= self.interval:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.store.record_steps(self.job_id, self.worker, self.pending)
            self.pending = []
        self.last = time.monotonic()


def run_next(ctx: WorkerContext, woken_for: str | None = None, addressed: bool = False) -> str | None:
    """Claim and run the store's fair-share next job of the models this worker serves
    (`JobStore.next_queued`). A broker message is a wake-up, not an assignment: the id it carries
    (`woken_for`) is run first only when the message was `addressed` to this worker (an extension
    of a video it rendered, `api.routing`) and fair share would run it soon (among the next
    candidates); otherwise only when no queued job can be claimed and it is a job whose worker
    vanished (in progress, lease run out). Returns the final status of the job run, None when
    there was nothing to run."""
    candidates = ctx.store.next_queued(models=ctx.serves)
    if addressed and woken_for in candidates:
        candidates.remove(woken_for)
        candidates.insert(0, woken_for)
    for job_id in candidates:
        if (status := run_job(job_id, ctx)) is not None:
            return status
    if woken_for is not None:
        job = ctx.store.get_any(woken_for)
        if job is not None and job.status == IN_PROGRESS and (ctx.serves is None or job.model in ctx.serves):
            return run_job(woken_for, ctx)
    return None


def run_job(job_id: str, ctx: WorkerContext) -> str | None:
    """Render (or stream) one job. Returns its final status, or None when it was not ours to run
    (finished, cancelled, or leased by another worker) or another worker took it over. Every log
    line meanwhile carries the job id and tenant (`api.logs`)."""
    with job_log_context(job_id):
        return _run_job(job_id, ctx)


def _run_job(job_id: str, ctx: WorkerContext) -> str | None:
    store, worker = ctx.store, ctx.worker_id
    job = store.claim(job_id, worker, ctx.settings.lease_seconds)
    if job is None:
        log.info("job %s: not claimed by %s (finished, cancelled or running elsewhere)", job_id, worker)
        return None
    bind_tenant(job.tenant)
    metrics = worker_metrics()
    claimed = metrics.job_claimed(worker, job.created_at, first_start=job.started_at is None)
    status = None
    try:
        status = _run_claimed(job, ctx)
        return status
    finally:
        metrics.job_ended(worker, status, claimed)


def _run_claimed(job, ctx: WorkerContext) -> str | None:
    from videogen.errors import InvalidOption, ModelLoadError, NonFiniteLatents, RenderCancelled

    store, storage, worker, job_id = ctx.store, ctx.storage, ctx.worker_id, job.id
    with LeaseKeeper(store, job_id, worker, ctx.settings.lease_seconds, ctx.settings.cancel_poll_seconds) as lease:
        error: tuple[str, str, str | None] | None = None
        try:
            has_thumbnail = (_stream_job if job.is_stream else _render_job)(job, ctx, lease)
            storage.publish(job_id)  # with a bucket: the files go there (before the store says completed)
            storage.remove_work(job_id)
            store.finish(job_id, worker, COMPLETED, has_video=True, has_thumbnail=has_thumbnail)
            return COMPLETED
        except RenderCancelled:
            if lease.lost:  # another worker owns the job now; its files are its business
                log.warning("job %s: lease lost by %s; stopped", job_id, worker)
                return None
            _discard(storage, job_id)
            store.finish(job_id, worker, CANCELLED)
            return CANCELLED
        except InvalidOption as exc:
            error = (
                "invalid_option",
                str(exc),
                {"guidance": "guidance_scale", "image": "input_reference"}.get(exc.option, exc.option),
            )
        except ModelLoadError as exc:
            error = ("model_load_error", str(exc), "model")
        except NonFiniteLatents as exc:
            error = ("non_finite_latents", str(exc), None)
        except Exception as exc:  # the job fails with the reason; the worker lives on
            log.exception("job %s: render failed", job_id)  # the full detail, paths included, stays here
            error = _failure(exc, storage)
        _discard(storage, job_id)
        store.finish(job_id, worker, FAILED, error=error)
        return FAILED


def _discard(storage: OutputStorage, job_id: str) -> None:
    """A stopped job's files. A bucket that fails here must not keep the job from finishing: the
    reaper removes what is left when the job expires."""
    try:
        storage.remove(job_id)
    except OSError as exc:
        log.warning("job %s: its files in the bucket stay until it expires: %s", job_id, exc)


# What a user can act on when the job's files or rows could not be written; no server path.
STORAGE_ERROR = ("storage_error", "the server could not write the video's files (disk full or not writable); "
                 "the job can be retried", None)  # fmt: skip
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO}
# SQLite's and torch.save's words for the same (torch: "[enforce fail at inline_container.cc:...]
# PytorchStreamWriter failed writing file ...").
_STORAGE_MESSAGES = ("database or disk is full", "disk i/o error", "readonly database", "pytorchstreamwriter failed",
                     "inline_container.cc")  # fmt: skip


def _failure(exc: BaseException, storage: OutputStorage) -> tuple[str, str, str | None]:
    """The job's error for an unexpected exception: `STORAGE_ERROR` for a storage failure, else
    `internal_error` with the exception (data dir paths replaced by `<data_dir>`)."""
    if _is_storage_failure(exc, storage):
        return STORAGE_ERROR
    return "internal_error", f"{type(exc).__name__}: {exc}".replace(str(storage.root), "<data_dir>"), None


def _is_storage_failure(exc: BaseException | None, storage: OutputStorage) -> bool:
    """An OSError on a path under the data dir, a full, read-only or failing disk anywhere, SQLite's
    or torch.save's report of one (through the exception's causes), or a data dir that fails
    `OutputStorage.problem()` now: ffmpeg on a full disk says only that its pipe broke."""
    root = str(storage.root)
    for _ in range(8):  # the cause chain, bounded
        if exc is None:
            break
        if isinstance(exc, OSError):
            paths = [str(p) for p in (exc.filename, exc.filename2) if p]
            if exc.errno in _STORAGE_ERRNOS or any(p == root or p.startswith(root + os.sep) for p in paths):
                return True
        if any(m in str(exc).lower() for m in _STORAGE_MESSAGES):
            return True
        exc = exc.__cause__ or exc.__context__
    return storage.problem() is not None


def _render_job(job, ctx: WorkerContext, lease: LeaseKeeper) -> bool:
    """`videogen.render()` into the job's video (an extension: its new frames, then the join).
    Returns whether a thumbnail was written."""
    from videogen.config.spec import RenderSpec
    from videogen.errors import InvalidOption
    from videogen.rendering import RenderFinished, RenderStarted, SegmentFinished, SegmentRetried, render
    from videogen.sampling.loop import StepProgress

    store, storage, worker, job_id = ctx.store, ctx.storage, ctx.worker_id, job.id

    spec = RenderSpec.from_dict(job.spec)
    spec.device, spec.dtype = ctx.settings.device, ctx.settings.dtype  # the worker's, not the client's
    if spec.image is not None:  # the upload, on this machine (from the bucket when there is one)
        spec.image = str(storage.input_file(job_id))
    model = ctx.models.get(spec.model, device=spec.device, dtype=spec.dtype, attention=spec.attention)
    metrics = worker_metrics()
    metrics.model_loaded(worker, job.model, spec.device, spec.dtype)
    step_time = metrics.steps.labels(job.model)
    video = storage.video(job_id)
    video.parent.mkdir(parents=True, exist_ok=True)
    source = job.source_video_id  # an extension continues this job's video
    source_video, continue_from, source_thumbnail = storage.source_files(source, job_id) if source else (None,) * 3
    if continue_from is not None and not continue_from.is_file():
        raise InvalidOption("video", source, "the source video's files are gone (expired or deleted)")
    target = storage.extension_part(job_id) if source else video
    finished = None
    progress = _StepBatcher(store, job_id, worker)
    last = time.perf_counter()  # a step's time: since the render's previous event
    for event in render(spec, target, model=model, workdir=storage.workdir(job_id), cancel=lease.cancelled,
                        thumbnail=storage.thumbnail(job_id), continue_from=continue_from,
                        tail=storage.tail(job_id)):  # fmt: skip
        now = time.perf_counter()
        if isinstance(event, StepProgress):
            step_time.observe(now - last)
            last = now
            progress.add(event.segment, event.step, event.steps)
            continue
        progress.flush()  # every step is recorded before the next segment/state event
        if isinstance(event, SegmentFinished):
            store.record_segment(job_id, worker, event.index, event.frames_written, event.resumed)
            if not event.resumed:
                metrics.segments.inc()
            metrics.gpu_memory(worker)
        elif isinstance(event, SegmentRetried):  # the health gate re-samples it: the job object and SSE say why
            store.record_retry(job_id, worker, event.index, event.attempt, list(event.reasons))
            metrics.retries.inc()
        elif isinstance(event, RenderStarted):
            store.mark_started(job_id, worker, steps_total=event.total_steps, segments_total=len(event.plan),
                               resumed_segments=event.resumed_segments,
                               steps_per_segment=event.settings.steps)  # fmt: skip
        elif isinstance(event, RenderFinished):
            finished = event
    if source:  # the source's frames, then the new ones; the report already covers both
        from videogen.io.video import concat_videos

        concat_videos([source_video, target], video)
        os.replace(f"{target}.drift.json", storage.drift_report(job_id))
        os.replace(f"{target}.drift.png", storage.drift_plot(job_id))
        target.unlink()
        if source_thumbnail.is_file():
            shutil.copyfile(source_thumbnail, storage.thumbnail(job_id))
    return finished is not None and finished.thumbnail is not None


def _stream_job(job, ctx: WorkerContext, lease: LeaseKeeper) -> bool:
    """`videogen.streaming.stream.stream()`: every chunk goes to the job's MP4 (`VideoWriter`, thumbnail =
    first frame) and, as it is made, to the job's spool (`api.spool`) that the API's live
    endpoints tail. Before every denoising step and transformer block the lease's cancel flag
    says whether to stop (so a cancel stops the work within one block), before each chunk the
    store which prompt to switch to; the switches shown are recorded with the chunk
    (`JobStore.record_chunk`). A stream is not checkpointed: a job taken over after a crash
    streams again from frame 0, replaying the recorded switches at the same frames (same seed: the
    same video). Returns True (thumbnail)."""
    from videogen.config.spec import StreamSpec
    from videogen.errors import RenderCancelled
    from videogen.io.video import VideoWriter
    from videogen.streaming.stream import StreamControl, stream

    store, storage, worker, job_id = ctx.store, ctx.storage, ctx.worker_id, job.id
    spec = StreamSpec.from_dict(job.spec)
    spec.device, spec.dtype = ctx.settings.device, ctx.settings.dtype
    # A switch recorded at frame F was applied before the chunk starting at F; (F - 0.5) / fps
    # schedules it at that same chunk boundary again, clear of float rounding.
    spec.switches = [((sw["frame"] - 0.5) / spec.fps, sw["prompt"]) for sw in job.spec.get("prompt_switches", [])]
    model = ctx.models.get(spec.model, device=spec.device, dtype=spec.dtype, attention="dense")
    worker_metrics().model_loaded(worker, job.model, spec.device, spec.dtype)
    width, height = spec.size
    video = storage.video(job_id)
    video.parent.mkdir(parents=True, exist_ok=True)
    spool = SpoolWriter(storage.stream_dir(job_id), ctx.settings.stream_spool_bytes)
    control = StreamControl(cancel_check=lease.cancelled)  # every step and transformer block

    def apply(controls) -> None:
        if controls.cancel or lease.lost:
            control.cancel()
        elif controls.prompt is not None:
            control.switch_prompt(controls.prompt)

    writer, frames = None, 0
    try:
        writer = VideoWriter(video, width, height, spec.fps, thumbnail=storage.thumbnail(job_id))
        store.mark_started(job_id, worker, steps_total=job.steps_total, segments_total=job.segments_total,
                           resumed_segments=0, steps_per_segment=0)  # fmt: skip
        apply(store.take_controls(job_id, worker))
        for chunk in stream(spec, model, control=control):
            writer.write(chunk.frames)
            spool.write_chunk(chunk.index, chunk.first_frame, chunk.prompt, chunk.fps, chunk.frames)
            frames = chunk.first_frame + len(chunk.frames)
            for attempt, reasons in enumerate(chunk.reasons[:-1], 1):  # the health gate re-generated it
                store.record_retry(job_id, worker, chunk.index, attempt, list(reasons))
                worker_metrics().retries.inc()
            apply(store.record_chunk(job_id, worker, index=chunk.index, first_frame=chunk.first_frame,
                                     frames=len(chunk.frames), prompt=chunk.prompt, fps=chunk.fps))  # fmt: skip
        writer.close()
    except BaseException as exc:
        if writer is not None:
            writer.abort()
        if not lease.lost:  # a new owner has its own spool; otherwise readers learn the end here
            spool.end(CANCELLED if isinstance(exc, RenderCancelled) else FAILED, frames=frames)
        spool.close()
        raise
    spool.end(COMPLETED, frames=frames)  # before the store says completed: a reader that sees that finds the END
    return True

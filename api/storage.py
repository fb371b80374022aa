"""Where a job's files live under the data directory. Paths come from job ids only, never from
user input: every public method checks the id is one of ours (`video_` + 32 hex digits).

    <data_dir>/outputs/<job_id>/video.mp4, thumbnail.png, video.mp4.drift.json|.png (drift report),
                                tail.pt (last latents + stitcher state: what an extension continues),
                                input_reference (an uploaded first-frame image)
    <data_dir>/work/<job_id>/            the render's per-segment checkpoints (crash resume)
    <data_dir>/streams/<job_id>/         a stream job's live frames (`api.spool`; removed by the
                                         reaper `stream_spool_keep_seconds` after the job ends)

With a bucket (`VIDEOGEN_STORAGE_URL=s3://...`, `remote`: api.s3storage) the outputs' home is the
bucket: a worker still renders into the local paths above, then `publish` uploads the finished
files and removes the local copies; an uploaded `input_reference` goes straight to the bucket; an
extension's worker downloads the source's files into its own work dir (`source_files`). Work dirs
(checkpoints) and stream spools stay local (see docs/service.md, "Object storage").
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from pathlib import Path

from .tables import is_job_id


def open_storage(settings, min_free_bytes: int | None = None) -> OutputStorage:
    """The storage `settings` ask for: the data dir (free-space floor `min_free_bytes`, default the
    setting's), plus the bucket of `storage_url` when set (raises `api.s3storage.StorageConfigError`
    for a URL that cannot be used)."""
    remote = None
    if settings.storage_url:
        from .s3storage import S3ObjectStore

        remote = S3ObjectStore(settings.storage_url, settings.storage_redirect_seconds)
    floor = settings.min_free_bytes if min_free_bytes is None else min_free_bytes
    return OutputStorage(settings.data_path, floor, remote=remote)


class OutputStorage:
    def __init__(self, data_dir: Path, min_free_bytes: int = 0, remote=None) -> None:
        self.root = Path(data_dir)
        self.min_free_bytes = min_free_bytes
        self.remote = remote  # an `api.s3storage.S3ObjectStore`, or None: outputs stay under the data dir
        self._last_check: tuple[float, str | None] = (float("-inf"), None)
        (self.root / "outputs").mkdir(parents=True, exist_ok=True)
        (self.root / "work").mkdir(parents=True, exist_ok=True)
        (self.root / "streams").mkdir(parents=True, exist_ok=True)

    def problem(self) -> str | None:
        """Why new files cannot be written under the data dir right now, or None. It writes and
        removes a probe file (`os.access` answers yes to root on a read-only mount) and checks the
        disk's free space against `min_free_bytes`. The reason names no server path."""
        probe = self.root / f".write-probe-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(probe, "wb") as f:
                f.write(b"probe")
            probe.unlink()
            free = shutil.disk_usage(self.root).free
        except OSError as exc:
            return f"not writable ({errno.errorcode.get(exc.errno or 0, 'error')})"
        if free < self.min_free_bytes:
            return f"disk nearly full: {free >> 20} MiB free, below the floor of {self.min_free_bytes >> 20} MiB"
        return None

    def recent_problem(self, max_age: float = 1.0) -> str | None:
        """`problem()`, at most `max_age` s old: cheap enough for every create."""
        checked_at, problem = self._last_check
        if time.monotonic() - checked_at > max_age:
            problem = self.problem()
            self._last_check = (time.monotonic(), problem)
        return problem

    def _checked(self, job_id: str) -> str:
        if not is_job_id(job_id):
            raise ValueError(f"not a job id: {job_id!r}")
        return job_id

    def output_dir(self, job_id: str) -> Path:
        return self.root / "outputs" / self._checked(job_id)

    def video(self, job_id: str) -> Path:
        return self.output_dir(job_id) / "video.mp4"

    def thumbnail(self, job_id: str) -> Path:
        return self.output_dir(job_id) / "thumbnail.png"

    def drift_report(self, job_id: str) -> Path:
        return self.output_dir(job_id) / "video.mp4.drift.json"

    def drift_plot(self, job_id: str) -> Path:
        return self.output_dir(job_id) / "video.mp4.drift.png"

    def input_image(self, job_id: str) -> Path:
        """The uploaded `input_reference` (the video's first frame)."""
        return self.output_dir(job_id) / "input_reference"

    def tail(self, job_id: str) -> Path:
        return self.output_dir(job_id) / "tail.pt"

    def extension_part(self, job_id: str) -> Path:
        """An extension job renders only its new frames here, then joins them to the source's video."""
        return self.output_dir(job_id) / "extension.mp4"

    def workdir(self, job_id: str) -> Path:
        return self.root / "work" / self._checked(job_id)

    def stream_dir(self, job_id: str) -> Path:
        """A stream job's spool: its frames as they are made (`api.spool`)."""
        return self.root / "streams" / self._checked(job_id)

    def stream_ids(self) -> list[str]:
        """Jobs that have a spool (the reaper removes those of finished streams)."""
        try:
            return [n for n in os.listdir(self.root / "streams") if is_job_id(n)]
        except FileNotFoundError:
            return []

    def remove_work(self, job_id: str) -> None:
        shutil.rmtree(self.workdir(job_id), ignore_errors=True)

    def remove_stream(self, job_id: str) -> None:
        shutil.rmtree(self.stream_dir(job_id), ignore_errors=True)

    def remove(self, job_id: str) -> None:
        """The job's files; with a bucket also its objects (an `OSError` when the bucket fails: the
        reaper tries again)."""
        shutil.rmtree(self.output_dir(job_id), ignore_errors=True)
        self.remove_work(job_id)
        self.remove_stream(job_id)
        if self.remote is not None:
            self.remote.delete(self._checked(job_id))

    # -- a bucket (`remote`); each is the local behaviour without one ------------------------------
    def remote_problem(self) -> str | None:
        """Why the bucket cannot be used now (None: fine, or no bucket). `/readyz` and start-up ask."""
        return None if self.remote is None else self.remote.problem()

    def save_input(self, job_id: str, data: bytes) -> Path:
        """Store an uploaded `input_reference`; returns the path the spec names (a worker fetches it
        there first with `input_file` when it lives in the bucket)."""
        path = self.input_image(job_id)
        if self.remote is not None:
            self.remote.put_bytes(data, job_id, path.name)
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def input_file(self, job_id: str) -> Path:
        """The job's `input_reference` on this machine (downloaded from the bucket if need be)."""
        path = self.input_image(job_id)
        if self.remote is not None and not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            self.remote.download(job_id, path.name, path)
        return path

    def source_files(self, source_id: str, job_id: str) -> tuple[Path, Path, Path]:
        """(video, tail, thumbnail) of an extension's source on this machine: with a bucket,
        downloaded into the extension's work dir (removed with it); a missing one is not there."""
        if self.remote is None:
            return self.video(source_id), self.tail(source_id), self.thumbnail(source_id)
        into = self.workdir(job_id) / "source"
        into.mkdir(parents=True, exist_ok=True)
        paths = []
        for local in (self.video(source_id), self.tail(source_id), self.thumbnail(source_id)):
            path = into / local.name
            if not path.is_file():
                self.remote.download(source_id, local.name, path)
            paths.append(path)
        return paths[0], paths[1], paths[2]

    def publish(self, job_id: str) -> None:
        """A finished job's files go to the bucket and leave this machine (no-op without a bucket)."""
        if self.remote is None:
            return
        out = self.output_dir(job_id)
        for path in sorted(out.iterdir()) if out.is_dir() else []:
            if path.is_file() and path.name != "extension.mp4":
                self.remote.upload(path, job_id, path.name)
        shutil.rmtree(out, ignore_errors=True)

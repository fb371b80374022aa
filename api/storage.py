"""Where a job's files live under the data directory. Paths come from job ids only, never from
user input: every public method checks the id is one of ours (`video_` + 32 hex digits).

    <data_dir>/outputs/<job_id>/video.mp4, thumbnail.png, video.mp4.drift.json|.png (drift report),
                                tail.pt (last latents + stitcher state: what an extension continues),
                                input_reference (an uploaded first-frame image)
    <data_dir>/work/<job_id>/            the render's per-segment checkpoints (crash resume)
    <data_dir>/streams/<job_id>/         a stream job's live frames (`api.spool`; removed by the
                                         reaper `stream_spool_keep_seconds` after the job ends)
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from pathlib import Path

from .tables import is_job_id


class OutputStorage:
    def __init__(self, data_dir: Path, min_free_bytes: int = 0) -> None:
        self.root = Path(data_dir)
        self.min_free_bytes = min_free_bytes
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
        shutil.rmtree(self.output_dir(job_id), ignore_errors=True)
        self.remove_work(job_id)
        self.remove_stream(job_id)

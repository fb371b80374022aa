"""The live channel of a stream job: the worker appends each chunk's frames, as JPEGs, to a spool
under the data directory as soon as they are made; the API tails it for the MJPEG and WebSocket
endpoints.

Files rather than a socket or Redis because the worker may be another process (the embedded
child, or a Celery worker on the same host sharing the data directory) and the API may have
several readers per stream, joining at any time; a file needs nothing else running and survives
an API restart.

    <data>/streams/<job id>/00000000.spool, 00000001.spool, ...     (`OutputStorage.stream_dir`)

A spool file is a sequence of records, each a 9-byte header `<BII` (kind, index, payload length)
and the payload:

    CHUNK  index = chunk number, payload JSON {index, first_frame, frames, prompt, fps}
    FRAME  index = frame number in the stream, payload one JPEG
    END    index = 0, payload JSON {status, ...}: nothing follows

A chunk's CHUNK record and its FRAME records are written with one `write` + `flush` after the
chunk is decoded. The spool is a ring: the writer starts a new file at a chunk boundary once the
current one holds `max_bytes / FILES`, and deletes the file `FILES` back, so a long stream keeps
at most about `max_bytes` of recent frames (a reader that fell further behind skips ahead to the
oldest frame still kept). A new file is created only after the previous one is complete, which is
how a reader knows it may move on. No fsync: readers share the host's page cache.

A worker that takes over a job (crash, lease expired) starts the stream again from frame 0 in a
fresh spool; readers notice their file was unlinked, reopen, and skip the frames they already
delivered (the stream is deterministic: same seed, same recorded prompt switches).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHUNK, FRAME, END = 1, 2, 3
_HEADER = struct.Struct("<BII")  # kind, index, payload length
FILES = 4  # ring length; each file holds about max_bytes / FILES
JPEG_QUALITY = 85  # a 64x64 frame of the untrained built-in causal model: 3.6 KB


@dataclass(frozen=True)
class SpoolRecord:
    kind: int  # CHUNK | FRAME | END
    index: int  # chunk number (CHUNK), frame number (FRAME)
    payload: bytes  # JPEG (FRAME) or JSON

    @property
    def info(self) -> dict[str, Any]:
        """The JSON payload of a CHUNK or END record."""
        return json.loads(self.payload)


def _file(folder: Path, seq: int) -> Path:
    return folder / f"{seq:08d}.spool"


def _seqs(folder: Path) -> list[int]:
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(int(n[:-6]) for n in names if n.endswith(".spool") and n[:-6].isdigit())


def encode_jpeg(frame, quality: int = JPEG_QUALITY) -> bytes:
    """(H, W, 3) uint8 RGB -> JPEG bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


class SpoolWriter:
    """The worker's end. Starting one replaces whatever spool the job had (a new attempt)."""

    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = Path(folder)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.file_bytes = max(1, max_bytes // FILES)
        self._seq = -1
        self._fh = None
        self._size = 0
        self._rotate()

    def write_chunk(self, index: int, first_frame: int, prompt: str, fps: float, frames) -> None:
        """One chunk: (T, H, W, 3) uint8 frames numbered first_frame.. in the stream."""
        if self._replaced():
            return
        if self._size >= self.file_bytes:
            self._rotate()
        info = {"index": index, "first_frame": first_frame, "frames": len(frames), "prompt": prompt, "fps": fps}
        parts = [_record(CHUNK, index, json.dumps(info).encode())]
        parts += [_record(FRAME, first_frame + i, encode_jpeg(f)) for i, f in enumerate(frames)]
        self._append(b"".join(parts))

    def end(self, status: str, **info: Any) -> None:
        """The last record: readers stop here. `status` is the job's final status."""
        self._append(_record(END, 0, json.dumps({"status": status, **info}).encode()))
        self.close()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _append(self, data: bytes) -> None:
        if self._fh is None:
            raise ValueError("the spool is closed")
        if self._replaced():
            return
        self._fh.write(data)
        self._fh.flush()  # readers see whole chunks as soon as they are made
        self._size += len(data)

    def _replaced(self) -> bool:
        """Removed (job deleted), or replaced by a worker that took the job over: write nothing
        more, and above all create no file in the new owner's spool."""
        return os.fstat(self._fh.fileno()).st_nlink == 0

    def _rotate(self) -> None:
        self.close()  # complete before the next file exists: readers move on only then
        self._seq += 1
        self._fh = open(_file(self.folder, self._seq), "ab")
        self._size = 0
        _file(self.folder, self._seq - FILES).unlink(missing_ok=True)


def _record(kind: int, index: int, payload: bytes) -> bytes:
    return _HEADER.pack(kind, index, len(payload)) + payload


class SpoolReader:
    """The API's end: `read()` returns the records written since the last call (never blocks).

    `start`: the first frame to deliver (0 = from the start, or the oldest frame the ring still
    keeps), or None for live: only what is written after the reader is made (everything when the
    stream has not started yet). Frames and chunks before the position are skipped,
    which also hides the replay of a restarted stream.
    """

    READ_BYTES = 4 << 20  # per read() call: a slow client gets its backlog in slices

    def __init__(self, folder: Path, start: int | None = 0) -> None:
        self.folder = Path(folder)
        self.next_frame = start or 0
        self.next_chunk = 0
        self.end_info: dict[str, Any] | None = None  # the END record's payload, once read
        self._live = start is None
        self._fh = None
        self._seq = -1
        self._buf = b""
        if self._live:
            self._open_first()  # "after now" is now, not the first read()

    @property
    def ended(self) -> bool:
        return self.end_info is not None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def read(self) -> list[SpoolRecord]:
        out: list[SpoolRecord] = []
        if self.ended or (self._fh is None and not self._open_first()):
            return out
        budget = self.READ_BYTES
        while budget > 0 and not self.ended:
            has_next = _file(self.folder, self._seq + 1).exists()  # checked before reading: see module doc
            data = self._fh.read(budget)
            if data:
                budget -= len(data)
                self._buf += data
                self._parse(out)
                continue
            if has_next:
                if not self._open(self._seq + 1):
                    break
            elif os.fstat(self._fh.fileno()).st_nlink == 0:  # replaced by a new attempt, or removed
                self.close()
                if not self._open_first():
                    break
            else:
                break
        return out

    def _parse(self, out: list[SpoolRecord]) -> None:
        buf, pos = self._buf, 0
        while len(buf) - pos >= _HEADER.size:
            kind, index, length = _HEADER.unpack_from(buf, pos)
            end = pos + _HEADER.size + length
            if end > len(buf):
                break  # the rest is still being written
            record = SpoolRecord(kind, index, buf[pos + _HEADER.size : end])
            pos = end
            if self._keep(record):
                out.append(record)
            if self.ended:
                break
        self._buf = buf[pos:]

    def _keep(self, r: SpoolRecord) -> bool:
        if r.kind == FRAME:
            if r.index < self.next_frame:
                return False
            self.next_frame = r.index + 1
            return True
        if r.kind == CHUNK:
            info = r.info
            if r.index < self.next_chunk or info["first_frame"] + info["frames"] <= self.next_frame:
                return False
            self.next_chunk = r.index + 1
            return True
        if r.kind == END:
            self.end_info = r.info
            return True
        return False

    def _open_first(self) -> bool:
        """The oldest file (replay), or the end of the newest (live)."""
        seqs = _seqs(self.folder)
        if not seqs:
            if self._live:  # nothing made yet: everything is new
                self._live = False
            return False
        if not self._live:
            return self._open(seqs[0])
        self._live = False
        if not self._open(seqs[-1]):
            return False
        skipped: list[SpoolRecord] = []
        self._buf = self._fh.read()
        self._parse(skipped)  # advances next_frame/next_chunk past what exists now (and sees an END)
        return True

    def _open(self, seq: int) -> bool:
        self.close()
        self._buf = b""
        try:
            self._fh = open(_file(self.folder, seq), "rb", buffering=0)
        except FileNotFoundError:  # the ring dropped it (the reader fell behind) or it was removed
            later = [s for s in _seqs(self.folder) if s > seq]
            if not later:
                return False
            return self._open(later[0])
        self._seq = seq
        return True

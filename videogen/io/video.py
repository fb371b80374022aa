"""Video files: streaming writer and reader, probe and join, through ffmpeg (`videogen.io.ffmpeg`).

Frames are piped to ffmpeg as they are produced (`VideoWriter`) and read back as a stream
(`VideoReader`), so memory stays flat however long the video is. Output is H.264, yuv420p,
`+faststart` (the moov atom up front, so browsers start playing before the download ends).

A writer encodes into a hidden temporary file beside the target and renames it into place only
when `close()` succeeds; `abort()` (or an exception inside a `with` block) deletes it. A failed
or cancelled render therefore never leaves a partial video behind.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import numpy as np

from videogen.io.ffmpeg import concat_command, decode_command, encode_command, grow_pipe, pipe_channels, probe_command


class VideoIOError(RuntimeError):
    """ffmpeg could not read or write a video."""


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    """A pipe that `subprocess.Popen` was asked to open (its type allows None)."""
    assert stream is not None, "ffmpeg was started without this pipe"
    return stream


def check_output_path(path: str | os.PathLike, option: str = "--output") -> Path:
    """Fail early, before any model work, when `path` cannot be written."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise ValueError(f"`{option}` {str(path)!r} is a directory, not a file")
    if not parent.is_dir():
        raise ValueError(f"`{option}` {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"`{option}` {str(path)!r}: folder {str(parent)!r} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"`{option}` {str(path)!r} exists and is not writable")
    return p


class VideoWriter:
    """Streams RGB uint8 frames `(T, H, W, 3)` into an H.264 MP4.

    `crf` 17 is visually lossless for H.264; `preset` "medium" is the ffmpeg default. The
    thumbnail (first frame, PNG) is written next to the video on close when `thumbnail` is set.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        width: int,
        height: int,
        fps: float,
        *,
        crf: int = 17,
        preset: str = "medium",
        thumbnail: str | os.PathLike | None = None,
        pix_fmt: str = "rgb24",
    ) -> None:
        channels = pipe_channels(pix_fmt)
        if width % 2 or height % 2:
            raise ValueError(f"`size` must have even width and height for yuv420p, got {width}x{height}")
        self.path = Path(path)
        self.width, self.height, self.fps = int(width), int(height), float(fps)
        self.thumbnail = Path(thumbnail) if thumbnail is not None else None
        self.frames_written = 0
        self.channels = channels
        self._first_frame: np.ndarray | None = None
        self._tmp = self.path.with_name(f".{self.path.name}.part{os.getpid()}.mp4")
        cmd = encode_command(self._tmp, self.width, self.height, self.fps, pix_fmt=pix_fmt, crf=crf, preset=preset)
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self._stdin, self._stderr = _pipe(self._proc.stdin), _pipe(self._proc.stderr)
        grow_pipe(self._stdin)

    def write(self, frames: np.ndarray) -> None:
        """Append frames `(T, H, W, 3)` or one frame `(H, W, 3)`, uint8 RGB (4 channels for "rgb0")."""
        if self._proc is None:
            raise VideoIOError("write() on a closed VideoWriter")
        frames = np.asarray(frames)
        if frames.ndim == 3:
            frames = frames[None]
        if len(frames) == 0:
            return
        if frames.dtype != np.uint8 or frames.shape[1:] != (self.height, self.width, self.channels):
            raise ValueError(
                f"frames must be uint8 (T, {self.height}, {self.width}, {self.channels}), got {frames.dtype} {frames.shape}"
            )
        if self._first_frame is None:
            self._first_frame = frames[0, ..., :3].copy()
        try:
            # the array's own buffer: a large write goes straight to the pipe, no bytes copy
            self._stdin.write(np.ascontiguousarray(frames).reshape(-1).data)
        except BrokenPipeError as exc:
            err = self._stderr.read().decode(errors="replace")
            self.abort()
            raise VideoIOError(f"ffmpeg stopped accepting frames: {err.strip()}") from exc
        self.frames_written += len(frames)

    def close(self) -> Path:
        """Finish encoding and move the file into place. Returns the video's path."""
        if self._proc is None:
            return self.path
        proc, self._proc = self._proc, None
        self._stdin.close()
        err = self._stderr.read().decode(errors="replace")
        if proc.wait() != 0 or self.frames_written == 0:
            self._tmp.unlink(missing_ok=True)
            raise VideoIOError(f"ffmpeg failed writing {self.path}: {err.strip() or 'no frames written'}")
        os.replace(self._tmp, self.path)
        if self.thumbnail is not None and self._first_frame is not None:
            import imageio.v3 as iio

            iio.imwrite(self.thumbnail, self._first_frame)
        return self.path

    def abort(self) -> None:
        """Stop ffmpeg and delete the partial file."""
        if self._proc is not None:
            proc, self._proc = self._proc, None
            proc.kill()
            proc.wait()
            for stream in (self._stdin, self._stderr):
                with suppress(OSError):
                    stream.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


@dataclass(frozen=True)
class VideoInfo:
    width: int
    height: int
    fps: float
    num_frames: int
    codec: str
    pix_fmt: str


_STREAM_RE = re.compile(r"Stream #\S+.*?Video: (?P<codec>\w+).*?, (?P<pix>\w+)(?:\([^)]*\))?, (?P<w>\d+)x(?P<h>\d+)")
_FPS_RE = re.compile(r"(?P<fps>[\d.]+) fps")
_FRAMES_RE = re.compile(r"frame=\s*(\d+)")


def probe(path: str | os.PathLike, decode: bool = True) -> VideoInfo:
    """Size, fps, exact frame count (decoded, not estimated), codec and pixel format.

    `decode=False` counts the video stream's packets without decoding them (ffmpeg stream copy:
    ~100x cheaper, I/O only). For H.264/H.265/VP9 in MP4/MKV that is the frame count; a caller
    that needs the decoded count exactly must count the frames it reads."""
    p = Path(path)
    if not p.is_file():
        raise VideoIOError(f"video {str(path)!r} does not exist")
    out = subprocess.run(probe_command(p, decode), capture_output=True, text=True)
    stream = _STREAM_RE.search(out.stderr)
    if out.returncode != 0 or stream is None:
        raise VideoIOError(f"cannot read video {str(path)!r}: not a video file or corrupt")
    fps = _FPS_RE.search(out.stderr[stream.start() :])
    frames = _FRAMES_RE.findall(out.stderr)
    return VideoInfo(
        width=int(stream["w"]),
        height=int(stream["h"]),
        fps=float(fps["fps"]) if fps else 0.0,
        num_frames=int(frames[-1]) if frames else 0,
        codec=stream["codec"],
        pix_fmt=stream["pix"],
    )


class VideoReader:
    """Streams a video's frames as uint8 RGB arrays, `chunk` frames at a time."""

    def __init__(self, path: str | os.PathLike, decode_count: bool = True) -> None:
        self.path = Path(path)
        self.info = probe(path, decode=decode_count)

    def __len__(self) -> int:
        return self.info.num_frames

    def iter_chunks(self, chunk: int = 16, pix_fmt: str = "rgb24") -> Iterator[np.ndarray]:
        c = pipe_channels(pix_fmt)
        w, h = self.info.width, self.info.height
        frame_bytes = w * h * c
        with self._decoding(pix_fmt) as stdout:
            while True:
                buf = stdout.read(frame_bytes * chunk)
                if not buf:
                    break
                n = len(buf) // frame_bytes
                yield np.frombuffer(buf[: n * frame_bytes], np.uint8).reshape(n, h, w, c)

    def iter_into(self, get_buffer: Callable[[], np.ndarray], pix_fmt: str = "rgb0") -> Iterator[np.ndarray]:
        """Decode straight into caller-owned buffers: `get_buffer()` returns a writable C-contiguous
        uint8 array `(N, H, W, C)`; each is filled and yielded as `buf[:n]` (n < N only at the
        end). No per-chunk allocation and no copy after the pipe read."""
        frame_bytes = self.info.width * self.info.height * pipe_channels(pix_fmt)
        # bufsize=0: stdout is an unbuffered FileIO, whose readinto fills the caller's buffer directly
        with self._decoding(pix_fmt, bufsize=0) as stdout:
            raw = cast(io.FileIO, stdout)
            grow_pipe(raw)
            eof = False
            while not eof:
                buf = get_buffer()
                view = buf.reshape(-1).data  # (N*H*W*C,) bytes of buf itself
                got = 0
                while got < len(view):
                    k = raw.readinto(view[got:])
                    if not k:
                        eof = True
                        break
                    got += k
                n = got // frame_bytes
                if n:
                    yield buf[:n]

    @contextmanager
    def _decoding(self, pix_fmt: str, bufsize: int = -1) -> Iterator[IO[bytes]]:
        """ffmpeg decoding this video to raw `pix_fmt` frames: yields its stdout, stops it on exit."""
        proc = subprocess.Popen(
            decode_command(self.path, pix_fmt), stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=bufsize
        )
        stdout, stderr = _pipe(proc.stdout), _pipe(proc.stderr)
        try:
            yield stdout
        finally:
            stdout.close()
            proc.kill()
            proc.wait()
            stderr.close()

    def __iter__(self) -> Iterator[np.ndarray]:
        for chunk in self.iter_chunks(1):
            yield chunk[0]

    def read_all(self) -> np.ndarray:
        chunks = list(self.iter_chunks(64))
        if not chunks:
            return np.zeros((0, self.info.height, self.info.width, 3), np.uint8)
        return np.concatenate(chunks)


def concat_videos(parts: list[str | os.PathLike], output: str | os.PathLike) -> Path:
    """Join MP4s encoded with the same parameters (size, fps, codec) without re-encoding: ffmpeg's
    concat demuxer with stream copy. Written atomically, like `VideoWriter`."""
    out = Path(output)
    infos = [probe(p) for p in parts]
    first = infos[0]
    for p, info in zip(parts, infos):
        if (info.width, info.height, info.fps, info.codec) != (first.width, first.height, first.fps, first.codec):
            raise VideoIOError(f"cannot join {str(p)!r}: {info.width}x{info.height} {info.fps:g} fps {info.codec} "
                               f"differs from {first.width}x{first.height} {first.fps:g} fps {first.codec}")  # fmt: skip
    listing = out.with_name(f".{out.name}.concat{os.getpid()}.txt")
    tmp = out.with_name(f".{out.name}.part{os.getpid()}.mp4")
    listing.write_text("".join(f"file '{Path(p).resolve().as_posix()}'\n" for p in parts))
    try:
        run = subprocess.run(concat_command(listing, tmp), capture_output=True, text=True)
        if run.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise VideoIOError(f"ffmpeg could not join {len(parts)} videos: {run.stderr.strip()}")
        os.replace(tmp, out)
    finally:
        listing.unlink(missing_ok=True)
    return out

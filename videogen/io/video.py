"""Video I/O through the ffmpeg binary shipped by `imageio-ffmpeg`.

Frames are piped to ffmpeg as they are produced (`VideoWriter`) and read back as a stream
(`VideoReader`), so memory stays flat however long the video is. Output is H.264, yuv420p,
`+faststart` (the moov atom up front, so browsers start playing before the download ends).

A writer encodes into a hidden temporary file beside the target and renames it into place only
when `close()` succeeds; `abort()` (or an exception inside a `with` block) deletes it. A failed
or cancelled render therefore never leaves a partial video behind.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np


class VideoIOError(RuntimeError):
    """ffmpeg could not read or write a video."""


def ffmpeg_exe() -> str:
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


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


# raw pixel formats on the pipe: "rgb0" pads each pixel to 4 bytes (packed-word processing)
_PIX_CHANNELS = {"rgb24": 3, "rgb0": 4}


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
        if pix_fmt not in _PIX_CHANNELS:
            raise ValueError(f"`pix_fmt` must be one of {', '.join(_PIX_CHANNELS)}, got {pix_fmt!r}")
        if width % 2 or height % 2:
            raise ValueError(f"`size` must have even width and height for yuv420p, got {width}x{height}")
        self.path = Path(path)
        self.width, self.height, self.fps = int(width), int(height), float(fps)
        self.thumbnail = Path(thumbnail) if thumbnail is not None else None
        self.frames_written = 0
        self.channels = _PIX_CHANNELS[pix_fmt]
        self._first_frame: np.ndarray | None = None
        self._tmp = self.path.with_name(f".{self.path.name}.part{os.getpid()}.mp4")
        cmd = [
            ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-y",
            "-f", "rawvideo", "-pix_fmt", pix_fmt, "-s", f"{self.width}x{self.height}",
            "-r", f"{self.fps:g}", "-i", "pipe:0",
            "-an", "-c:v", "libx264", "-preset", preset, "-crf", str(crf),
            "-pix_fmt", "yuv420p", "-movflags", "+faststart",
            str(self._tmp),
        ]  # fmt: skip
        self._proc: subprocess.Popen | None = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        _grow_pipe(self._proc.stdin)

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
            self._proc.stdin.write(memoryview(np.ascontiguousarray(frames).reshape(-1)))
        except BrokenPipeError as exc:
            err = self._proc.stderr.read().decode(errors="replace")
            self.abort()
            raise VideoIOError(f"ffmpeg stopped accepting frames: {err.strip()}") from exc
        self.frames_written += len(frames)

    def close(self) -> Path:
        """Finish encoding and move the file into place. Returns the video's path."""
        if self._proc is None:
            return self.path
        proc, self._proc = self._proc, None
        proc.stdin.close()
        err = proc.stderr.read().decode(errors="replace")
        if proc.wait() != 0 or self.frames_written == 0:
            self._tmp.unlink(missing_ok=True)
            raise VideoIOError(f"ffmpeg failed writing {self.path}: {err.strip() or 'no frames written'}")
        os.replace(self._tmp, self.path)
        if self.thumbnail is not None and self._first_frame is not None:
            from PIL import Image

            Image.fromarray(self._first_frame).save(self.thumbnail)
        return self.path

    def abort(self) -> None:
        """Stop ffmpeg and delete the partial file."""
        if self._proc is not None:
            proc, self._proc = self._proc, None
            proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stderr):
                try:
                    stream.close()
                except OSError:
                    pass
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _grow_pipe(stream, size: int = 1 << 20) -> None:
    """Ask Linux for a 1 MiB pipe (default 64 KiB): fewer wake-ups per frame. Best effort."""
    try:
        import fcntl

        fcntl.fcntl(stream.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except (OSError, ValueError, ImportError):
        pass


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
    copy = [] if decode else ["-c", "copy"]
    out = subprocess.run(
        [ffmpeg_exe(), "-hide_banner", "-i", str(p), "-map", "0:v:0", *copy, "-f", "null", "-"],
        capture_output=True, text=True,
    )  # fmt: skip
    stream = _STREAM_RE.search(out.stderr)
    if out.returncode != 0 or stream is None:
        raise VideoIOError(f"cannot read video {str(path)!r}: not a video file or corrupt")
    fps = _FPS_RE.search(out.stderr[stream.start():])
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
        if pix_fmt not in _PIX_CHANNELS:
            raise ValueError(f"`pix_fmt` must be one of {', '.join(_PIX_CHANNELS)}, got {pix_fmt!r}")
        c = _PIX_CHANNELS[pix_fmt]
        w, h = self.info.width, self.info.height
        frame_bytes = w * h * c
        proc = subprocess.Popen(
            [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-i", str(self.path),
             "-map", "0:v:0", "-f", "rawvideo", "-pix_fmt", pix_fmt, "pipe:1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            while True:
                buf = proc.stdout.read(frame_bytes * chunk)
                if not buf:
                    break
                n = len(buf) // frame_bytes
                yield np.frombuffer(buf[: n * frame_bytes], np.uint8).reshape(n, h, w, c)
        finally:
            proc.stdout.close()
            proc.kill()
            proc.wait()
            proc.stderr.close()

    def iter_into(self, get_buffer, pix_fmt: str = "rgb0") -> Iterator[np.ndarray]:
        """Decode straight into caller-owned buffers: `get_buffer()` returns a writable C-contiguous
        uint8 array `(N, H, W, C)`; each is filled and yielded as `buf[:n]` (n < N only at the
        end). No per-chunk allocation and no copy after the pipe read."""
        if pix_fmt not in _PIX_CHANNELS:
            raise ValueError(f"`pix_fmt` must be one of {', '.join(_PIX_CHANNELS)}, got {pix_fmt!r}")
        frame_bytes = self.info.width * self.info.height * _PIX_CHANNELS[pix_fmt]
        proc = subprocess.Popen(
            [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-i", str(self.path),
             "-map", "0:v:0", "-f", "rawvideo", "-pix_fmt", pix_fmt, "pipe:1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
        )  # fmt: skip
        _grow_pipe(proc.stdout)
        try:
            eof = False
            while not eof:
                buf = get_buffer()
                view = memoryview(buf.reshape(-1))
                got = 0
                while got < len(view):
                    k = proc.stdout.readinto(view[got:])
                    if not k:
                        eof = True
                        break
                    got += k
                n = got // frame_bytes
                if n:
                    yield buf[:n]
        finally:
            proc.stdout.close()
            proc.kill()
            proc.wait()
            proc.stderr.close()

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
        run = subprocess.run(
            [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-y", "-f", "concat", "-safe", "0",
             "-i", str(listing), "-c", "copy", "-movflags", "+faststart", str(tmp)],
            capture_output=True, text=True,
        )  # fmt: skip
        if run.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise VideoIOError(f"ffmpeg could not join {len(parts)} videos: {run.stderr.strip()}")
        os.replace(tmp, out)
    finally:
        listing.unlink(missing_ok=True)
    return out

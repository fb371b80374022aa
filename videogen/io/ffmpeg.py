"""ffmpeg command lines for video I/O, built with ffmpeg-python around the binary `imageio-ffmpeg` ships.

One builder per job: encode raw frames from a pipe into an H.264 MP4, decode a video's first video
stream to raw frames on a pipe, count a video's frames, and join MP4s by stream copy. Every command
logs errors only and hides the banner; `videogen.io.video` runs them.

`ffmpeg.probe` is not used: it runs ffprobe, which imageio-ffmpeg does not ship, so frame counts come
from ffmpeg's own log (`videogen.io.video.probe`).
"""

from __future__ import annotations

import os
from typing import IO, Any

import ffmpeg

# Raw pixel formats on the pipe, with bytes per pixel: "rgb0" pads each pixel to 4 bytes, which lets
# readers and writers move whole 32-bit words.
PIPE_PIX_FMTS = {"rgb24": 3, "rgb0": 4}


def ffmpeg_exe() -> str:
    """Path of the ffmpeg binary bundled with imageio-ffmpeg (nothing is downloaded)."""
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


def pipe_channels(pix_fmt: str) -> int:
    """Bytes per pixel of a raw pipe format; a one-line error for any other format."""
    if pix_fmt not in PIPE_PIX_FMTS:
        raise ValueError(f"`pix_fmt` must be one of {', '.join(PIPE_PIX_FMTS)}, got {pix_fmt!r}")
    return PIPE_PIX_FMTS[pix_fmt]


# Colour-exact conversion. swscale's default RGB<->YUV path rounds inexactly and interpolates chroma
# coarsely: every encode/decode round trip darkened frames by about one code value (-1.1/-1.5/-0.9
# RGB on gradients, about -0.6 L*), which a chain of extensions or `drift fix` passes compounds.
# Our MP4s are converted with an explicit BT.709 matrix, limited range, accurate rounding and full
# chroma interpolation, and say so in their tags (colour primaries, transfer, matrix, range), so
# players show what was made. Decoding reads the matrix from the stream's tags (BT.601 if a file
# has none, as players assume) with the same accurate rounding.
_SWS = "accurate_rnd+full_chroma_int+full_chroma_inp"
TO_YUV = (f"scale=out_color_matrix=bt709:out_range=tv:flags={_SWS},"
          "setparams=color_primaries=bt709:color_trc=bt709:colorspace=bt709:range=tv")  # fmt: skip
FROM_YUV = f"scale=in_color_matrix=auto:in_range=auto:flags={_SWS}"
BT709_TAGS = {"color_primaries": "bt709", "color_trc": "bt709", "colorspace": "bt709", "color_range": "tv"}


def _quiet(stream: Any) -> Any:
    return stream.global_args("-hide_banner", "-loglevel", "error")


def encode_command(
    output: str | os.PathLike, width: int, height: int, fps: float, *, pix_fmt: str, crf: int, preset: str
) -> list[str]:
    """Raw `pix_fmt` frames on stdin -> H.264 yuv420p MP4 at `output`, moov atom first (`+faststart`,
    so browsers start playing before the download ends), no audio, overwriting."""
    frames = ffmpeg.input("pipe:0", format="rawvideo", pix_fmt=pix_fmt, s=f"{width}x{height}", r=f"{fps:g}")
    stream = frames.output(
        str(output), an=None, vf=TO_YUV, vcodec="libx264", preset=preset, crf=crf, pix_fmt="yuv420p",
        movflags="+faststart", **BT709_TAGS,
    )  # fmt: skip
    return ffmpeg.compile(_quiet(stream).overwrite_output(), cmd=ffmpeg_exe())


def decode_command(path: str | os.PathLike, pix_fmt: str) -> list[str]:
    """The first video stream of `path` -> raw `pix_fmt` frames on stdout."""
    stream = ffmpeg.input(str(path))["v:0"].output("pipe:1", format="rawvideo", vf=FROM_YUV, pix_fmt=pix_fmt)
    return ffmpeg.compile(_quiet(stream), cmd=ffmpeg_exe())


def probe_command(path: str | os.PathLike, decode: bool) -> list[str]:
    """Run the first video stream of `path` into the null muxer, logging at the default level: the log
    names the stream (codec, pixel format, size, fps) and counts frames. `decode=False` copies the
    packets instead of decoding them."""
    copy = {} if decode else {"c": "copy"}
    stream = ffmpeg.input(str(path))["v:0"].output("-", format="null", **copy)
    return ffmpeg.compile(stream.global_args("-hide_banner"), cmd=ffmpeg_exe())


def concat_command(listing: str | os.PathLike, output: str | os.PathLike) -> list[str]:
    """The files named in the concat-demuxer `listing` -> one MP4 at `output` by stream copy, moov first."""
    parts = ffmpeg.input(str(listing), format="concat", safe=0)
    stream = parts.output(str(output), c="copy", movflags="+faststart")
    return ffmpeg.compile(_quiet(stream).overwrite_output(), cmd=ffmpeg_exe())


def grow_pipe(stream: IO[bytes] | None, size: int = 1 << 20) -> None:
    """Ask Linux for a 1 MiB pipe (default 64 KiB): fewer wake-ups per frame. Best effort."""
    if stream is None:
        return
    try:
        import fcntl

        fcntl.fcntl(stream.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except (OSError, ValueError, ImportError):
        pass

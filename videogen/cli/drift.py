"""`videogen drift report|fix`: drift figures and drift correction for any chained video.

`report VIDEO [--segment-frames N] [--json] [--plot drift.png]` measures a video as it is:
segment k is frames [kN, (k+1)N), the anchor is segment 0. Without `--segment-frames`, a render's
own layout (segments, seams, shots) comes from its sidecar `<video>.drift.json` when one exists
and counts the video's frames; otherwise the whole video is one segment.

`fix VIDEO --segment-frames N [--overlap M] [--mode MODE] [--strength S] -o OUT` corrects a
chained video whose segments of N frames were concatenated as generated: with `--overlap M`,
each segment's first M frames repeat the moments of the previous segment's last M (the output is
then crossfaded and M frames shorter per seam); with M = 0 (default) seams are hard cuts and the
frame count is kept. The video streams through the same `Stitcher` the render loop uses:
a decoder thread reading into one of three cycled segment buffers, the stitcher correcting that
buffer in place on packed RGB0 words, an encoder thread writing from it; memory is those three
buffers whatever the video's length. The drift report of the output is written next to it.

Errors are `ValueError` / `VideoIOError` with one line naming the option; `main()` prints
`videogen: error: <msg>` and returns 2, as the main CLI does. No partial output is left behind.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from videogen.io.video import VideoIOError, VideoReader, VideoWriter, check_output_path
from videogen.stitch.config import MODES, DriftConfig
from videogen.stitch.report import build_report
from videogen.stitch.stats import frame_lab_stats
from videogen.stitch.stitcher import Stitcher

READ_CHUNK = 16  # frames per pipe read: ~25 MB at 832x480 RGB0
SEGMENT_BUFFERS = 3  # fix: one being decoded, one being corrected, one being encoded


def add_drift_parser(subparsers) -> argparse.ArgumentParser:
    """Register `drift report` and `drift fix` on an argparse subparsers object."""
    drift = subparsers.add_parser("drift", help="measure or correct colour drift of a chained video")
    sub = drift.add_subparsers(dest="drift_command", metavar="{report,fix}")
    sub.required = True
    _add_subcommands(sub)
    return drift


def _add_subcommands(sub) -> None:
    rep = sub.add_parser("report", help="drift figures (and a plot) of a video")
    rep.add_argument("video")
    rep.add_argument(
        "--segment-frames",
        type=int,
        default=None,
        metavar="N",
        help="frames per segment (default: the render's layout from VIDEO.drift.json, else one segment)",
    )
    rep.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    rep.add_argument("--frames", action="store_true", help="with --json: include per-frame series")
    rep.add_argument("--plot", default=None, metavar="PNG", help="write a plot of L*, a*, b* over time")
    rep.set_defaults(func=run_report)

    fix = sub.add_parser("fix", help="correct drift of a chained video, streaming")
    fix.add_argument("video")
    fix.add_argument("--segment-frames", type=int, required=True, metavar="N")
    fix.add_argument(
        "--overlap",
        type=int,
        default=0,
        metavar="M",
        help="frames each segment repeats from the previous one (crossfaded)",
    )
    fix.add_argument("--mode", default="lab-meanstd", help=f"one of {', '.join(MODES)}")
    fix.add_argument("--strength", type=float, default=1.0, help="0 (identity) .. 1 (full)")
    fix.add_argument("--max-shift", type=float, default=DriftConfig.max_shift, help="LAB units")
    fix.add_argument("--reference-image", default=None, help="anchor to this image's colours")
    fix.add_argument("--blend-space", default=DriftConfig.blend_space, help="linear or lab")
    fix.add_argument("--crf", type=int, default=18)
    fix.add_argument("--preset", default="superfast", help="x264 preset (speed vs file size)")
    fix.add_argument("--no-report", action="store_true", help="skip <OUT>.drift.json/.png")
    fix.add_argument("-o", "--output", required=True, metavar="OUT")
    fix.set_defaults(func=run_fix)


def main(argv: list[str] | None = None) -> int:
    """Entry with just the drift subcommands: `main(["report", "v.mp4", "--json"])`."""
    parser = argparse.ArgumentParser(prog="videogen drift")
    sub = parser.add_subparsers(dest="drift_command", metavar="{report,fix}")
    sub.required = True
    _add_subcommands(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, VideoIOError) as exc:
        print(f"videogen: error: {exc}", file=sys.stderr)
        return 2


# ----------------------------------------------------------------------------------------------


def _check_segment_frames(n: int | None, num_frames: int) -> None:
    if n is None:
        return
    if n < 1:
        raise ValueError(f"`--segment-frames` must be >= 1, got {n}")
    if n > num_frames:
        raise ValueError(f"`--segment-frames` {n} is longer than the video ({num_frames} frames)")


def run_report(args) -> int:
    reader = VideoReader(args.video)
    info = reader.info
    if info.num_frames == 0:
        raise VideoIOError(f"video {args.video!r} has no frames")
    _check_segment_frames(args.segment_frames, info.num_frames)
    if args.plot is not None:
        check_output_path(args.plot, "--plot")
    stats = np.concatenate([frame_lab_stats(c) for c in reader.iter_chunks(READ_CHUNK)])
    n = len(stats)
    layout = None if args.segment_frames else sidecar_layout(args.video, n)
    if layout is None:
        seg = args.segment_frames or n
        starts = list(range(0, n, seg))
        layout = _Layout(starts, [0] * len(starts), [(s, s) for s in starts[1:]], [0],
                         "segment-frames" if args.segment_frames else "whole video")  # fmt: skip
    # each shot's anchor: its first segment's mean (mean of per-frame means: equal pixel counts)
    anchors = []
    for shot in range(len(layout.shot_starts)):
        j = layout.shots.index(shot) if shot in layout.shots else 0
        end = layout.starts[j + 1] if j + 1 < len(layout.starts) else n
        anchors.append(stats[layout.starts[j] : end, :3].mean(0))
    report = build_report(stats, layout.starts, layout.shots, layout.seams, layout.shot_starts, anchors, fps=info.fps)
    report.extra["layout"] = layout.source
    if args.plot is not None:
        report.plot(args.plot)
    if args.json:
        print(report.to_json(frames=args.frames))
    else:
        print(_summary(report, args.video))
    return 0


class _Layout(NamedTuple):
    starts: list[int]  # first frame of each segment
    shots: list[int]  # each segment's shot
    seams: list[tuple[int, int]]  # [start, end) of each seam's crossfade (start == end: hard cut)
    shot_starts: list[int]
    source: str  # where it came from: the sidecar's path, "segment-frames" or "whole video"


def sidecar_layout(video: str, num_frames: int) -> _Layout | None:
    """The render's segment layout from `<video>.drift.json` (written by `render()`), or None when
    there is none, it is unreadable, or it describes another frame count (e.g. an extension's,
    whose timeline includes its source's frames)."""
    path = Path(video).with_name(Path(video).name + ".drift.json")
    try:
        d = json.loads(path.read_text())
        segments = d["segments"]
        layout = _Layout([int(s["start"]) for s in segments], [int(s["shot"]) for s in segments],
                         [(int(a), int(b)) for a, b in d["seams"]], [int(c) for c in d["shot_starts"]], str(path))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None
    ok = int(d.get("num_frames", -1)) == num_frames and layout.starts and layout.starts[0] == 0
    ok = ok and all(0 <= s < num_frames for s in layout.starts) and layout.starts == sorted(layout.starts)
    return layout if ok and layout.shot_starts else None


def _summary(r, name: str) -> str:
    se = r.start_end
    lines = [
        f"{name}: {r.num_frames} frames, {len(r.segments)} segments ({r.extra.get('layout', 'given')})",
        f"  dE76 vs anchor   mean {r.dE76_mean:.2f}  max {max((s.dE76 for s in r.segments), default=0):.2f}  (just noticeable ~2.3)",
        f"  dE2000 vs anchor mean {r.dE2000_mean:.2f}",
        f"  start->end       dL* {se['dL']:+.2f}  da* {se['da']:+.2f}  db* {se['db']:+.2f}  contrast x{se['contrast_ratio']:.3f}",
        f"  seam jump        max {r.seam_jump_max:.2f}  (1 = a typical in-segment step)",
        f"  flicker          {r.flicker:.4f}",
    ]
    return "\n".join(lines)


def _fix_config(args) -> DriftConfig:
    """Validate options by their CLI names before any work (DriftConfig names its fields)."""
    if args.mode not in MODES:
        raise ValueError(f"`--mode` must be one of {', '.join(MODES)}, got {args.mode!r}")
    if not 0.0 <= args.strength <= 1.0:
        raise ValueError(f"`--strength` must be in [0, 1], got {args.strength:g}")
    if not args.max_shift >= 0:
        raise ValueError(f"`--max-shift` must be >= 0, got {args.max_shift:g}")
    if args.overlap < 0:
        raise ValueError(f"`--overlap` must be >= 0, got {args.overlap}")
    if args.segment_frames < 1:
        raise ValueError(f"`--segment-frames` must be >= 1, got {args.segment_frames}")
    if args.overlap and args.segment_frames < 2 * args.overlap:
        raise ValueError(
            f"`--overlap` {args.overlap} needs `--segment-frames` >= {2 * args.overlap}, got {args.segment_frames}"
        )
    if args.reference_image is not None and not Path(args.reference_image).is_file():
        raise ValueError(f"`--reference-image` {args.reference_image!r} does not exist")
    try:
        return DriftConfig(mode=args.mode, strength=args.strength, max_shift=args.max_shift,
                           reference_image=args.reference_image, blend_space=args.blend_space)  # fmt: skip
    except ValueError as exc:
        raise ValueError(
            str(exc).replace("`blend_space`", "`--blend-space`").replace("`reference_image`", "`--reference-image`")
        ) from None


def run_fix(args) -> int:
    cfg = _fix_config(args)
    out = check_output_path(args.output, "--output")
    if out.resolve() == Path(args.video).resolve():
        raise ValueError(f"`--output` {args.output!r} is the input video")
    reader = VideoReader(args.video, decode_count=False)  # packets: no decode pass just to count
    info = reader.info
    n, o = args.segment_frames, args.overlap
    _check_segment_frames(n, info.num_frames)
    rest = info.num_frames % n
    if rest and rest < max(2 * o, 1):
        raise ValueError(
            f"`--segment-frames` {n} with `--overlap` {o} does not fit {info.num_frames} frames: "
            f"the last segment has {rest} frames, needs at least {max(2 * o, 1)}"
        )
    t0 = time.perf_counter()
    stitcher = Stitcher(overlap_frames=o, config=cfg, fps=info.fps)
    counts: dict = {}
    written = fix_stream(reader, stitcher, out, n, crf=args.crf, preset=args.preset, counts=counts)
    elapsed = time.perf_counter() - t0
    frames_in = counts.get("frames_in", info.num_frames)
    report = stitcher.report()
    report.extra["fix"] = {"input": str(args.video), "frames_in": frames_in, "frames_out": written,
                           "seconds": round(elapsed, 3), "fps": round(frames_in / elapsed, 1)}  # fmt: skip
    if not args.no_report:
        report.write(out)
    print(f"{out}: {written} frames ({frames_in} in), {frames_in / elapsed:.0f} frames/s; "
          f"dE76 mean {report.dE76_mean:.2f}, seam jump max {report.seam_jump_max:.2f}")  # fmt: skip
    return 0


class _Stopped(Exception):
    """The decoder was told to stop (another thread failed)."""


def fix_stream(reader: VideoReader, stitcher: Stitcher, out: Path, segment_frames: int, *,
               crf: int = 18, preset: str = "superfast", counts: dict | None = None) -> int:  # fmt: skip
    """Decode -> stitch per segment -> encode, with the decoder and the encoder on their own
    threads (both mostly wait on ffmpeg pipes, which release the GIL). Returns frames written.

    Memory is SEGMENT_BUFFERS segment-sized RGB0 buffers, allocated once and cycled: the decoder
    reads a segment straight into a free buffer, the stitcher corrects it in place
    (`push(inplace=True)`), the encoder writes it from there and frees the buffer. Nothing else
    segment-sized is allocated, so peak memory does not depend on the video's length.
    `counts`, if given, receives `frames_in`: the frames actually decoded."""
    info = reader.info
    free: queue.Queue = queue.Queue()
    for _ in range(SEGMENT_BUFFERS):
        free.put(np.empty((segment_frames, info.height, info.width, 4), np.uint8))
    full: queue.Queue = queue.Queue()  # bounded by the buffers
    ready: queue.Queue = queue.Queue()  # (frames, buffer to free once written); bounded likewise
    stop = threading.Event()
    errors: list[BaseException] = []

    def get_buffer() -> np.ndarray:
        while not stop.is_set():
            try:
                return free.get(timeout=0.1)
            except queue.Empty:
                continue
        raise _Stopped

    def decode() -> None:
        try:
            for seg in reader.iter_into(get_buffer, pix_fmt="rgb0"):
                full.put(seg)
        except _Stopped:
            pass
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)
        finally:
            full.put(None)

    def encode(writer: VideoWriter) -> None:
        try:
            while (item := ready.get()) is not None:
                frames, buf = item
                if not errors:
                    writer.write(frames)
                if buf is not None:
                    free.put(buf)
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)
            stop.set()
            while ready.get() is not None:  # drain so the producer never blocks
                pass

    writer = VideoWriter(out, info.width, info.height, info.fps or 16.0, crf=crf, preset=preset, pix_fmt="rgb0")
    dec = threading.Thread(target=decode, daemon=True)
    enc = threading.Thread(target=encode, args=(writer,), daemon=True)
    dec.start()
    enc.start()
    try:
        stitcher.new_shot()
        frames_in = 0
        while (seg := full.get()) is not None:
            buf = seg if seg.base is None else seg.base
            if errors:
                break
            frames_in += len(seg)
            ready.put((stitcher.push(seg, inplace=True), buf))
        if counts is not None:
            counts["frames_in"] = frames_in
        if not errors:
            ready.put((stitcher.flush(), None))
        ready.put(None)
        enc.join()
        stop.set()
        if errors:
            raise errors[0]
        if writer.frames_written == 0:
            raise VideoIOError(f"cannot read video {str(reader.path)!r}: no frames decoded")
        writer.close()
        return writer.frames_written
    except BaseException:
        stop.set()
        if enc.is_alive():
            ready.put(None)
            enc.join(timeout=5)
        writer.abort()
        raise

"""Streaming benchmark: time to the first frame and sustained frames/s of `videogen.streaming.stream`,
against a plain (non-streaming) render of the same clip, plus drift figures of a long stream.

    python benchmarks/stream.py                       # builtin-causal vs builtin, 5 s clip, 120 s stream
    python benchmarks/stream.py --long-seconds 30     # quicker

Targets (issue 7, this 2-core CPU): first frame within 15% of the non-streaming render time of a
5 s clip; sustained generation at or above playback rate (16 fps). Decoding to RGB frames is
included in every figure (the frames are what a viewer gets). Models are loaded once, before any
timing, as a worker does. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt", default="a red circle moving right on a black background")
    p.add_argument("--model", default="builtin-causal")
    p.add_argument("--baseline", default="builtin", help="the non-streaming model rendering the same clip")
    p.add_argument("--seconds", type=float, default=5.0, help="the clip both render")
    p.add_argument("--long-seconds", type=float, default=120.0, help="the long stream (sustained fps, drift, memory)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="auto")
    p.add_argument("--keep", help="write the long stream to this MP4")
    args = p.parse_args()
    warnings.simplefilter("ignore")

    from videogen.config.spec import RenderSpec
    from videogen.models.loader import load_model
    from videogen.rendering.render import render
    from videogen.stitch.report import build_report
    from videogen.stitch.stats import frame_lab_stats
    from videogen.streaming.stream import StreamSpec, stream

    causal = load_model(args.model, device=args.device, dtype="auto", attention="dense")
    base = load_model(args.baseline, device=args.device, dtype="auto")
    fps = causal.preset.fps

    render_s, ttff, clip_s = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        spec = RenderSpec.single(args.prompt, args.seconds, model=args.baseline)
        for _ in range(args.repeats + 1):  # the first of each is a warm-up
            t0 = time.perf_counter()
            for _ in render(spec, Path(tmp) / "clip.mp4", model=base, thumbnail=False):
                pass
            render_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            first = None
            for _chunk in stream(StreamSpec(args.prompt, seconds=args.seconds, model=args.model), causal):
                if first is None:
                    first = time.perf_counter() - t0
            clip_s.append(time.perf_counter() - t0)
            ttff.append(first)
    render_med, ttff_med, clip_med = (statistics.median(x[1:]) for x in (render_s, ttff, clip_s))

    # The long stream: sustained rate after the first chunk, bounded memory, drift.
    writer = None
    if args.keep:
        from videogen.io.video import VideoWriter

        w, h = causal.preset.size
        writer = VideoWriter(args.keep, w, h, fps)
    stats, frames, rss = [], 0, []
    t0 = time.perf_counter()
    t_first = None
    for chunk in stream(StreamSpec(args.prompt, seconds=args.long_seconds, model=args.model), causal):
        if t_first is None:
            t_first, first_frames = time.perf_counter(), len(chunk.frames)
        stats.append(frame_lab_stats(chunk.frames))
        if writer is not None:
            writer.write(chunk.frames)
        frames += len(chunk.frames)
        if chunk.index in (10, 100) or frames >= args.long_seconds * fps:
            rss.append(_rss_mb())
    long_s = time.perf_counter() - t0
    sustained = (frames - first_frames) / (time.perf_counter() - t_first)
    if writer is not None:
        writer.close()
    stats = np.concatenate(stats)
    second = int(fps)  # drift figures per 1-s window, anchored to the first second
    starts = list(range(0, len(stats), second))
    report = build_report(
        stats, starts, [0] * len(starts), [(s, s) for s in starts[1:]], [0], [stats[:second, :3].mean(0)], fps=fps
    )
    se = report.start_end

    ratio = ttff_med / render_med
    print(f"{'':<34}{'ours (stream)':>16}{'baseline (render)':>20}{'ratio':>9}")
    print(f"{'time to first frame, 5 s clip':<34}{ttff_med:>15.3f}s{render_med:>19.3f}s{ratio:>9.3f}   target <= 0.15")
    print(f"{'whole 5 s clip':<34}{clip_med:>15.3f}s{render_med:>19.3f}s{clip_med / render_med:>9.3f}")
    print(
        f"{'sustained frames/s':<34}{sustained:>16.1f}{fps:>20.1f}{sustained / fps:>9.2f}   (baseline column: playback rate)"
    )
    print(
        f"long stream: {frames} frames ({frames / fps:.0f} s) in {long_s:.1f} s; RSS {' -> '.join(f'{r:.0f}' for r in rss)} MB"
    )
    print(f"drift over the stream: dL* end-start {se['dL']:+.2f}, dE2000 {se['dE2000']:.2f}, contrast x{se['contrast_ratio']:.3f}, "
          f"mean dE76 per second vs the first {report.dE76_mean:.2f}, flicker {report.flicker:.5f}")  # fmt: skip
    print(json.dumps({
        "model": args.model, "baseline": args.baseline, "clip_seconds": args.seconds,
        "time_to_first_frame_s": round(ttff_med, 4), "render_s": round(render_med, 4),
        "ttff_over_render": round(ratio, 4), "stream_clip_s": round(clip_med, 4),
        "sustained_fps": round(sustained, 2), "playback_fps": fps,
        "long_stream_frames": frames, "long_stream_s": round(long_s, 2), "rss_mb": [round(r, 1) for r in rss],
        "drift_dL": round(se["dL"], 3), "drift_dE2000": round(se["dE2000"], 3),
        "drift_contrast_ratio": round(se["contrast_ratio"], 4), "drift_dE76_mean": round(report.dE76_mean, 3),
        "flicker": round(report.flicker, 6),
    }))  # fmt: skip


if __name__ == "__main__":
    main()

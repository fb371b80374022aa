"""Drift benchmark: a chain of procedurally drawn moving scenes with compounding drift, corrected
by `videogen drift fix`, measured by `videogen.stitch.report`.

The scene: a textured background (two gradients plus a sum of oriented sinusoids) panning
slowly, and six coloured discs and boxes moving on Lissajous paths. A "chain" cuts the scene's
timeline into segments of `seg` frames, each repeating the previous one's last `overlap` frames.
Segment k carries drift compounded k times: -4% light (linear light), a warm tint (+1.5% red,
-1.5% blue in linear light) and -2% contrast (around mid-grey, sRGB), i.e. each segment a little
darker and warmer than the last; after 24 segments the light is 0.96^24 = 0.38 of the original.

    PYTHONPATH=. python benchmarks/drift.py            # 24 x 81 frames at 832x480, ~2 min
    PYTHONPATH=. python benchmarks/drift.py --quick    # small, for a smoke run

The last line is one JSON object (see `main`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from videogen.io.video import VideoReader, VideoWriter
from videogen.stitch.colour import U8_TO_LINEAR, linear_to_srgb
from videogen.stitch.report import build_report
from videogen.stitch.stats import frame_lab_stats


class Scene:
    """A deterministic moving scene; `frames(t0, n)` draws frames t0 .. t0+n-1 of its timeline."""

    def __init__(self, height: int, width: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.h, self.w = height, width
        pad = width // 8  # the background pans across this margin
        yy, xx = np.mgrid[0:height, 0 : width + pad].astype(np.float32)
        u, v = xx / width, yy / height
        # gradients: a shot's statistics stay stable while the camera pans, as in real footage
        bg = np.stack([0.3 + 0.3 * v, 0.35 + 0.2 * v + 0.05 * np.sin(np.pi * u), 0.55 - 0.2 * v], axis=-1)
        for _ in range(5):  # texture: oriented sinusoids
            ang, freq, amp = rng.uniform(0, np.pi), rng.uniform(8, 40), rng.uniform(0.02, 0.05)
            wave = np.sin(2 * np.pi * freq * (u * np.cos(ang) + v * np.sin(ang)) + rng.uniform(0, 6))
            bg += amp * wave[..., None] * rng.uniform(0.5, 1.0, 3)
        bg += rng.normal(0, 0.01, bg.shape)
        self.bg = (np.clip(bg, 0, 1) * 255).astype(np.uint8)
        self.pad = pad
        self.objects = []
        for i in range(6):
            r = int(rng.uniform(0.05, 0.09) * height)
            yy, xx = np.mgrid[-r : r + 1, -r : r + 1]
            if i % 2:
                alpha = np.clip(r + 0.5 - np.hypot(yy, xx), 0, 1)  # anti-aliased disc
            else:
                alpha = np.ones((2 * r + 1, 2 * r + 1))
            colour = rng.uniform(0.1, 1.0, 3) * 255
            colour[rng.integers(3)] *= 0.3  # saturated
            shade = 0.75 + 0.25 * (yy + r) / (2 * r)  # vertical shading, not a flat patch
            sprite = colour * shade[..., None]
            path = (rng.uniform(0.3, 1.2, 2), rng.uniform(0, 6, 2))  # Lissajous speeds and phases
            self.objects.append((r, alpha[..., None].astype(np.float32), sprite.astype(np.float32), path))

    def frames(self, t0: int, n: int) -> np.ndarray:
        out = np.empty((n, self.h, self.w, 3), np.uint8)
        for j in range(n):
            t = (t0 + j) / 16.0  # seconds at 16 fps
            off = int((np.sin(t * 0.3) * 0.5 + 0.5) * self.pad)
            f = self.bg[:, off : off + self.w].copy()
            for r, alpha, sprite, (speed, phase) in self.objects:
                cy = int((np.sin(t * speed[0] + phase[0]) * 0.5 + 0.5) * (self.h - 2 * r - 2)) + r + 1
                cx = int((np.sin(t * speed[1] + phase[1]) * 0.5 + 0.5) * (self.w - 2 * r - 2)) + r + 1
                region = f[cy - r : cy + r + 1, cx - r : cx + r + 1]
                region[:] = (region * (1 - alpha) + sprite * alpha).astype(np.uint8)
            out[j] = f
        return out


def drift_tables(k: int, light: float = 0.96, tint: float = 0.015, contrast: float = 0.98) -> np.ndarray:
    """Per-channel uint8 -> uint8 tables `(3, 256)` for drift compounded k times."""
    lin = U8_TO_LINEAR[None, :] * (light**k) * np.array([(1 + tint) ** k, 1.0, (1 - tint) ** k])[:, None]
    v = linear_to_srgb(np.clip(lin, 0, 1))
    v = 0.5 + (v - 0.5) * contrast**k
    return np.clip(np.round(v * 255), 0, 255).astype(np.uint8)


def apply_drift(frames: np.ndarray, k: int) -> np.ndarray:
    if k == 0:
        return frames
    t = drift_tables(k)
    return np.stack([t[c][frames[..., c]] for c in range(3)], axis=-1)


def chain_segments(scene: Scene, segments: int, seg: int, overlap: int, drift: bool = True, cut_at: int | None = None):
    """Yield the segments of a chain: segment k shows timeline frames [k(seg-overlap), +seg)
    with drift compounded k times. `cut_at`: from that segment on, a different scene (a shot
    change; its drift restarts at 0 as a new shot's would)."""
    other = Scene(scene.h, scene.w, seed=7) if cut_at is not None else None
    for k in range(segments):
        src, kk = (other, k - cut_at) if cut_at is not None and k >= cut_at else (scene, k)
        f = src.frames(k * (seg - overlap), seg)
        yield apply_drift(f, kk) if drift else f


def write_chain(
    path: Path, scene: Scene, segments: int, seg: int, overlap: int, fps: float = 16.0, drift: bool = True
) -> None:
    with VideoWriter(path, scene.w, scene.h, fps, crf=16, preset="ultrafast") as w:
        for f in chain_segments(scene, segments, seg, overlap, drift=drift):
            w.write(f)


def measure(path: Path, segments: int, seg: int, overlap: int) -> dict:
    """Figures of a stitched video: segment k's output starts at k(seg - overlap), with its
    crossfade (overlap frames) first; the anchor is segment 0's mean."""
    stats = np.concatenate([frame_lab_stats(c) for c in VideoReader(path).iter_chunks(32)])
    starts = [k * (seg - overlap) for k in range(segments)]
    seams = [(s, s + overlap) for s in starts[1:]]
    rep = build_report(stats, starts, [0] * segments, seams, [0], [stats[: starts[1], :3].mean(0)])
    first, last = rep.segments[0].mean_lab, rep.segments[-1].mean_lab
    return {"report": rep, "dL_end": last[0] - first[0]}


def fix_run(video: Path, out: Path, seg: int, overlap: int, preset: str | None = None) -> dict:
    """Run `drift fix` in a fresh process: wall seconds, peak RSS (MiB) and CPU seconds of that
    process (all its threads) and of its ffmpeg children (decoder + encoder)."""
    extra = f",'--preset',{preset!r}" if preset else ""
    code = (
        "import resource,sys,time; from videogen.cli.drift import main; t=time.perf_counter();"
        f"rc=main(['fix',{str(video)!r},'--segment-frames','{seg}','--overlap','{overlap}','-o',{str(out)!r},'--no-report'{extra}]);"
        "s=resource.getrusage(resource.RUSAGE_SELF); c=resource.getrusage(resource.RUSAGE_CHILDREN);"
        "print('RESULT', time.perf_counter()-t, s.ru_maxrss/1024, s.ru_utime+s.ru_stime, c.ru_utime+c.ru_stime); sys.exit(rc)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise RuntimeError(res.stderr)
    line = [x for x in res.stdout.splitlines() if x.startswith("RESULT")][-1].split()
    return {
        "seconds": float(line[1]),
        "rss_mib": float(line[2]),
        "cpu_python": float(line[3]),
        "cpu_ffmpeg": float(line[4]),
    }


def fix_rss(video: Path, out: Path, seg: int, overlap: int) -> tuple[float, float]:
    """Run `drift fix` in a fresh process; returns (seconds, peak RSS MiB of that process)."""
    r = fix_run(video, out, seg, overlap)
    return r["seconds"], r["rss_mib"]


def flicker_per_contrast(rep) -> float:
    """Flicker / (mean per-frame L* std)^2: flicker scales with the square of contrast, so a
    chain whose drift compresses contrast flickers less in absolute terms; this ratio does not."""
    return rep.flicker / max(float(np.mean(rep.frame_std[:, 0])) ** 2, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=24)
    ap.add_argument("--seg", type=int, default=81)
    ap.add_argument("--overlap", type=int, default=8)
    ap.add_argument("--size", default="832x480")
    ap.add_argument("--quick", action="store_true", help="6 segments x 33 frames at 320x192")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of drift fix (median reported)")
    ap.add_argument("--preset", default=None, help="x264 preset for the timed drift fix (default: the CLI's)")
    args = ap.parse_args()
    if args.quick:
        args.segments, args.seg, args.size = 6, 33, "320x192"
    w, h = map(int, args.size.split("x"))
    scene = Scene(h, w)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw, fixed, plain = tmp / "chain.mp4", tmp / "fixed.mp4", tmp / "plain.mp4"
        t = time.perf_counter()
        write_chain(raw, scene, args.segments, args.seg, args.overlap)
        print(f"wrote {args.segments}x{args.seg} frames {w}x{h} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        # uncorrected: the same stitching (crossfades) with --mode off
        from videogen.cli.drift import main as drift_main

        drift_main(["fix", str(raw), "--segment-frames", str(args.seg), "--overlap", str(args.overlap),
                    "--mode", "off", "-o", str(plain), "--no-report"])  # fmt: skip
        runs = [fix_run(raw, fixed, args.seg, args.overlap, args.preset) for _ in range(args.repeat)]
        frames_in = args.segments * args.seg
        fps_runs = [frames_in / r["seconds"] for r in runs]
        rss_long = max(r["rss_mib"] for r in runs)
        # peak RSS for chains a half and a quarter as long: flat if memory does not grow with length
        rss_short = {}
        for n in (args.segments // 4, args.segments // 2):
            if n >= 2:
                short = tmp / f"short{n}.mp4"
                write_chain(short, scene, n, args.seg, args.overlap)
                rss_short[n] = fix_run(short, tmp / f"short{n}_fixed.mp4", args.seg, args.overlap)["rss_mib"]
        rss_half = rss_short.get(args.segments // 2, float("nan"))
        # the undrifted chain, stitched the same way: the floor of seam jump and flicker
        orig, orig_plain = tmp / "orig.mp4", tmp / "orig_plain.mp4"
        write_chain(orig, scene, args.segments, args.seg, args.overlap, drift=False)
        drift_main(["fix", str(orig), "--segment-frames", str(args.seg), "--overlap", str(args.overlap),
                    "--mode", "off", "-o", str(orig_plain), "--no-report"])  # fmt: skip
        og = measure(orig_plain, args.segments, args.seg, args.overlap)["report"]
        un = measure(plain, args.segments, args.seg, args.overlap)
        co = measure(fixed, args.segments, args.seg, args.overlap)
    ru, rc = un["report"], co["report"]
    print(f"drift fix: {' '.join(f'{f:.0f}' for f in fps_runs)} frames/s over {args.repeat} runs; CPU per frame: "
          f"python {1000 * np.median([r['cpu_python'] for r in runs]) / frames_in:.2f} ms, "
          f"ffmpeg {1000 * np.median([r['cpu_ffmpeg'] for r in runs]) / frames_in:.2f} ms", file=sys.stderr)  # fmt: skip
    print(
        f"peak RSS of drift fix: {rss_half:.0f} MiB ({args.segments // 2} segments), {rss_long:.0f} MiB ({args.segments})",
        file=sys.stderr,
    )
    print(
        f"uncorrected: dL_end {un['dL_end']:+.2f} dE76 mean {ru.dE76_mean:.2f} seam max {ru.seam_jump_max:.2f}",
        file=sys.stderr,
    )
    print(
        f"corrected:   dL_end {co['dL_end']:+.2f} dE76 mean {rc.dE76_mean:.2f} seam max {rc.seam_jump_max:.2f}",
        file=sys.stderr,
    )
    result = {
        "segments": args.segments,
        "dL_end_uncorrected": round(un["dL_end"], 3),
        "dL_end_corrected": round(co["dL_end"], 3),
        "dE_mean_corrected": round(rc.dE76_mean, 3),
        "seam_jump_p95_corrected": round(float(np.percentile(rc.seam_jumps, 95)), 3) if rc.seam_jumps else 0.0,
        "flicker_uncorrected": round(ru.flicker, 5),
        "flicker_corrected": round(rc.flicker, 5),
        f"fix_fps_{w}x{h}": round(float(np.median(fps_runs)), 1),
        "flicker_undrifted": round(og.flicker, 5),
        "seam_jump_p95_undrifted": round(float(np.percentile(og.seam_jumps, 95)), 3) if og.seam_jumps else 0.0,
        "peak_rss_mib": {**{f"{n}_segments": round(v) for n, v in rss_short.items()}, f"{args.segments}_segments": round(rss_long)},
        # flicker / (mean L* std)^2, x1e6: contrast-independent (see flicker_per_contrast)
        "flicker_per_contrast_e6": {"uncorrected": round(flicker_per_contrast(ru) * 1e6, 2),
                                    "corrected": round(flicker_per_contrast(rc) * 1e6, 2),
                                    "undrifted": round(flicker_per_contrast(og) * 1e6, 2)},
        "fix_fps_runs": [round(f, 1) for f in fps_runs],
        "fix_cpu_ms_per_frame": {"python": round(1000 * float(np.median([r["cpu_python"] for r in runs])) / frames_in, 2),
                                 "ffmpeg": round(1000 * float(np.median([r["cpu_ffmpeg"] for r in runs])) / frames_in, 2)},
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "fix_preset": args.preset or "superfast (default)",
    }  # fmt: skip
    if f"fix_fps_{w}x{h}" != "fix_fps_832x480":
        result["fix_fps_832x480"] = None  # measured only at the full size
    print(json.dumps(result))


if __name__ == "__main__":
    main()

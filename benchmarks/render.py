"""End-to-end render benchmark: wall time per second of video and peak memory vs video length.

    python benchmarks/render.py                       # builtin preset, 4 s and 32 s
    python benchmarks/render.py --attention sparse    # also renders dense, reports speedup + PSNR
    python benchmarks/render.py --attention sparse --size 256x256 --durations 4   # attention-bound size

Each render runs in its own process so that its peak RSS is its own. Peak RSS must not grow with
the video's length (frames are streamed to ffmpeg; only one segment is in memory at a time).
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(args) -> None:
    import warnings

    warnings.simplefilter("ignore")
    from videogen import RenderSpec, render
    from videogen.models.loader import load_model

    model = load_model(args.model, device=args.device, dtype="auto", attention=args.attention)
    size = tuple(int(x) for x in args.size.split("x")) if args.size else None
    spec = RenderSpec.single(args.prompt, args.seconds, model=args.model, seed=args.seed, steps=args.steps, size=size)
    t0 = time.perf_counter()
    for _ in render(spec, args.output, model=model):
        pass
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({"wall_s": wall, "peak_rss_mb": peak_mb}))


def run_one(args, seconds: float, attention: str, output: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", "--seconds", str(seconds), "--attention", attention,
           "--model", args.model, "--device", args.device, "--prompt", args.prompt, "--seed", str(args.seed),
           "--output", str(output)]  # fmt: skip
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    if args.size:
        cmd += ["--size", args.size]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def psnr(a_path: Path, b_path: Path) -> float:
    import numpy as np

    from videogen.io.video import VideoReader

    a = VideoReader(a_path).read_all().astype(np.float64)
    b = VideoReader(b_path).read_all().astype(np.float64)
    mse = float(((a - b) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    p.add_argument("--model", default="builtin")
    p.add_argument("--device", default="auto")
    p.add_argument("--prompt", default="a red circle moving right on a black background")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--size", default=None, help="WxH (default: the preset's)")
    p.add_argument("--attention", default="dense", help="dense, or a sparse backend to compare against dense")
    p.add_argument("--durations", default="4,32", help="comma-separated seconds")
    p.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)

    durations = [float(s) for s in args.durations.split(",")]
    result: dict = {"model": args.model, "attention": args.attention, "size": args.size or "preset"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"{'seconds':>8} {'attention':>14} {'wall s':>8} {'s/s video':>10} {'peak RSS MB':>12}")
        for seconds in durations:
            runs = {}
            for attention in dict.fromkeys(["dense", args.attention]):
                r = run_one(args, seconds, attention, tmp / f"{attention}-{seconds:g}.mp4")
                runs[attention] = r
                print(
                    f"{seconds:>8g} {attention:>14} {r['wall_s']:>8.2f} {r['wall_s'] / seconds:>10.3f} {r['peak_rss_mb']:>12.0f}"
                )
            key = f"{seconds:g}s"
            ours = runs[args.attention]
            result[f"wall_per_video_s_{key}"] = round(ours["wall_s"] / seconds, 4)
            result[f"peak_rss_mb_{key}"] = round(ours["peak_rss_mb"], 1)
            if args.attention != "dense":
                result[f"speedup_vs_dense_{key}"] = round(runs["dense"]["wall_s"] / ours["wall_s"], 3)
                result[f"psnr_vs_dense_db_{key}"] = round(
                    psnr(tmp / f"dense-{seconds:g}.mp4", tmp / f"{args.attention}-{seconds:g}.mp4"), 2
                )
        rss = [result[f"peak_rss_mb_{s:g}s"] for s in durations]
        result["peak_rss_growth"] = round(rss[-1] / rss[0], 3)
        print(f"peak RSS {rss[-1]:.0f} MB at {durations[-1]:g} s vs {rss[0]:.0f} MB at {durations[0]:g} s "
              f"(x{result['peak_rss_growth']})")  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""End-to-end render benchmark: wall time per second of video and peak memory vs video length.

    python benchmarks/render.py                       # builtin preset, 4 s and 32 s
    python benchmarks/render.py --attention sparse    # also renders dense, reports speedup + PSNR
    python benchmarks/render.py --attention sparse --size 256x256 --durations 4   # attention-bound size
    python benchmarks/render.py --threads-sweep --load 2   # --threads 1, 2 and the default beside 2 busy loops

Each render runs in its own process so that its peak RSS is its own. Peak RSS must not grow with
the video's length (frames are streamed to ffmpeg; only one segment is in memory at a time).
Ends with one JSON line.

`--threads-sweep` times one short render (`--seconds`, default 2) with `--threads 1`, `2` and the
default (`videogen.config.threads.default_threads`), and 2 threads with OpenMP's spinning wait
policy (OMP_WAIT_POLICY=ACTIVE, torch's own default is in between), each in a fresh process, while
`--load` busy-loop processes run, in rounds of alternating order (`--repeats`); it checks that
every setting writes the same bytes and reports the median wall time of each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(args) -> None:
    import warnings

    warnings.simplefilter("ignore")
    threads = None
    if args.threads is not None:  # before torch loads (its OpenMP wait policy)
        from videogen.config.threads import use_threads

        threads = use_threads(None if args.threads == "default" else int(args.threads))
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
    digest = hashlib.sha256(Path(args.output).read_bytes()).hexdigest()[:16]
    print(json.dumps({"wall_s": wall, "peak_rss_mb": peak_mb, "threads": threads, "sha256": digest}))


def run_one(args, seconds: float, attention: str, output: Path, threads: str | None = None,
            env: dict[str, str] | None = None) -> dict:  # fmt: skip
    cmd = [sys.executable, __file__, "--child", "--seconds", str(seconds), "--attention", attention,
           "--model", args.model, "--device", args.device, "--prompt", args.prompt, "--seed", str(args.seed),
           "--output", str(output)]  # fmt: skip
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    if args.size:
        cmd += ["--size", args.size]
    if threads is not None:
        cmd += ["--threads", threads]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def psnr(a_path: Path, b_path: Path) -> float:
    import numpy as np

    from videogen.io.video import VideoReader

    a = VideoReader(a_path).read_all().astype(np.float64)
    b = VideoReader(b_path).read_all().astype(np.float64)
    mse = float(((a - b) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


# label -> (--threads, extra environment) per setting of the thread sweep; "torch": torch's own
# default (a thread per core, OpenMP's default wait policy), as before `--threads` existed
THREAD_SETTINGS = {"1": ("1", {}), "2": ("2", {}), "default": ("default", {}),
                   "2-spinning": ("2", {"OMP_WAIT_POLICY": "ACTIVE"}), "torch": (None, {})}  # fmt: skip


def thread_sweep(args) -> dict:
    """Wall time of one render per thread setting beside `args.load` busy loops (module docstring)."""
    spin = "while True: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(args.load)]
    settings = [(label, *THREAD_SETTINGS[label]) for label in args.settings.split(",")]
    walls: dict[str, list[float]] = {label: [] for label, _, _ in settings}
    chosen, digests = [], set()
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.repeats):
                order = settings if r % 2 == 0 else settings[::-1]  # drift in the load hits all alike
                for label, threads, env in order:
                    res = run_one(args, args.seconds, args.attention, Path(tmp) / f"{r}-{label}.mp4", threads, env)
                    walls[label].append(res["wall_s"])
                    digests.add(res["sha256"])
                    if label == "default":
                        chosen.append(res["threads"])
                    print(f"  round {r + 1}: threads {label:>10}: {res['wall_s']:.2f} s", file=sys.stderr)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    load_after = os.getloadavg()
    median = {label: statistics.median(w) for label, w in walls.items()}
    best = min(median.values())
    print(f"{args.seconds:g} s builtin render, {args.load} busy loop(s), {os.cpu_count()} CPUs, {args.repeats} round(s); "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")  # fmt: skip
    print(f"{'threads':>12} {'median s':>9} {'runs s':>20} {'vs best':>8}")
    for label, w in walls.items():
        runs = " ".join(f"{x:.1f}" for x in w)
        print(f"{label:>12} {median[label]:>9.2f} {runs:>20} {median[label] / best:>7.2f}x")
    print(f"default chose {chosen} thread(s); same bytes in every run: {len(digests) == 1}")
    return {"benchmark": "threads", "model": args.model, "seconds": args.seconds, "steps": args.steps,
            "busy_loops": args.load, "cpus": os.cpu_count(), "repeats": args.repeats,
            "load_avg_before": round(load_before[0], 2), "load_avg_after": round(load_after[0], 2),
            "median_wall_s": {k: round(v, 3) for k, v in median.items()}, "default_threads": chosen,
            "default_vs_best": round(median["default"] / best, 3) if "default" in median else None, "same_bytes": len(digests) == 1}  # fmt: skip


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
    p.add_argument("--seconds", type=float, help="--threads-sweep: the render's length (default 2)")
    p.add_argument("--threads", help=argparse.SUPPRESS)
    p.add_argument("--threads-sweep", action="store_true", help="time --threads 1, 2 and the default under --load")
    p.add_argument("--load", type=int, default=2, help="--threads-sweep: busy-loop processes beside the renders")
    p.add_argument("--repeats", type=int, default=2, help="--threads-sweep: rounds (alternating order)")
    p.add_argument("--settings", default="1,2,default,torch,2-spinning",
                   help=f"--threads-sweep: which settings ({', '.join(THREAD_SETTINGS)})")  # fmt: skip
    args = p.parse_args()
    if args.child:
        return child(args)
    if args.threads_sweep:
        args.seconds = args.seconds or 2.0
        print(json.dumps(thread_sweep(args)))
        return

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

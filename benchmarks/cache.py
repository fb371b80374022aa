"""Step-cache benchmark: speed-up against PSNR to the uncached video, per mode and threshold.

    python benchmarks/cache.py                                  # built-in model, 3 prompts x 2 s, 24 steps
    python benchmarks/cache.py --model tiny-wan --size 64x64    # a tiny Wan 2.1 folder built in code
    python benchmarks/cache.py --first-block 0.1 --mag '' --repeats 3     # one setting, more pairs

One process, one loaded model. For every prompt, repeat and setting, the uncached render and the
cached one run back to back (their order alternating between repeats), so both see the same
machine load; the speed-up is the median of those paired ratios, PSNR is over every frame of the
cached video against the uncached one (the MP4s the user gets), and "blocks" is the share of
transformer block calls that ran (counted by a hook on each block's feed-forward). Torch runs on
one thread (`--threads`): a shared 2-core machine makes multi-threaded timings meaningless.
The health gate is off unless `--gate`: its keep-or-retry decision is a switch, and a segment
that one render keeps and the other re-samples differs wholly (about 22 dB), which says nothing
about the cache. Prompts beyond the first three are held-out scenes of the long-video evaluation,
two-object ones among them. Prints a table and ends with one JSON line (with the load average
before and after, and each setting's PSNR per prompt).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

PROMPTS = ("a red circle moving left", "a blue square moving right on a white background",
           "a yellow triangle bouncing on a black background")  # fmt: skip


def prompts(count: int) -> list[str]:
    """The three above, then held-out scenes of the long-video evaluation (two-object ones among them)."""
    from videogen.training.long_eval import long_prompts

    return [*PROMPTS, *(scene.caption() for scene in long_prompts(max(0, count - len(PROMPTS))))][:count]


def psnr(a, b) -> float:
    import numpy as np

    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def load(args, workdir: Path):
    from videogen.models.loader import load_model

    if args.model == "tiny-wan":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from tiny_wan import save_tiny_wan

        folder = save_tiny_wan(workdir / "tiny-wan", "wan2.1")
        return load_model(str(folder)), str(folder)
    return load_model(args.model), args.model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="builtin", help="a preset, a diffusers folder, or tiny-wan")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--steps", type=int, help="default: the preset's (builtin: 24)")
    ap.add_argument("--size", help="WIDTHxHEIGHT (default: the preset's)")
    ap.add_argument("--first-block", default="0.05,0.1,0.15,0.2", help="thresholds, comma-separated")
    ap.add_argument("--mag", default="0.005,0.01,0.02", help="thresholds, comma-separated")
    ap.add_argument("--taylor", default="0.005,0.01,0.02", help="thresholds, comma-separated")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gate", action="store_true", help="keep the preset's health gate (default: off, see above)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import torch

    from videogen import RenderSpec, render
    from videogen.config.presets import parse_size
    from videogen.io.video import VideoReader

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="cache-bench-"))
    model, model_name = load(args, workdir)
    block_calls = [0]
    for block in model.transformer.blocks:
        block.ffn.register_forward_hook(lambda *_: block_calls.__setitem__(0, block_calls[0] + 1))
    size = parse_size(args.size) if args.size else None
    settings = [("off", 0.0)] + [(mode, float(x)) for mode, arg in (("first-block", args.first_block),
                                 ("mag", args.mag), ("taylor", args.taylor)) for x in arg.split(",") if x]  # fmt: skip

    def run(prompt: str, mode: str, threshold: float, out: Path) -> tuple[float, int]:
        spec = RenderSpec.single(prompt, args.seconds, model=model_name, steps=args.steps, size=size,
                                 cache=mode, cache_threshold=None if mode == "off" else threshold,
                                 health_checks=None if args.gate else [])  # fmt: skip
        block_calls[0] = 0
        t0 = time.perf_counter()
        for _ in render(spec, out, model=model):
            pass
        return time.perf_counter() - t0, block_calls[0]

    rows: dict[tuple[str, float], dict[str, list[float]]] = {s: {"speedup": [], "psnr": [], "blocks": []}
                                                            for s in settings[1:]}  # fmt: skip
    reference = {}
    run(PROMPTS[0], "off", 0.0, workdir / "warmup.mp4")  # first-call costs (allocator, ffmpeg) out of the pairs
    for p, prompt in enumerate(prompts(args.prompts)):
        ref_path = workdir / f"ref{p}.mp4"
        _, ref_blocks = run(prompt, "off", 0.0, ref_path)
        reference[p] = VideoReader(ref_path).read_all()
        for r in range(args.repeats):
            for mode, threshold in settings[1:]:
                out = workdir / f"{p}-{mode}-{threshold}.mp4"
                pair = [("off", workdir / "off.mp4"), (mode, out)]
                times = {}
                for which, path in pair if r % 2 == 0 else pair[::-1]:
                    times[which], blocks = run(prompt, which, threshold, path)
                    if which != "off":
                        cached_blocks = blocks
                row = rows[(mode, threshold)]
                row["speedup"].append(times["off"] / times[mode])
                if r == 0:
                    row["psnr"].append(psnr(reference[p], VideoReader(out).read_all()))
                    row["blocks"].append(cached_blocks / ref_blocks)
    load_after = os.getloadavg()
    shutil.rmtree(workdir, ignore_errors=True)

    print(f"\nstep cache on {args.model}: {args.prompts} prompts x {args.seconds:g} s, {args.repeats} paired "
          f"repeats, {args.threads} thread(s); load average {load_before[0]:.1f} -> {load_after[0]:.1f}")  # fmt: skip
    print(f"{'mode':<12} {'threshold':>9} {'speed-up':>9} {'min':>6} {'PSNR dB':>8} {'min dB':>7} {'blocks':>7}")
    results = []
    for (mode, threshold), row in rows.items():
        result = dict(mode=mode, threshold=threshold, speedup=statistics.median(row["speedup"]),
                      speedup_min=min(row["speedup"]), psnr_db=statistics.mean(row["psnr"]),
                      psnr_min_db=min(row["psnr"]), blocks=statistics.mean(row["blocks"]),
                      psnr_per_prompt=[round(x, 2) for x in row["psnr"]])  # fmt: skip
        results.append(result)
        print(f"{mode:<12} {threshold:>9.3f} {result['speedup']:>8.2f}x {result['speedup_min']:>5.2f}x "
              f"{result['psnr_db']:>8.1f} {result['psnr_min_db']:>7.1f} {result['blocks']:>6.0%}")  # fmt: skip
    print(json.dumps({"benchmark": "cache", "model": args.model, "prompts": args.prompts, "seconds": args.seconds,
                      "repeats": args.repeats, "threads": args.threads, "gate": args.gate, "loadavg_before": load_before[0],
                      "loadavg_after": load_after[0], "results": results}))  # fmt: skip


if __name__ == "__main__":
    main()

"""The built-in model's continuation skill apart from what a chain compounds: one segment at a time,
continued from the truth (`videogen.training.continuation`).

    python benchmarks/continuation.py                                   # the shipped weights
    python benchmarks/continuation.py --weights OLD.safetensors NEW.safetensors --trials 12
    python benchmarks/continuation.py --bands hidden --trials 12        # an object behind the other at the seam

For each held-out long-video prompt (`long_prompts`) and each band (`fresh`: a shot's first
segment; `trained`: a continuation at a clock in [1, 100] latent frames, where the recipe's
continuations are drawn; `long`: [100, 1200], the rest of a 5-minute render; `hidden`, asked for by name, the two-object
prompts only: a `trained` clock at which the prefix ends with the first object behind the
second), `--trials` segments
are denoised exactly as a render denoises them, each from the scene's own frames, and judged:
a segment fails when more than 10% of its new frames show an object missing or in more than one
copy. Each weights file sees the same trials (prompt, clock, layout and noise). Prints the
failure rates per band and object count for each weights file, the ratio to the first, then one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text}")
    return value


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weights", nargs="+", default=[""],
                   help="builtin weights files (default: the shipped one); the first is the baseline")  # fmt: skip
    p.add_argument("--prompts", type=_positive, default=6, help="the first N held-out long-video prompts")
    p.add_argument("--trials", type=_positive, default=8, help="segments per prompt and band")
    p.add_argument(
        "--bands", nargs="+", default=["fresh", "trained", "long"], choices=["fresh", "trained", "long", "hidden"]
    )
    p.add_argument("--seed", type=int, default=0, help="trial t of prompt i draws from seed + 1000 i + t")
    args = p.parse_args()
    warnings.simplefilter("ignore")

    from videogen.models.loader import load_model
    from videogen.training.continuation import HIDDEN_BAND, continue_from_truth
    from videogen.training.long_eval import long_prompts

    scenes = long_prompts(args.prompts)
    results: dict[str, dict] = {}
    for path in args.weights:
        name = path or "shipped"
        if path:
            os.environ["VIDEOGEN_BUILTIN_WEIGHTS"] = path
        else:
            os.environ.pop("VIDEOGEN_BUILTIN_WEIGHTS", None)
        model = load_model("builtin", device="cpu", dtype="auto", attention="dense")
        start = time.perf_counter()
        trials = [
            continue_from_truth(model, scene, band, args.seed + 1000 * i + t)[0]
            for i, scene in enumerate(scenes)
            for band in args.bands
            if band != HIDDEN_BAND or len(scene.objects) == 2
            for t in range(args.trials)
        ]
        rates: dict[str, float] = {}
        for band in args.bands:
            for objects in (1, 2):
                group = [x for x in trials if x.band == band and x.objects == objects]
                if group:
                    rates[f"{band}_{objects}obj"] = round(sum(x.failed for x in group) / len(group), 4)
        per_prompt = {  # band -> failed trials, for the bands the prompt was tried in
            i: {
                b: sum(x.failed for x in trials if x.prompt == s.caption() and x.band == b)
                for b in args.bands
                if any(x.prompt == s.caption() and x.band == b for x in trials)
            }
            for i, s in enumerate(scenes)
        }
        results[name] = {"fail_rate": rates, "failed_per_prompt": per_prompt,
                         "wrong_frames": round(sum(x.wrong for x in trials) / len(trials), 4),
                         "wall_s": round(time.perf_counter() - start)}  # fmt: skip
        print(f"{name}: " + ", ".join(f"{k} {v:.0%}" for k, v in rates.items()), flush=True)
        for i, fails in ((i, f) for i, f in per_prompt.items() if f):  # the prompts tried in some band
            print(f"  {i}: {scenes[i].caption()[:70]:70s} failed " + ", ".join(
                f"{b} {n}/{args.trials}" for b, n in fails.items()), flush=True)  # fmt: skip
    base = next(iter(results.values()))["fail_rate"]
    for name, r in list(results.items())[1:]:
        ratios = {k: round(v / base[k], 2) if base[k] else None for k, v in r["fail_rate"].items()}
        shown = (f"{k} {v}x" if v is not None else f"{k} - (baseline 0)" for k, v in ratios.items())
        print(f"{name} / baseline failure rate: " + ", ".join(shown), flush=True)
    counts = {b: sum(x.band == b for x in trials) for b in args.bands}  # the hidden band: two-object prompts only
    print(json.dumps({"trials_per_band": counts, "results": results}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

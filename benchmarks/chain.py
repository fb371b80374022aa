"""The built-in model's own robustness over a chain of segments, without the health gate.

    python benchmarks/chain.py --seconds 20 --prompts 4                        # the shipped weights
    python benchmarks/chain.py --weights FT.safetensors --context-noise 0.1    # a fine-tune, noised prefix
    python benchmarks/chain.py --weights ANCHORED.safetensors --anchor-frame 6 # a fine-tune trained with anchors

Renders the first K held-out long-video prompts (`long_prompts`) for S seconds each with the gate
off (`health_checks=[]`: what the model itself does at every seam), counts each object's copies
in every frame (missing / one / split or doubled) and judges every 10 s window as
`benchmarks/long.py` does. Prints one line per video, then a JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
import warnings


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weights", help="a weights file for the builtin preset (default: the shipped one)")
    p.add_argument("--context-noise", type=float, default=0.0, help="the preset's context_noise for this run")
    p.add_argument("--anchor-frame", type=int, default=None,
                   help="the preset's anchor_frame for this run (weights trained with --anchor-frac)")  # fmt: skip
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--seeds", type=int, default=1, help="seeds per prompt (prompt i, seed s: 100 + 10 i + s)")
    p.add_argument("--first", type=int, default=0, help="start at held-out prompt FIRST (0-based)")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    if args.weights:
        os.environ["VIDEOGEN_BUILTIN_WEIGHTS"] = args.weights

    from videogen.config.spec import RenderSpec
    from videogen.io.video import VideoReader
    from videogen.models.loader import load_model
    from videogen.rendering.render import render
    from videogen.training.long_eval import judge_video, long_prompts, object_copies

    model = load_model("builtin", device="cpu", dtype="auto", attention="dense")
    model.preset = dataclasses.replace(model.preset, context_noise=args.context_noise, anchor_frame=args.anchor_frame)
    tot = {"frames": 0, "missing": 0, "split": 0, "windows": 0, "passed": 0}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "chain.mp4")
        for i, scene in enumerate(long_prompts(args.first + args.prompts)):
            if i < args.first:
                continue
            for s in range(args.seeds):
                spec = RenderSpec.single(scene.caption(), args.seconds, model="builtin", seed=100 + 10 * i + s,
                                         health_checks=[])  # fmt: skip
                for _ in render(spec, out, model=model, thumbnail=False):
                    pass
                frames = VideoReader(out).read_all()
                for copies in object_copies(frames, scene):
                    tot["frames"] += len(copies)
                    tot["missing"] += int((copies == 0).sum())
                    tot["split"] += int((copies > 1).sum())
                windows = judge_video(frames, scene, model.preset.fps)
                tot["windows"] += len(windows)
                tot["passed"] += sum(w.passed for w in windows)
                verdicts = " | ".join("; ".join(w.failures()) or "pass" for w in windows)
                print(f"{scene.caption()[:60]:60s} seed {s}: {verdicts}", flush=True)
    result = dict(tot, missing_frac=round(tot["missing"] / max(tot["frames"], 1), 4),
                  split_frac=round(tot["split"] / max(tot["frames"], 1), 4),
                  pass_rate=round(tot["passed"] / max(tot["windows"], 1), 3), context_noise=args.context_noise,
                  anchor_frame=args.anchor_frame,
                  weights=args.weights or "shipped", wall_s=round(time.perf_counter() - start))  # fmt: skip
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

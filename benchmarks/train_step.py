"""Training-step benchmark: eager vs torch.compile'd transformer, per clip shape, in one run.

    python benchmarks/train_step.py              # the shipped recipe's four clip lengths
    python benchmarks/train_step.py --steps 20   # more timed steps per shape

Each shape runs the same batches (the recipe's own, from `make_batch`) through forward, backward
and AdamW, eager first, then compiled (its compile time reported apart). The overall ratio
weights the shapes as the recipe draws them. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
import warnings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="timed steps per shape and mode")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import torch

    from videogen.models.builtin import build_fresh
    from videogen.models.codec import PixelCodec
    from videogen.training.config import TrainConfig
    from videogen.training.data import make_batch
    from videogen.training.train import _backward

    cfg = TrainConfig()
    codec = PixelCodec(4, 4)
    transformer, encoder = build_fresh(0)
    params = [p for m in (transformer, encoder) for p in m.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4)
    compiled = torch.compile(transformer, dynamic=False)
    lengths = sorted(set(cfg.latent_frames))
    rows, weighted = [], {"eager": 0.0, "compiled": 0.0}
    for frames in lengths:
        one = dataclasses.replace(cfg, latent_frames=(frames,))
        batches = [make_batch(one, s, codec) for s in range(args.steps + 2)]
        result = {"latent_frames": frames, "batch": int(batches[0][0].shape[0])}
        for name, model in (("eager", transformer), ("compiled", compiled)):
            times = []
            for batch in batches:
                t = time.perf_counter()
                _backward(model, encoder, opt, batch, one)
                opt.step()
                times.append(time.perf_counter() - t)
            if name == "compiled":
                result["compile_s"] = round(times[0], 1)
            result[f"{name}_ms"] = round(1000 * statistics.median(times[2:]), 1)
            weighted[name] += result[f"{name}_ms"] * cfg.latent_frames.count(frames) / len(cfg.latent_frames)
        result["speedup"] = round(result["eager_ms"] / result["compiled_ms"], 2)
        rows.append(result)
        print(f"{frames} latent frames x{result['batch']:>2}: eager {result['eager_ms']:6.1f} ms  compiled "
              f"{result['compiled_ms']:6.1f} ms  ({result['speedup']:.2f}x; compile {result['compile_s']:.0f} s)",
              flush=True)  # fmt: skip
    speedup = weighted["eager"] / weighted["compiled"]
    compile_s = sum(r["compile_s"] for r in rows)
    print(f"recipe mix: eager {weighted['eager']:.1f} ms/step, compiled {weighted['compiled']:.1f} ms/step: "
          f"{speedup:.2f}x ({3600e3 / weighted['eager']:.0f} vs {3600e3 / weighted['compiled']:.0f} steps/hour; "
          f"compiling all shapes {compile_s:.0f} s)")  # fmt: skip
    print(json.dumps({"benchmark": "train_step", "threads": torch.get_num_threads(), "shapes": rows,
                      "eager_ms": round(weighted["eager"], 1), "compiled_ms": round(weighted["compiled"], 1),
                      "speedup": round(speedup, 3), "compile_s": round(compile_s, 1)}))  # fmt: skip


if __name__ == "__main__":
    main()

"""Training-recipe benchmark: two or more recipes of `videogen train builtin`, same seed and batches,
side by side: held-out x0 error along the run, and the wall time each took.

    python benchmarks/optimizer.py                                   # AdamW vs Muon, 1,500 steps
    python benchmarks/optimizer.py --steps 3000 --every 1000 optimizer=adamw optimizer=muon,lr=2e-3

Each recipe is a comma-separated list of `TrainConfig` fields (`videogen.training.config`) over the shipped
defaults. Every `--every` steps the run's EMA weights are scored by `videogen.training.loss.validation_error`
(fresh 9-latent-frame clips of held-out scenes, colour/shape pairs seen in training and never
shown, at fixed noise levels): lower is better, and the ratio column is the first recipe's error over
each other's (> 1: the other is better). Adherence (`videogen eval builtin`) is what the recipe is
finally judged by; this is the cheap, low-noise signal along the way. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
import warnings
from pathlib import Path


def _recipe(text: str):
    from videogen.training.config import TrainConfig

    types = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    out = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in types:
            raise SystemExit(f"benchmarks/optimizer.py: error: recipe {text!r}: {key!r} is not a TrainConfig field")
        kind = types[key] if isinstance(types[key], str) else types[key].__name__
        out[key] = {"int": int, "float": float, "bool": lambda v: v.lower() in ("1", "true", "yes")}.get(kind, str)(
            value
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipes", nargs="*", default=["optimizer=adamw", "optimizer=muon"])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--every", type=int, default=500, help="score the EMA weights every this many steps")
    ap.add_argument("--compile", action="store_true", help="torch.compile as training does by default (slow to start)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from videogen.models.builtin import build_fresh, load_weights
    from videogen.training.config import TrainConfig
    from videogen.training.loss import validation_error
    from videogen.training.train import train_builtin

    results = []
    for text in args.recipes:
        over = _recipe(text)
        cfg = TrainConfig(**{"steps": args.steps, "snapshot_every": args.every, "compile": args.compile, **over})
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            train_builtin(cfg, tmp, output=Path(tmp) / "out.safetensors", log=lambda m: None)
            wall = time.perf_counter() - t0
            curve = {}
            for snap in sorted(Path(tmp).glob("ema-*.safetensors")):
                transformer, encoder = build_fresh(0)
                load_weights(transformer, encoder, snap)
                curve[int(snap.stem.split("-")[1])] = validation_error(transformer, encoder)
        results.append(
            {"recipe": text, "wall_s": round(wall, 1), "steps_per_s": round(cfg.steps / wall, 3), "curve": curve}
        )
        print(f"{text}: {cfg.steps} steps in {wall:.0f} s ({cfg.steps / wall:.2f} steps/s)", flush=True)

    base = results[0]
    sigmas = list(next(iter(base["curve"].values()))["seen"])
    print(f"\nx0 error (held-out clips), per noise level; ratio = {base['recipe']} / recipe")
    for step in base["curve"]:
        for group in ("seen", "unseen"):
            cells = []
            for r in results:
                errs = r["curve"][step][group]
                mean = sum(errs.values()) / len(errs)
                ratio = "" if r is base else f" ({sum(base['curve'][step][group].values()) / len(errs) / mean:.2f}x)"
                cells.append(" ".join(f"{errs[s]:.4f}" for s in sigmas) + f" | {mean:.4f}{ratio}")
            print(f"step {step:>6} {group:<6} " + "   ".join(cells))
    print(f"(sigmas {sigmas}; columns: {', '.join(r['recipe'] for r in results)})")
    print(json.dumps({"benchmark": "train_recipe", "steps": args.steps, "sigmas": sigmas, "results": results}))


if __name__ == "__main__":
    main()

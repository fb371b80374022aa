"""Do objects vanish at segment seams? Issue 20's short-render test, gate off against gate on.

    python benchmarks/seams.py                        # 48 renders: 6 held-out prompts x 8 seeds, 4 s each
    python benchmarks/seams.py --seeds 2 --seconds 4  # a quick look

Renders the held-out long-video prompts (`long_prompts`: straight moves, bounces, two objects)
with `builtin`, each seed twice: with the health gate off (`health_checks=[]`, the model alone)
and with the preset's gate. Around every seam (the overlap, then the first 12 new frames) each
object's copies are counted per frame (`copies_per_frame`, the long-video judge's detector): a
render *loses* an object when it is missing in 2 or more consecutive frames there, and *doubles*
it when there are 2 or more consecutive frames with more than one copy. Prints one line per
render pair, then a JSON line: renders with a vanishing (target 0), with a doubling, retries and
the render time of each arm (gate on / gate off, measured in the same run, interleaved).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

AFTER_SEAM = 12  # new frames after the overlap where a handoff's failure shows


def _runs(flags: np.ndarray, length: int = 2) -> bool:
    """Whether `flags` (T,) bool holds `length` or more consecutive True."""
    run = 0
    for f in flags:
        run = run + 1 if f else 0
        if run >= length:
            return True
    return False


def seam_failures(frames: np.ndarray, scene, seams: list[tuple[int, int]]) -> tuple[bool, bool]:
    """(an object vanished, an object doubled) within the frames around any seam."""
    from videogen.training.long_eval import object_copies

    copies = object_copies(frames, scene)
    lost = doubled = False
    for start, end in seams:
        window = slice(start, min(end + AFTER_SEAM, len(frames)))
        for c in copies:
            lost |= _runs(c[window] == 0)
            doubled |= _runs(c[window] > 1)
    return lost, doubled


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=6)
    p.add_argument("--seeds", type=int, default=8, help="seeds per prompt (seed s: 1000 + s)")
    p.add_argument("--seconds", type=float, default=4.0)
    args = p.parse_args()
    warnings.simplefilter("ignore")

    from videogen.config.spec import RenderSpec
    from videogen.io.video import VideoReader
    from videogen.models.loader import load_model
    from videogen.rendering import RenderFinished, SegmentRetried, render
    from videogen.training.long_eval import long_prompts

    model = load_model("builtin", device="cpu", dtype="auto", attention="dense")
    arms = {"off": {"health_checks": []}, "on": {}}
    tot = {arm: {"renders": 0, "lost": 0, "doubled": 0, "retries": 0, "seconds": 0.0} for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "seams.mp4"
        for scene in long_prompts(args.prompts):
            for s in range(args.seeds):
                line = []
                for arm, extra in arms.items():
                    spec = RenderSpec.single(scene.caption(), args.seconds, model="builtin", seed=1000 + s, **extra)
                    start, report = time.perf_counter(), None
                    for ev in render(spec, out, model=model, thumbnail=False):
                        tot[arm]["retries"] += isinstance(ev, SegmentRetried)
                        if isinstance(ev, RenderFinished):
                            report = ev.report
                    tot[arm]["seconds"] += time.perf_counter() - start
                    seams = [tuple(x) for x in json.loads(Path(report).read_text())["seams"]] if report else []
                    lost, doubled = seam_failures(VideoReader(out).read_all(), scene, seams)
                    tot[arm]["renders"] += 1
                    tot[arm]["lost"] += lost
                    tot[arm]["doubled"] += doubled
                    line.append(f"{arm}: {'LOST' if lost else 'kept'}{' DOUBLED' if doubled else ''}")
                print(f"{scene.caption()[:58]:58s} seed {1000 + s}: " + " | ".join(line), flush=True)
    for arm in tot:
        tot[arm]["seconds"] = round(tot[arm]["seconds"], 1)
    result = {"seconds": args.seconds, "renders_per_arm": tot["off"]["renders"],
              "gate_off": tot["off"], "gate_on": tot["on"],
              "time_ratio_on_off": round(tot["on"]["seconds"] / max(tot["off"]["seconds"], 1e-9), 3)}  # fmt: skip
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

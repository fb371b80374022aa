"""The segment health gate on the shipped built-in weights: its false-positive rate on normal
renders (calibration) and what it adds to render time.

    PYTHONPATH=. python benchmarks/health.py calibrate [--renders 12] [--seconds 4]
    PYTHONPATH=. python benchmarks/health.py overhead [--renders 6] [--seconds 10] [--held-out --first 0 --prompts 6]
    PYTHONPATH=. python benchmarks/health.py preview [--seconds 90] [--first 2 --prompts 1]
    PYTHONPATH=. python benchmarks/health.py agree [--seconds 180] [--first 2 --prompts 1] [--checks copies objects]

`calibrate`: seeded renders of in-grammar prompts (`videogen.training.scenes.random_scene`) with
the gate on; per check, the largest ratio any segment reached (> 1 fails) and the share of
segments that failed a check (each failure is a retry: the false-positive rate). `overhead`:
the same renders with the gate off and on, interleaved so that load on the machine hits both
alike; the ratio of the total times (target <= 1.15), the transformer evaluations the retries
added (from the drift reports: what a `retry_budget` counts) and whether the videos are byte-identical
where no segment was retried (`--held-out`: the long evaluation's held-out prompts, two-object
ones among them, instead of random in-grammar ones). `preview`: long held-out prompts (by default the two-object ones,
where most segments fail), every attempt run in full as without previews, and each attempt's
clean-frame prediction at a few noise levels (x0 = x - sigma v, at the first step at or below
each) judged beside its final frames, decoded both fully and at a glance (the codec's cheapest
decode: the built-in one's without its temporal refiner): per level and decode, how many final
failures the preview already shows, how many passing attempts it would wrongly stop
(`HealthConfig.preview`) and the transformer evaluations a failing attempt then runs; and the
same for two-look ladders (a glance that fails only on a check 1, 1.5 or 2 times past its
threshold, `HealthConfig.preview_margin`, then the full decode later, as the gate takes them);
`--rows FILE` keeps every attempt's looks. `agree`: held-out prompts rendered on the shipped
path, and each segment of the video re-judged by each `--checks` set beside the long evaluation's
judge: how many of the segments the judge finds bad each set catches, and how many good ones it
fails. Each prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from itertools import accumulate
from pathlib import Path

from videogen.config.spec import RenderSpec
from videogen.models.loader import load_model
from videogen.rendering import SegmentFinished, SegmentRetried, render
from videogen.training.scenes import random_scene


def prompts(n: int) -> list[str]:
    return [random_scene(random.Random(1000 + i)).caption() for i in range(n)]


def run(spec: RenderSpec, model, out: Path) -> tuple[float, list]:
    start = time.perf_counter()
    events = [
        e for e in render(spec, out, model=model, thumbnail=False) if isinstance(e, SegmentRetried | SegmentFinished)
    ]
    return time.perf_counter() - start, events


def calibrate(args, model, tmp: Path) -> dict:
    import videogen.rendering.gate as gate

    seen: list[dict] = []
    check = gate.check_segment

    def spy(*a, **k):
        verdict = check(*a, **k)
        seen.append(verdict.details)
        return verdict

    gate.check_segment = spy
    failed = segments = 0
    for i, prompt in enumerate(prompts(args.renders)):
        before = len(seen)
        _, events = run(RenderSpec.single(prompt, args.seconds, seed=i), model, tmp / f"c{i}.mp4")
        retried = [e for e in events if isinstance(e, SegmentRetried)]
        segments += sum(isinstance(e, SegmentFinished) for e in events)
        failed += sum(e.attempt == 1 for e in retried)
        worst = {k: round(max(float(d.get(k, 0.0)) for d in seen[before:]), 3) for k in sorted(seen[-1])}
        print(f"seed {i}: {prompt!r}: retries {[(e.index, e.attempt, e.reasons) for e in retried]}, worst ratios {worst}",
              file=sys.stderr)  # fmt: skip
    worst = {k: max(float(d.get(k, 0.0)) for d in seen) for k in sorted({k for d in seen for k in d})}
    return {"benchmark": "health.calibrate", "renders": args.renders, "seconds": args.seconds, "segments": segments,
            "segments_failed_first_attempt": failed, "false_positive_rate": failed / max(segments, 1),
            "worst_ratio": worst}  # fmt: skip


def overhead(args, model, tmp: Path) -> dict:
    import videogen.rendering.gate as gate

    spent = [0.0]  # seconds inside the checks: the gate's own cost, robust to load on the machine
    check = gate.check_segment

    def timed(*a, **k):
        start = time.perf_counter()
        try:
            return check(*a, **k)
        finally:
            spent[0] += time.perf_counter() - start

    gate.check_segment = timed
    off = on = 0.0
    identical = retried = retries = 0
    evals = [0, 0]  # transformer evaluations of the attempts not kept, of those kept (the drift reports)
    if args.held_out:  # the long evaluation's held-out prompts, prompt i with seed i
        from videogen.training.long_eval import long_prompts

        chosen = [(i, s.caption()) for i, s in enumerate(long_prompts(args.first + args.prompts))][args.first :]
    else:
        chosen = list(enumerate(prompts(args.renders)))
    for i, prompt in chosen:
        t_off, _ = run(RenderSpec.single(prompt, args.seconds, seed=i, health_checks=[]), model, tmp / "off.mp4")
        t_on, events = run(RenderSpec.single(prompt, args.seconds, seed=i), model, tmp / "on.mp4")
        off, on = off + t_off, on + t_on
        records = json.loads((tmp / "on.mp4.drift.json").read_text())["health"]["segments"]
        cost = sum(r["retry_evals"] for r in records), sum(r["evals"] - r["retry_evals"] for r in records)
        evals = [evals[0] + cost[0], evals[1] + cost[1]]
        n = sum(isinstance(e, SegmentRetried) for e in events)
        retries += n
        if n:
            retried += 1
        else:
            identical += (tmp / "off.mp4").read_bytes() == (tmp / "on.mp4").read_bytes()
        print(f"seed {i} {prompt!r}: off {t_off:.1f} s, on {t_on:.1f} s ({t_on / t_off:.2f}x), {n} retries "
              f"(+{100 * cost[0] / max(cost[1], 1):.0f}% transformer evaluations)", file=sys.stderr)  # fmt: skip
    return {"benchmark": "health.overhead", "renders": len(chosen), "seconds": args.seconds, "held_out": args.held_out,
            "gate_off_s": round(off, 2), "gate_on_s": round(on, 2), "ratio": round(on / off, 4),
            "checks_s": round(spent[0], 3), "checks_share_of_gate_off": round(spent[0] / off, 5),
            "renders_retried": retried, "retries": retries, "retry_evals": round(evals[0] / max(evals[1], 1), 4),
            "identical_without_retry": identical}  # fmt: skip


def agree(args, model, tmp: Path) -> dict:
    """Each check set's verdicts on the segments of shipped-path renders against the long
    evaluation's judge (`videogen.training.long_eval`: an object missing, or in more than one
    copy, in more than 10% of a segment's new frames), each segment judged against the render's
    first as its anchor and the segment before it as the previous one."""
    from dataclasses import replace

    import numpy as np

    from videogen.io.video import VideoReader
    from videogen.sampling.health import check_segment, segment_stats
    from videogen.training.long_eval import copies_per_frame, long_prompts
    from videogen.training.scenes import track_colour

    sets = [tuple(c.split(",")) for c in args.checks]
    tables = {",".join(c): [[0, 0], [0, 0]] for c in sets}  # judge good/bad x check pass/fail
    scenes = long_prompts(args.first + args.prompts)[args.first :]
    for i, scene in enumerate(scenes, args.first):
        out = tmp / f"agree{i}.mp4"
        run(RenderSpec.single(scene.caption(), args.seconds, seed=i), model, out)
        frames = VideoReader(out).read_all()
        segments = json.loads((tmp / f"agree{i}.mp4.drift.json").read_text())["segments"]
        colours = [o.colour for o in scene.objects]
        bad = np.zeros(len(frames), bool)
        for c in colours:
            others = [o for o in colours if o != c]
            bad |= ~track_colour(frames, c).present | (copies_per_frame(frames, c, others) > 1)
        for checks in sets:
            config = replace(model.preset.health, checks=checks)
            anchor = previous = segment_stats(frames[segments[0]["start"] : segments[0]["end"]], config)
            table = tables[",".join(checks)]
            for seg in segments[1:]:
                a, b = seg["start"], seg["end"]
                verdict = check_segment(frames[a - 1 : b], 1, previous, anchor, config)
                previous = verdict.stats
                table[int(bad[a:b].mean() > 0.1)][int(not verdict.passed)] += 1
        print(f"seed {i} {scene.caption()!r}: {len(segments)} segments judged", file=sys.stderr)
    for name, ((good_pass, good_fail), (bad_pass, bad_fail)) in tables.items():
        print(f"{name:>40}: bad segments caught {bad_fail}/{bad_fail + bad_pass}, good ones failed "
              f"{good_fail}/{good_fail + good_pass}", file=sys.stderr)  # fmt: skip
    return {"benchmark": "health.agree", "seconds": args.seconds, "first": args.first, "prompts": args.prompts,
            "tables": tables}  # fmt: skip


MARGINS = (1.0, 1.5, 2.0)  # `HealthConfig.preview_margin` for a ladder's glance
LEVELS = (0.969, 0.953, 0.916, 0.885, 0.767)  # noise levels (`HealthConfig.preview`); 24 steps: after 3, 4, 6, 8, 12


def preview(args, model, tmp: Path) -> dict:
    import videogen.rendering.gate as gate
    import videogen.sampling.loop as loop
    from videogen.training.long_eval import long_prompts

    steps = model.preset.steps
    scheduler = model.make_scheduler(model.preset.flow_shift)
    scheduler.set_timesteps(steps)
    sigmas = [float(t) / scheduler.config.num_train_timesteps for t in scheduler.timesteps]
    at = [i + 1 for i in loop.preview_steps(scheduler, LEVELS, steps)]  # as the gate takes them
    predicted: list = []  # this attempt's clean-frame prediction per step
    velocity_of = loop.guided_velocity

    def recorded(model_, pred, latents, sigma, guidance):
        velocity = velocity_of(model_, pred, latents, sigma, guidance)
        predicted.append(latents - sigma * velocity)
        return velocity

    rows: list[dict] = []
    judged: list[dict] = []  # per row: its looks' verdicts, {"full" | "glance": {step: Verdict}}
    run_gate = gate.run_gate

    def judged_gate(sample, decode, judge, config, spare=None, glance=None):
        glance = glance or decode

        def sample_and_preview(attempt, levels=()):
            predicted.clear()
            gen, evaluated = sample(attempt, ()), []
            while True:  # as `yield from`, noting which steps ran the transformer
                try:
                    event = next(gen)
                except StopIteration as done:
                    latents = done.value
                    break
                if isinstance(event, loop.StepProgress):
                    evaluated.append(event.evaluated)
                yield event
            final = judge(decode(latents))
            looks = {
                how: {k: judge(d(predicted[k - 1])) for k in at} for how, d in (("full", decode), ("glance", glance))
            }
            judged.append(looks)
            rows.append({"attempt": attempt, "passed": final.passed, "evals": list(accumulate(evaluated)),
                         "final_ratios": final.details,
                         "looks": {how: {k: {"failed": v.failed, "ratios": v.details} for k, v in by.items()}
                                   for how, by in looks.items()}})  # fmt: skip
            return latents

        return run_gate(sample_and_preview, decode, judge, config, spare, glance)

    loop.guided_velocity, gate.run_gate = recorded, judged_gate
    scenes = long_prompts(args.first + args.prompts)[args.first :]
    for i, scene in enumerate(scenes, start=args.first):
        before = len(rows)
        run(RenderSpec.single(scene.caption(), args.seconds, seed=i), model, tmp / f"p{i}.mp4")
        print(f"prompt {i} {scene.caption()!r}: {len(rows) - before} attempts", file=sys.stderr)
    if args.rows:
        args.rows.write_text(json.dumps({"steps": steps, "at": at, "rows": rows}))
    fails = [i for i, r in enumerate(rows) if not r["passed"]]
    passes = [i for i, r in enumerate(rows) if r["passed"]]

    def ladder(looks: list[tuple[int, str, float]]) -> dict:
        """Looks in order ((step, "full" or "glance", margin: `Verdict.beyond`)): failing attempts
        caught, passing ones stopped (and the checks that stopped them), and the transformer
        evaluations a failing attempt runs before it stops (all of its own where no look shows it)."""

        def stop(i: int) -> tuple[int, tuple[str, ...]] | None:
            return next(((k, v.failed) for k, how, m in looks if not (v := judged[i][how][k].beyond(m)).passed), None)

        evals = [rows[i]["evals"][s[0] - 1] if (s := stop(i)) else rows[i]["evals"][-1] for i in fails]
        why = Counter(c for i in passes if (s := stop(i)) for c in s[1])  # the checks that stop passing attempts
        return {"final_failures_caught": sum(stop(i) is not None for i in fails), "final_failures": len(fails),
                "passes_stopped": sum(stop(i) is not None for i in passes), "passes": len(passes),
                "passes_stopped_by": dict(why),
                "mean_evals_of_a_failing_attempt": round(sum(evals) / max(len(evals), 1), 2)}  # fmt: skip

    full_attempt = round(sum(r["evals"][-1] for r in rows) / max(len(rows), 1), 2)
    print(f"an attempt run to its end evaluates the transformer {full_attempt} times on average", file=sys.stderr)
    by_step, ladders = {}, {}
    for how in ("full", "glance"):
        for k in at:
            by_step[f"{k}/{steps} {how}"] = row = ladder([(k, how, 1.0)])
            print(f"{how} preview after step {k:>2} of {steps} (sigma {sigmas[k - 1]:.3f}): {row}", file=sys.stderr)
    # Two looks, as the gate takes them: a glance at step a (failing on a check `margin` times past
    # its threshold: `HealthConfig.preview_margin`), then the full decode at step b.
    for a, b, m in ((a, b, m) for a in at for b in at if a < b for m in MARGINS):
        ladders[f"{a} glance >{m:g}, {b} full"] = row = ladder([(a, "glance", m), (b, "full", 1.0)])
        print(f"glance after step {a} (margin {m:g}), then full after step {b}: {row}", file=sys.stderr)
    return {"benchmark": "health.preview", "seconds": args.seconds, "prompts": [s.caption() for s in scenes],
            "attempts": len(rows), "evals_of_a_full_attempt": full_attempt, "by_step": by_step,
            "ladders": ladders}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("calibrate", "overhead", "preview", "agree"))
    ap.add_argument("--renders", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument(
        "--first", type=int, default=2, help="preview, --held-out: the first held-out long prompt (0-based)"
    )
    ap.add_argument("--prompts", type=int, default=4,
                    help="preview, --held-out: how many (2..5: the two-object prompts and two more)")  # fmt: skip
    ap.add_argument("--held-out", action="store_true",
                    help="overhead: the long evaluation's held-out prompts (--first, --prompts), not --renders random ones")  # fmt: skip
    ap.add_argument(
        "--rows",
        type=Path,
        help="preview: write every attempt's looks (per decode and step: failed checks, ratios) here as JSON",
    )
    ap.add_argument("--checks", nargs="+", default=["copies", "objects"],
                    help="agree: check sets to compare, each comma-separated")  # fmt: skip
    args = ap.parse_args()
    args.renders = args.renders or (12 if args.mode == "calibrate" else 6)
    args.seconds = args.seconds or {"calibrate": 4.0, "overhead": 10.0, "preview": 90.0, "agree": 180.0}[args.mode]
    model = load_model("builtin")
    with tempfile.TemporaryDirectory() as tmp:
        modes = {"calibrate": calibrate, "overhead": overhead, "preview": preview, "agree": agree}
        result = modes[args.mode](args, model, Path(tmp))
    if args.mode == "overhead":
        print(f"gate on / gate off: {result['ratio']:.3f}x render time (target <= 1.15)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

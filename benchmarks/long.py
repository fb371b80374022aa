"""Long-video benchmark: do renders and streams of held-out prompts hold for minutes?

    python benchmarks/long.py --seconds 60 --prompts 3     # the baseline in docs/builtin-model.md
    python benchmarks/long.py --seconds 300                # issue 20's target length, 6 prompts
    python benchmarks/long.py --seconds 300 --first 2 --prompts 1   # prompt 2 of that run alone

Each prompt is rendered (`builtin`) and streamed (`builtin-causal`) for `--seconds`, and every
10-second window is judged by the scene detector (`videogen.training.long_eval`): object present
in >= 90% of frames, right shape, split or doubled in <= 5% of frames, background dE2000 <= 2.3
against the first window. Prints the per-window table, then one JSON line: the pass rate per path,
the worst window and why, the largest missing fraction and seconds of compute per second of video.
Models are loaded once, before any timing.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings


def main() -> int:
    from videogen.training.long_eval import DEFAULT_PROMPTS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0, help="length of each video (>= 10)")
    p.add_argument("--prompts", type=int, default=DEFAULT_PROMPTS, help="held-out prompts")
    p.add_argument("--seed", type=int, default=0, help="prompt i uses seed SEED + i")
    p.add_argument("--first", type=int, default=0, help="start at held-out prompt FIRST (0-based), with its own seed")
    p.add_argument("--model", default="builtin", help="the rendering preset ('none': skip renders)")
    p.add_argument("--stream-model", default="builtin-causal", help="the streaming preset ('none': skip streams)")
    p.add_argument("--steps", type=int)
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args()
    warnings.simplefilter("ignore")

    from videogen.errors import InvalidOption
    from videogen.models.loader import load_model
    from videogen.training.long_eval import check_long_seconds, evaluate_long, format_table

    try:
        seconds = check_long_seconds(args.seconds, option="--seconds")
        if args.prompts < 1:
            raise InvalidOption("--prompts", args.prompts, "must be at least 1")
        if args.first < 0:
            raise InvalidOption("--first", args.first, "must be at least 0")
    except InvalidOption as exc:
        print(f"long.py: error: {exc}", file=sys.stderr)
        return 2
    models = [
        None if name == "none" else load_model(name, device=args.device, dtype="auto", attention="dense")
        for name in (args.model, args.stream_model)
    ]
    log = None if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    result = evaluate_long(*models, seconds=seconds, prompts=args.prompts, seed=args.seed, steps=args.steps,
                           first=args.first, log=log)  # fmt: skip
    if not args.json:
        print(format_table(result.windows))
    print(json.dumps(result.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

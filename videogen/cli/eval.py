"""`videogen eval builtin`: score the built-in model's prompt adherence with a scene detector;
`--long SECONDS` judges every 10-second window of long renders and streams instead
(`videogen.training.long_eval`)."""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from videogen.errors import InvalidOption


def add_eval_parser(sub: argparse._SubParsersAction) -> None:
    """Register `videogen eval`."""
    e = sub.add_parser("eval", help="score the built-in model's prompt adherence with a scene detector")
    e.add_argument("what", choices=["builtin"])
    e.add_argument("--json", action="store_true", help="print only the final JSON line")
    e.add_argument("--model", default="builtin")
    e.add_argument("--device", default="auto")
    e.add_argument("--attention")
    e.add_argument("--steps", type=int)
    e.add_argument("--guidance", type=float)
    e.add_argument("--seen", type=int, default=16, help="prompts with seen colour/shape pairs")
    e.add_argument("--unseen", type=int, default=8, help="prompts with colour/shape pairs never trained on")
    e.add_argument("--continuation", type=int, default=4, help="8-segment chains to check")
    e.add_argument("--long", type=float, metavar="SECONDS",
                   help="judge every 10 s window of renders and streams this long (held-out prompts)")  # fmt: skip
    e.add_argument("--prompts", type=int, help="with --long: how many held-out prompts (default 6)")
    e.add_argument("--seed", type=int, default=0, help="with --long: prompt i uses seed SEED + i")
    e.add_argument("--first", type=int, default=0,
                   help="with --long: start at held-out prompt FIRST (0-based), with its own seed")  # fmt: skip
    e.add_argument("--stream-model", help="with --long: the streaming preset (default builtin-causal)")
    e.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    """Score the model and print the figures; the last line is always their JSON."""
    from videogen.models.loader import load_model
    from videogen.training.evaluate import evaluate_builtin, format_json

    if args.what != "builtin":
        raise InvalidOption("WHAT", args.what, "only 'builtin' can be evaluated")
    if args.long is not None:
        return _cmd_eval_long(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load_model(args.model, device=args.device, dtype="auto", attention=args.attention)
    log = None if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    result = evaluate_builtin(model, n_seen=args.seen, n_unseen=args.unseen, n_continuation=args.continuation,
                              steps=args.steps, guidance=args.guidance, log=log)  # fmt: skip
    if not args.json:
        for k, v in result.items():
            print(f"{k:>26}: {v}")
    print(format_json(result))
    return 0


def _cmd_eval_long(args: argparse.Namespace) -> int:
    """`--long SECONDS`: the per-window table (unless --json), then the JSON line."""
    from videogen.config.plan import frames_for
    from videogen.config.spec import DEFAULT_STREAM_MODEL
    from videogen.models.loader import load_model
    from videogen.training.long_eval import DEFAULT_PROMPTS, check_long_seconds, evaluate_long, format_table

    seconds = check_long_seconds(args.long, option="--long")
    prompts = DEFAULT_PROMPTS if args.prompts is None else args.prompts
    if prompts < 1:
        raise InvalidOption("--prompts", prompts, "must be at least 1")
    if args.first < 0:
        raise InvalidOption("--first", args.first, "must be at least 0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        render_model = load_model(args.model, device=args.device, dtype="auto", attention=args.attention)
        stream_model = load_model(args.stream_model or DEFAULT_STREAM_MODEL, device=args.device, dtype="auto",
                                  attention="dense")  # fmt: skip
    for model in (render_model, stream_model):
        frames_for(seconds, model.preset.fps, "--long")  # a whole number of frames at each model's rate
    log = None if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    result = evaluate_long(render_model, stream_model, seconds=seconds, prompts=prompts, seed=args.seed,
                           steps=args.steps, guidance=args.guidance, first=args.first, log=log)  # fmt: skip
    if not args.json:
        print(format_table(result.windows))
    print(json.dumps(result.summary()))
    return 0

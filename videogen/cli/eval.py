"""`videogen eval builtin`: score the built-in model's prompt adherence with a scene detector."""

from __future__ import annotations

import argparse
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
    e.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    """Score the model and print the figures; the last line is always their JSON."""
    from videogen.models.loader import load_model
    from videogen.training.evaluate import evaluate_builtin, format_json

    if args.what != "builtin":
        raise InvalidOption("WHAT", args.what, "only 'builtin' can be evaluated")
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

"""`videogen train builtin`: train the built-in model on procedural scenes, resumably;
`videogen train decoder`: train its codec's temporal decoder on the model's own output."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from videogen.errors import InvalidOption


def add_train_parser(sub: argparse._SubParsersAction) -> None:
    """Register `videogen train`."""
    t = sub.add_parser("train", help="train the built-in model on procedural scenes (resumable), or its decoder")
    t.add_argument("what", choices=["builtin", "decoder"], help="builtin: the transformer; decoder: the codec's "
                   "temporal decoder, on the shipped transformer's output (~35 min on 2 cores)")  # fmt: skip
    t.add_argument(
        "--steps",
        type=int,
        help="optimiser steps (default 11739: the shipped weights' recipe; decoder: 2850, split over its two "
        "stages as the recipe splits them)",
    )
    t.add_argument(
        "--minutes",
        type=float,
        help="instead of --steps: as many steps as fit in about this much wall "
        "time on this machine (set from the speed of the first 50; logged, to rerun with --steps)",
    )
    t.add_argument("--seed", type=int)
    t.add_argument("--lr", type=float)
    t.add_argument(
        "--optimizer",
        choices=["muon", "adamw"],
        help="muon: Muon for the hidden weight matrices, AdamW for the rest (default); adamw: AdamW for all",
    )
    t.add_argument("--batch-tokens", dest="batch_tokens", type=int)
    t.add_argument("--loss", choices=["hybrid", "v", "x0"])
    t.add_argument(
        "--motion-weight",
        dest="motion_weight",
        type=float,
        help="weight of the frame-to-frame change's error in the loss (against 4 Hz stutter)",
    )
    t.add_argument(
        "--self-context",
        dest="self_context",
        type=float,
        help="fraction of continuation clips whose clean context is the model's own prediction of it "
        "(training against its own errors, for long videos; 0-1)",
    )
    t.add_argument(
        "--context-noise",
        dest="context_noise",
        type=float,
        help="noise half the context frames up to this level (0-0.5; rendering's context_noise)",
    )
    t.add_argument(
        "--causal-chunk",
        dest="causal_chunk",
        type=int,
        help="train the block-causal (streaming) variant with chunks of this many latent frames",
    )
    t.add_argument(
        "--snapshot-every",
        dest="snapshot_every",
        type=int,
        help="also keep the EMA weights every N steps in the workdir (ema-STEP.safetensors), to eval each",
    )
    t.add_argument(
        "--no-compile",
        dest="compile",
        action="store_false",
        default=None,
        help="train without torch.compile (it needs a C compiler; it falls back by itself where it fails)",
    )
    t.add_argument(
        "--rollouts",
        help="a pool of the model's own chained renders (.npz; rendered from --init first when missing)",
    )
    t.add_argument(
        "--rollout-frac",
        dest="rollout_frac",
        type=float,
        help="share of segment-long clips that continue a rollout context towards the corrected scene",
    )
    t.add_argument(
        "--anchor-frac",
        dest="anchor_frac",
        type=float,
        help="share of continuations (and rollout clips) anchored on a frame of the video's first segment",
    )
    t.add_argument("--rollout-chains", dest="rollout_chains", type=int, help="videos in a new pool (default 24)")
    t.add_argument(
        "--rollout-anchor",
        dest="rollout_anchor",
        type=int,
        help="the anchor frame a new pool is rendered with (default: the builtin preset's; 0: none)",
    )
    t.add_argument(
        "--rollout-seconds",
        dest="rollout_seconds",
        type=float,
        help="their length (default 30; with --causal-chunk 15, streamed)",
    )
    t.add_argument(
        "--rollout-two-objects",
        dest="rollout_two_objects",
        type=float,
        help="share of a new pool's captions with two objects (default: the training mix's, ~0.3)",
    )
    t.add_argument(
        "--rollout-lookback",
        dest="rollout_lookback",
        type=int,
        help="frames a rollout clip's target looks back for an object its context hides (behind the other, "
        "or fading), to bring it out where it went in, e.g. 48 (default 0: the last context frame alone)",
    )
    t.add_argument(
        "--exact-layout",
        dest="exact_layout",
        action="store_true",
        default=None,
        help="hold the caption layout's moving frames at the scenes' own motions and train each object's "
        "gates toward its motion's frame (default: learned frames and gates)",
    )
    t.add_argument(
        "--blank-bounce",
        dest="blank_bounce",
        action="store_true",
        default=None,
        help="with --exact-layout: train a bouncing object's gates toward a blank gate (no frame, zero "
        "channels) rather than the still frame",
    )
    t.add_argument(
        "--two-objects",
        dest="two_objects",
        type=float,
        help="share of training scenes with two objects (default 0.3)",
    )
    t.add_argument(
        "--lost-object",
        dest="lost_object",
        type=float,
        help="share of clips with clean context whose context lacks one of their objects, which the frames "
        "after it still show (default 0: off)",
    )
    t.add_argument(
        "--broken-object",
        dest="broken_object",
        type=float,
        help="share of clips with clean context whose context shows one object cut to a part, or with a piece "
        "left behind; the frames after it show the object whole (default 0: off)",
    )
    t.add_argument(
        "--occluded",
        dest="occluded",
        type=float,
        help="share of two-object clips with clean context cut where one object is behind the other as the "
        "context ends; the frames after it bring it out (default 0: off)",
    )
    t.add_argument("--init", help="start from this weights file (e.g. the causal variant from the base model)")
    t.add_argument(
        "--layers",
        type=int,
        help="transformer blocks (default: --init's, or 4); more than --init holds grows it, the new blocks "
        "starting as identities",
    )
    t.add_argument(
        "--heads",
        type=int,
        help="attention heads of 32 features (default: --init's, or 4); a whole multiple of --init's widens it, "
        "the width and feed-forward with them, starting from what --init computes",
    )
    t.add_argument(
        "--clips", type=int, help="decoder: training clips made from the transformer's output (default 3200)"
    )
    t.add_argument("--transformer", help="decoder: the transformer weights whose output it learns (default: shipped)")
    t.add_argument("--workdir", default="train-builtin", help="checkpoints; an interrupted run resumes from here")
    t.add_argument(
        "--output",
        help="weights file (default: the package's builtin.safetensors, "
        "or builtin_causal.safetensors with --causal-chunk; decoder: builtin_decoder.safetensors)",
    )
    t.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    """Check the options, then train (resuming from --workdir) and write the weights."""
    from dataclasses import fields

    from videogen.models.builtin import CAUSAL_WEIGHTS_FILE, WEIGHTS_FILE
    from videogen.training.config import TrainConfig
    from videogen.training.train import train_builtin

    if args.what == "decoder":
        return _train_decoder(args)
    if args.what != "builtin":
        raise InvalidOption("WHAT", args.what, "only 'builtin' and 'decoder' can be trained")
    for name in DECODER_ONLY:
        if getattr(args, name, None) is not None:
            raise InvalidOption(f"--{name}", getattr(args, name), "is a decoder option (videogen train decoder)")
    if args.steps is not None and args.steps < 1:
        raise InvalidOption("--steps", args.steps, "must be >= 1")
    if args.minutes is not None and not args.minutes > 0:
        raise InvalidOption("--minutes", args.minutes, "must be > 0")
    if args.snapshot_every is not None and args.snapshot_every < 1:
        raise InvalidOption("--snapshot-every", args.snapshot_every, "must be >= 1")
    if args.motion_weight is not None and not args.motion_weight >= 0:
        raise InvalidOption("--motion-weight", args.motion_weight, "must be >= 0")
    if args.self_context is not None and not 0 <= args.self_context <= 1:
        raise InvalidOption("--self-context", args.self_context, "must be in [0, 1]")
    if args.context_noise is not None and not 0 <= args.context_noise <= 0.5:
        raise InvalidOption("--context-noise", args.context_noise, "must be in [0, 0.5]")
    if args.rollout_frac is not None and not 0 <= args.rollout_frac <= 1:
        raise InvalidOption("--rollout-frac", args.rollout_frac, "must be in [0, 1]")
    if args.rollout_frac and not args.rollouts:
        raise InvalidOption("--rollout-frac", args.rollout_frac, "needs --rollouts FILE")
    if args.anchor_frac is not None and not 0 <= args.anchor_frac <= 1:
        raise InvalidOption("--anchor-frac", args.anchor_frac, "must be in [0, 1]")
    if args.rollout_anchor is not None and not 0 <= args.rollout_anchor <= 8:
        raise InvalidOption("--rollout-anchor", args.rollout_anchor, "must be in 0..8 (0: none)")
    if args.rollout_chains is not None and args.rollout_chains < 1:
        raise InvalidOption("--rollout-chains", args.rollout_chains, "must be >= 1")
    if args.rollout_two_objects is not None and not 0 <= args.rollout_two_objects <= 1:
        raise InvalidOption("--rollout-two-objects", args.rollout_two_objects, "must be in [0, 1]")
    if args.rollout_lookback is not None and not 0 <= args.rollout_lookback <= 240:
        raise InvalidOption("--rollout-lookback", args.rollout_lookback, "must be in 0..240 frames")
    if args.lost_object is not None and not 0 <= args.lost_object <= 1:
        raise InvalidOption("--lost-object", args.lost_object, "must be in [0, 1]")
    if args.broken_object is not None and not 0 <= args.broken_object <= 1:
        raise InvalidOption("--broken-object", args.broken_object, "must be in [0, 1]")
    if args.occluded is not None and not 0 <= args.occluded <= 1:
        raise InvalidOption("--occluded", args.occluded, "must be in [0, 1]")
    if args.two_objects is not None and not 0 <= args.two_objects <= 1:
        raise InvalidOption("--two-objects", args.two_objects, "must be in [0, 1]")
    if args.rollout_seconds is not None and not 4 <= args.rollout_seconds <= 600:
        raise InvalidOption("--rollout-seconds", args.rollout_seconds, "must be in [4, 600]")
    if args.layers is not None and not 1 <= args.layers <= 16:
        raise InvalidOption("--layers", args.layers, "must be in 1..16")
    if args.heads is not None and not 1 <= args.heads <= 32:
        raise InvalidOption("--heads", args.heads, "must be in 1..32")
    if args.blank_bounce and not args.exact_layout:
        raise InvalidOption("--blank-bounce", True, "needs --exact-layout")
    if args.minutes is not None and args.steps is not None:
        raise InvalidOption("--minutes", args.minutes, "give --steps or --minutes, not both")
    overrides = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name, None) is not None}
    if args.causal_chunk and args.rollouts:
        _check_stream_rollouts(args, overrides)
    cfg = TrainConfig(**overrides)
    if cfg.init and not Path(cfg.init).is_file():
        raise InvalidOption("--init", cfg.init, "no such weights file")
    if cfg.init and (cfg.layers or cfg.heads):
        from videogen.models.builtin import weights_size

        have, heads = weights_size(cfg.init)
        if cfg.layers and cfg.layers < have:
            raise InvalidOption("--layers", cfg.layers, f"must be >= the {have} transformer blocks --init holds")
        if cfg.heads and cfg.heads % heads:
            raise InvalidOption(
                "--heads", cfg.heads, f"must be a whole multiple of the {heads} attention heads --init holds"
            )
    default = CAUSAL_WEIGHTS_FILE if cfg.causal_chunk else WEIGHTS_FILE
    out = train_builtin(cfg, args.workdir, output=args.output or default, log=lambda m: print(m, flush=True))
    print(f"videogen: wrote {out}", file=sys.stderr)
    return 0


def _check_stream_rollouts(args: argparse.Namespace, overrides: dict) -> None:
    """The causal variant's rollouts are its own streams (`videogen.training.rollouts`): chunks
    of 3 latent frames, streams short enough that their clock never re-bases (the default)."""
    from videogen.training.rollouts import STREAM_CHUNK, stream_pool_seconds

    if args.causal_chunk != STREAM_CHUNK:
        raise InvalidOption(
            "--causal-chunk", args.causal_chunk, f"must be {STREAM_CHUNK} with --rollouts (the stream's chunk)"
        )
    if args.rollout_anchor is not None:
        raise InvalidOption("--rollout-anchor", args.rollout_anchor, "applies to rendered pools, not --causal-chunk")
    most = stream_pool_seconds()
    if args.rollout_seconds is None:
        overrides["rollout_seconds"] = math.floor(most)
    elif args.rollout_seconds > most:
        raise InvalidOption("--rollout-seconds", args.rollout_seconds,
                            f"must be <= {most:g} with --causal-chunk (a stream pool's clock must not re-base)")  # fmt: skip


DECODER_ONLY = ("clips", "transformer")


def _train_decoder(args: argparse.Namespace) -> int:
    """`videogen train decoder`: make the pairs from the transformer's output, train, write it."""
    from dataclasses import fields, replace

    from videogen.models.builtin import WEIGHTS_DIR
    from videogen.training.config import TrainConfig
    from videogen.training.decoder import DecoderConfig, train_decoder

    given = [
        f.name
        for f in fields(TrainConfig)
        if f.name not in ("steps", "seed") and getattr(args, f.name, None) is not None
    ]
    if given:
        raise InvalidOption("--" + given[0].replace("_", "-"), getattr(args, given[0]), "is not a decoder option")
    cfg = DecoderConfig()
    if args.steps is not None:
        if args.steps < len(cfg.stages):
            raise InvalidOption("--steps", args.steps, f"must be >= {len(cfg.stages)}")
        total = sum(s[0] for s in cfg.stages)
        cfg = replace(cfg, stages=tuple((max(1, round(args.steps * n / total)), lr) for n, lr in cfg.stages))
    if args.clips is not None:
        if args.clips < 8:
            raise InvalidOption("--clips", args.clips, "must be >= 8")
        cfg = replace(cfg, clips=args.clips)
    if args.transformer is not None:
        if not Path(args.transformer).is_file():
            raise InvalidOption("--transformer", args.transformer, "no such weights file")
        cfg = replace(cfg, weights=args.transformer)
    if args.seed is not None:
        cfg = replace(cfg, seed=args.seed)
    out = train_decoder(cfg, args.output or WEIGHTS_DIR / "builtin_decoder.safetensors",
                        log=lambda m: print(m, flush=True))  # fmt: skip
    print(f"videogen: wrote {out}", file=sys.stderr)
    return 0

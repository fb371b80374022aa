"""`videogen` command line: a thin consumer of `videogen.render()`.

Bad input gets one line, `videogen: error: --option=value: reason`, and exit status 2; nothing
is left half-written.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from videogen.errors import InvalidOption, ModelLoadError, NonFiniteLatents, VideogenError
from videogen.io.video import VideoIOError

EXIT_BAD_INPUT = 2

_FLAG = {  # spec field -> the CLI's name for it
    "prompt": "PROMPT",
    "size": "--size",
    "seconds": "--seconds",
    "fps": "--fps",
    "steps": "--steps",
    "guidance": "--guidance",
    "flow_shift": "--flow-shift",
    "seed": "--seed",
    "segment_seconds": "--segment-seconds",
    "overlap_frames": "--overlap-frames",
    "attention": "--attention",
    "device": "--device",
    "dtype": "--dtype",
    "model": "--model",
    "checkpoint": "--checkpoint",
    "image": "--image",
    "drift_correction.mode": "--drift-mode",
    "drift_correction.strength": "--drift-strength",
}


class UsageError(VideogenError):
    """Bad command-line usage detected by the CLI itself."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's default prints the whole usage)
        raise UsageError(message)


def _option_name(field: str) -> str:
    if field.startswith("shots["):
        return "--shot " + field
    if field in _FLAG or field.startswith("-") or field.isupper():
        return _FLAG.get(field, field)
    return "--" + field.replace("_", "-")  # a spec field of the same name as its option


def _parse_shot(text: str) -> tuple[str, float]:
    prompt, sep, seconds = text.rpartition(":")
    if not sep or not prompt.strip():
        raise InvalidOption("--shot", text, 'expected "PROMPT:SECONDS"')
    try:
        return prompt.strip(), float(seconds)
    except ValueError:
        raise InvalidOption("--shot", text, f"seconds {seconds!r} is not a number") from None


def _load_timeline(path: str) -> list[tuple[str, float]]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise InvalidOption("--timeline", path, "file does not exist")
    try:
        data = yaml.safe_load(p.read_text())  # YAML is a superset of JSON
    except yaml.YAMLError as exc:
        raise InvalidOption("--timeline", path, f"not valid YAML/JSON ({str(exc).splitlines()[0]})") from None
    shots = data.get("shots") if isinstance(data, dict) else data
    if not isinstance(shots, list) or not shots:
        raise InvalidOption("--timeline", path, "expected a list of {prompt, seconds} (or {shots: [...]})")
    out = []
    for i, item in enumerate(shots):
        if not isinstance(item, dict) or "prompt" not in item or "seconds" not in item:
            raise InvalidOption("--timeline", path, f"entry {i} needs 'prompt' and 'seconds'")
        out.append((str(item["prompt"]), item["seconds"]))
    return out


def _add_render_parser(sub) -> None:
    p = sub.add_parser("render", help="render a video", description="Render a video from a prompt or a timeline of shots.")
    p.add_argument("prompt", nargs="?", help="what to show (or use --shot / --timeline)")
    p.add_argument("-o", "--output", required=True, help="output .mp4 path (NAME.thumb.png and the drift report are written beside it)")
    p.add_argument("--seconds", type=float, help="duration (default 5)")
    p.add_argument("--shot", action="append", default=[], metavar="PROMPT:SECONDS", help="a shot of a multi-shot timeline; repeat")
    p.add_argument("--timeline", help="YAML/JSON file: a list of {prompt, seconds}")
    p.add_argument("--model", default="", help="preset name or local diffusers folder (default: builtin)")
    p.add_argument("--checkpoint", metavar="FILE",
                   help="transformer weights replacing the model's (.safetensors/.pt, original Wan or diffusers names)")  # fmt: skip
    p.add_argument("--size", help="WIDTHxHEIGHT")
    p.add_argument("--fps", type=float)
    p.add_argument("--steps", type=int)
    p.add_argument("--guidance", type=float)
    p.add_argument("--flow-shift", type=float)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--negative-prompt", default="")
    p.add_argument("--segment-seconds", type=float)
    p.add_argument("--overlap-frames", type=int)
    p.add_argument("--attention", help="dense | sparse | sparse-triton | sparse-cpu | reference (default: the preset's)")
    p.add_argument("--image", help="start the video from this image (image-to-video; its first frame)")
    p.add_argument("--drift-mode", help="colour drift correction mode (default: the stitcher's)")
    p.add_argument("--drift-strength", type=float, help="drift correction strength, 0..1")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16")
    p.add_argument("--workdir", help="checkpoint folder: an interrupted render resumes from its last segment")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_render)


def _spec_from_args(args):
    from videogen.config.presets import parse_size
    from videogen.config.spec import RenderSpec, Shot

    shots: list[tuple[str, float]] = []
    if args.timeline:
        shots += _load_timeline(args.timeline)
    shots += [_parse_shot(s) for s in args.shot]
    if shots and (args.prompt or args.seconds is not None):
        raise InvalidOption("PROMPT", args.prompt or args.seconds, "give either PROMPT [--seconds] or --shot/--timeline, not both")
    if not shots:
        if args.prompt is None:
            raise InvalidOption("PROMPT", "", "a prompt is required (or --shot / --timeline)")
        shots = [(args.prompt, 5.0 if args.seconds is None else args.seconds)]
    drift = {}
    if args.drift_mode is not None:
        drift["mode"] = args.drift_mode
    if args.drift_strength is not None:
        drift["strength"] = args.drift_strength
    return RenderSpec(
        shots=[Shot(p, float(s)) for p, s in shots],
        model=args.model,
        size=parse_size(args.size, "size") if args.size else None,
        fps=args.fps,
        steps=args.steps,
        guidance=args.guidance,
        flow_shift=args.flow_shift,
        seed=args.seed,
        negative_prompt=args.negative_prompt,
        segment_seconds=args.segment_seconds,
        overlap_frames=args.overlap_frames,
        attention=args.attention,
        device=args.device,
        dtype=args.dtype,
        drift_correction=drift,
        image=args.image,
    ).validate()


def cmd_render(args) -> int:
    from tqdm import tqdm

    from videogen.io.video import check_output_path
    from videogen.models.loader import load_model
    from videogen.sampling.loop import StepProgress
    from videogen.rendering.render import RenderFinished, RenderStarted, SegmentFinished, SegmentStarted, prepare, render

    spec = _spec_from_args(args)
    check_output_path(args.output)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(spec.model, device=spec.device, dtype=spec.dtype, attention=spec.attention,
                           checkpoint=args.checkpoint)  # fmt: skip
    prepare(spec, model)  # all bad input is reported before any work starts
    for w in caught:
        if "videogen" in str(w.filename) and not args.quiet:
            print(f"videogen: warning: {w.message}", file=sys.stderr)

    seg_bar = step_bar = None
    steps_per_segment = 0
    for event in render(spec, args.output, model=model, workdir=args.workdir):
        if args.quiet:
            pass
        elif isinstance(event, RenderStarted):
            s = event.settings
            steps_per_segment = s.steps
            weights = f" with checkpoint {model.extras['checkpoint']}" if "checkpoint" in model.extras else ""
            print(
                f"videogen: {event.plan.total_frames} frames at {s.width}x{s.height} {s.fps:g} fps, "
                f"{len(event.plan)} segment(s) x {s.steps} steps, model {model.preset.name}{weights}, attention {model.attention}",
                file=sys.stderr,
            )
            seg_bar = tqdm(total=len(event.plan), desc="segments", unit="seg", position=0, file=sys.stderr)
        elif isinstance(event, SegmentStarted):
            step_bar = tqdm(total=steps_per_segment, desc=f"segment {event.index + 1}",
                            unit="step", position=1, leave=False, file=sys.stderr)  # fmt: skip
        elif isinstance(event, StepProgress) and step_bar is not None:
            step_bar.update(1)
        elif isinstance(event, SegmentFinished):
            if step_bar is not None:
                step_bar.close()
                step_bar = None
            seg_bar.update(1)
        elif isinstance(event, RenderFinished):
            seg_bar.close()
            print(f"videogen: wrote {event.video} ({event.frames} frames)", file=sys.stderr)
    return 0


def cmd_models(args) -> int:
    from videogen.config.presets import default_preset_name, load_presets

    presets = load_presets()
    default = default_preset_name()
    if args.json:
        print(json.dumps([{"name": p.name, "kind": p.kind, "available": p.available, "path": str(p.path) if p.path else None,
                           "size": f"{p.size[0]}x{p.size[1]}", "fps": p.fps, "default": p.name == default}
                          for p in presets.values()]))  # fmt: skip
        return 0
    print(f"{'preset':<22} {'present':<8} {'size':<10} {'fps':>4}  where")
    for p in presets.values():
        where = "built in" if p.kind == "builtin" else str(p.path)
        mark = "*" if p.name == default else " "
        size = f"{p.size[0]}x{p.size[1]}"
        print(f"{mark}{p.name:<21} {'yes' if p.available else 'no':<8} {size:<10} {p.fps:>4g}  {where}")
    return 0


def cmd_train(args) -> int:
    from dataclasses import fields

    from videogen.models.builtin import CAUSAL_WEIGHTS_FILE, WEIGHTS_FILE
    from videogen.training.train import TrainConfig, train_builtin

    if args.what != "builtin":
        raise InvalidOption("WHAT", args.what, "only 'builtin' can be trained")
    if args.steps is not None and args.steps < 1:
        raise InvalidOption("--steps", args.steps, "must be >= 1")
    if args.minutes is not None and not args.minutes > 0:
        raise InvalidOption("--minutes", args.minutes, "must be > 0")
    if args.snapshot_every is not None and args.snapshot_every < 1:
        raise InvalidOption("--snapshot-every", args.snapshot_every, "must be >= 1")
    if args.motion_weight is not None and not args.motion_weight >= 0:
        raise InvalidOption("--motion-weight", args.motion_weight, "must be >= 0")
    if args.minutes is not None and args.steps is not None:
        raise InvalidOption("--minutes", args.minutes, "give --steps or --minutes, not both")
    overrides = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name, None) is not None}
    cfg = TrainConfig(**overrides)
    if cfg.init and not Path(cfg.init).is_file():
        raise InvalidOption("--init", cfg.init, "no such weights file")
    default = CAUSAL_WEIGHTS_FILE if cfg.causal_chunk else WEIGHTS_FILE
    out = train_builtin(cfg, args.workdir, output=args.output or default, log=lambda m: print(m, flush=True))
    print(f"videogen: wrote {out}", file=sys.stderr)
    return 0


def cmd_eval(args) -> int:
    from videogen.training.evaluate import evaluate_builtin, format_json
    from videogen.models.loader import load_model

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


def _add_train_parser(sub) -> None:
    t = sub.add_parser("train", help="train the built-in model on procedural scenes (resumable)")
    t.add_argument("what", choices=["builtin"])
    t.add_argument("--steps", type=int, help="optimiser steps (default 11739: the shipped weights' recipe)")
    t.add_argument("--minutes", type=float, help="instead of --steps: as many steps as fit in about this much wall "
                   "time on this machine (set from the speed of the first 50; logged, to rerun with --steps)")
    t.add_argument("--seed", type=int)
    t.add_argument("--lr", type=float)
    t.add_argument("--optimizer", choices=["muon", "adamw"],
                   help="muon: Muon for the hidden weight matrices, AdamW for the rest (default); adamw: AdamW for all")
    t.add_argument("--batch-tokens", dest="batch_tokens", type=int)
    t.add_argument("--loss", choices=["hybrid", "v", "x0"])
    t.add_argument("--motion-weight", dest="motion_weight", type=float,
                   help="weight of the frame-to-frame change's error in the loss (against 4 Hz stutter)")
    t.add_argument("--causal-chunk", dest="causal_chunk", type=int,
                   help="train the block-causal (streaming) variant with chunks of this many latent frames")
    t.add_argument("--snapshot-every", dest="snapshot_every", type=int,
                   help="also keep the EMA weights every N steps in the workdir (ema-STEP.safetensors), to eval each")
    t.add_argument("--no-compile", dest="compile", action="store_false", default=None,
                   help="train without torch.compile (it needs a C compiler; it falls back by itself where it fails)")
    t.add_argument("--init", help="start from this weights file (e.g. the causal variant from the base model)")
    t.add_argument("--workdir", default="train-builtin", help="checkpoints; an interrupted run resumes from here")
    t.add_argument("--output", help="weights file (default: the package's builtin.safetensors, "
                   "or builtin_causal.safetensors with --causal-chunk)")
    t.set_defaults(func=cmd_train)
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="videogen", description="Long-form video generation with open diffusion transformers.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_render_parser(sub)
    m = sub.add_parser("models", help="list model presets and whether each one's weights are present")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_models)
    _add_train_parser(sub)
    try:
        from videogen.cli.drift import add_drift_parser
    except ImportError:  # the stitcher's CLI is optional until it lands
        add_drift_parser = None
    if add_drift_parser is not None:
        add_drift_parser(sub)
    from videogen.cli.stream import add_stream_parser

    add_stream_parser(sub)
    # `serve` and `worker` live with the service (workers/, api/): the library does not import
    # them; they register through the `videogen.commands` entry-point group (pyproject.toml).
    from importlib.metadata import entry_points

    for ep in entry_points(group="videogen.commands"):
        try:
            add = ep.load()
        except (ImportError, AttributeError):
            continue
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except InvalidOption as exc:
        print(f"videogen: error: {_option_name(exc.option)}={exc.value}: {exc.reason}", file=sys.stderr)
    except (UsageError, ModelLoadError, VideoIOError, ValueError) as exc:
        print(f"videogen: error: {exc}", file=sys.stderr)
    except NonFiniteLatents as exc:
        print(f"videogen: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("videogen: interrupted", file=sys.stderr)
        return 130
    return EXIT_BAD_INPUT


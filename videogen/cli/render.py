"""`videogen render`: a prompt or a timeline of shots to an MP4, a thin consumer of `videogen.render()`."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from videogen.cli.options import print_library_warnings
from videogen.config.presets import CONTINUATION_MODES, HEALTH_CHECKS, IMAGE_FITS, parse_size
from videogen.config.spec import DEFAULT_SECONDS, Lora, RenderSpec, Shot
from videogen.errors import InvalidOption

if TYPE_CHECKING:
    from tqdm import tqdm

    from videogen.models.loader import VideoModel


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


def add_render_parser(sub: argparse._SubParsersAction) -> None:
    """Register `videogen render`."""
    p = sub.add_parser(
        "render", help="render a video", description="Render a video from a prompt or a timeline of shots."
    )
    p.add_argument("prompt", nargs="?", help="what to show (or use --shot / --timeline)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="output .mp4 path (NAME.thumb.png and the drift report are written beside it)",
    )
    p.add_argument("--seconds", type=float, help="duration (default 5)")
    p.add_argument(
        "--shot", action="append", default=[], metavar="PROMPT:SECONDS", help="a shot of a multi-shot timeline; repeat"
    )
    p.add_argument("--timeline", help="YAML/JSON file: a list of {prompt, seconds}")
    # Unset options stay None: the spec and the model's preset decide (`videogen.config.resolve`).
    p.add_argument("--model", help="preset name or local diffusers folder (default: builtin)")
    p.add_argument("--checkpoint", metavar="FILE",
                   help="transformer weights replacing the model's (.safetensors/.pt, original Wan or diffusers names)")  # fmt: skip
    add_lora_argument(p)
    p.add_argument("--size", help="WIDTHxHEIGHT")
    p.add_argument("--fps", type=float)
    p.add_argument("--steps", type=int)
    p.add_argument("--guidance", type=float)
    p.add_argument("--guidance-2", type=float, dest="guidance_2",
                   help="two-expert models (Wan 2.2 A14B): the low-noise expert's guidance (default: --guidance)")  # fmt: skip
    p.add_argument(
        "--flow-shift", type=float, help="the scheduler's shift (default: the preset's, else the model folder's)"
    )
    p.add_argument("--seed", type=int, help="noise seed (default 0)")
    p.add_argument("--negative-prompt")
    p.add_argument("--segment-seconds", type=float)
    p.add_argument("--overlap-frames", type=int)
    p.add_argument(
        "--attention", help="dense | sparse | sparse-triton | sparse-cpu | reference (default: the preset's)"
    )
    p.add_argument("--image", help="start the video from this image (image-to-video; its first frame)")
    p.add_argument("--image-fit", choices=IMAGE_FITS,
                   help="an --image of another aspect ratio: cover (default: scale to cover, keep the centre), "
                        "stretch (distorts), contain (black bars)")  # fmt: skip
    p.add_argument("--continuation", choices=CONTINUATION_MODES,
                   help="how a continuing segment (and --image) conditions on its prefix: clean (held clean at "
                        "timestep 0, for models trained on it) or renoise (training-free, re-noised every step); "
                        "default: the preset's")  # fmt: skip
    p.add_argument("--drift-mode", help="colour drift correction mode (default: the stitcher's)")
    p.add_argument("--drift-strength", type=float, help="drift correction strength, 0..1")
    add_health_arguments(p, "segment")
    p.add_argument("--cache", metavar="MODE",
                   help="step caching: off | first-block | mag | taylor (default: the preset's: taylor for builtin)")  # fmt: skip
    p.add_argument("--cache-threshold", type=float, metavar="X",
                   help="the cache's threshold, 0..1 (0: never skip; default: the preset's measured one)")  # fmt: skip
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--dtype", help="auto | float32 | bfloat16 | float16 (default auto)")
    p.add_argument("--workdir", help="checkpoint folder: an interrupted render resumes from its last segment")
    add_threads_argument(p)
    p.add_argument("--offload", metavar="MODE",
                   help="none | model | group: keep components on the CPU and move each (model) or each "
                        "transformer block (group) to the GPU while used (CUDA only; default: the preset's, none)")  # fmt: skip
    p.add_argument("--vae-tiling", metavar="MODE",
                   help="auto | on | off: decode in spatial tiles (less memory); auto: from 720p (default: the preset's)")  # fmt: skip
    p.add_argument("--yes", action="store_true", help="start a render estimated to take more than an hour")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_render)


def add_health_arguments(p: argparse.ArgumentParser, unit: str) -> None:
    """The health gate's options (`videogen render`, `videogen stream`); unset: the preset's."""
    p.add_argument("--retries", type=int, metavar="N",
                   help=f"re-sample a {unit} that fails the health gate up to N times (0..10; default: the preset's, 2)")  # fmt: skip
    p.add_argument("--checks", metavar="A,B,...",
                   help=f"the health gate's checks ({', '.join(HEALTH_CHECKS)}; default: all)")  # fmt: skip
    p.add_argument("--gate", choices=("on", "off"), help="off: no health gate (no checks, no retries)")


def add_threads_argument(p: argparse.ArgumentParser) -> None:
    """`--threads` (`videogen render`, `videogen stream`): torch's CPU threads (`videogen.config.threads`)."""
    p.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads for torch (default: one per physical core; waiting threads sleep)")  # fmt: skip


def add_lora_argument(p: argparse.ArgumentParser) -> None:
    """`--lora PATH[:SCALE]`, repeatable (`videogen render`, `videogen stream`)."""
    p.add_argument("--lora", action="append", default=[], metavar="PATH[:SCALE]",
                   help="a LoRA adapter (.safetensors, original Wan or diffusers names) at SCALE (default 1); repeat")  # fmt: skip


def lora_options(values: list[str]) -> list[Lora]:
    """`--lora PATH[:SCALE]` values as the spec's `loras` (a path may itself contain ':')."""
    loras = []
    for text in values:
        path, sep, scale = text.rpartition(":")
        if not sep or text.endswith(".safetensors"):  # no scale given
            path, scale = text, "1"
        try:
            loras.append(Lora(path, float(scale)))
        except ValueError:
            raise InvalidOption("loras", text, f"scale {scale!r} is not a number (expected PATH[:SCALE])") from None
    return loras


def health_options(args: argparse.Namespace) -> dict:
    """`retries` and `health_checks` for a spec from `--retries`, `--checks` and `--gate`."""
    if args.gate == "off" and args.checks is not None:
        raise InvalidOption("--checks", args.checks, "cannot be combined with --gate off")
    checks = None if args.checks is None else [c.strip() for c in args.checks.split(",") if c.strip()]
    if args.gate == "off":
        checks = []
    options = {"retries": args.retries, "health_checks": checks}
    return {name: value for name, value in options.items() if value is not None}


def spec_from_args(args: argparse.Namespace) -> RenderSpec:
    """The `RenderSpec` the options describe, validated (bad input raises `InvalidOption`)."""
    shots: list[tuple[str, float]] = []
    if args.timeline:
        shots += _load_timeline(args.timeline)
    shots += [_parse_shot(s) for s in args.shot]
    if shots and (args.prompt or args.seconds is not None):
        raise InvalidOption(
            "PROMPT", args.prompt or args.seconds, "give either PROMPT [--seconds] or --shot/--timeline, not both"
        )
    if not shots:
        if args.prompt is None:
            raise InvalidOption("PROMPT", "", "a prompt is required (or --shot / --timeline)")
        shots = [(args.prompt, DEFAULT_SECONDS if args.seconds is None else args.seconds)]
    drift = {}
    if args.drift_mode is not None:
        drift["mode"] = args.drift_mode
    if args.drift_strength is not None:
        drift["strength"] = args.drift_strength
    given = dict(
        model=args.model,
        size=parse_size(args.size, "size") if args.size else None,
        fps=args.fps,
        steps=args.steps,
        guidance=args.guidance,
        guidance_2=args.guidance_2,
        flow_shift=args.flow_shift,
        seed=args.seed,
        negative_prompt=args.negative_prompt,
        segment_seconds=args.segment_seconds,
        overlap_frames=args.overlap_frames,
        attention=args.attention,
        device=args.device,
        dtype=args.dtype,
        image=args.image,
        image_fit=args.image_fit,
        continuation=args.continuation,
        cache=args.cache,
        cache_threshold=args.cache_threshold,
    )
    options = {name: value for name, value in given.items() if value is not None}  # unset: the spec's default
    options.update(health_options(args))
    if args.lora:
        options["loras"] = lora_options(args.lora)
    return RenderSpec(shots=[Shot(p, float(s)) for p, s in shots], drift_correction=drift, **options).validate()


class _ProgressDisplay:
    """The render's progress on stderr: a header line, a segment bar and a step bar per segment."""

    def __init__(self, model: VideoModel) -> None:
        self.model = model
        self.segment_bar: tqdm | None = None
        self.step_bar: tqdm | None = None
        self.step_index = -1  # the segment whose steps the step bar counts
        self.steps_per_segment = 0

    def show(self, event: object) -> None:
        from tqdm import tqdm

        from videogen.rendering.events import (
            RenderFinished,
            RenderStarted,
            SegmentFinished,
            SegmentRetried,
            SegmentStarted,
        )
        from videogen.sampling.loop import StepProgress

        if isinstance(event, RenderStarted):
            s = event.settings
            self.steps_per_segment = s.steps
            extras = self.model.extras
            weights = f" with checkpoint {extras['checkpoint']}" if "checkpoint" in extras else ""
            print(
                f"videogen: {event.plan.total_frames} frames at {s.width}x{s.height} {s.fps:g} fps, "
                f"{len(event.plan)} segment(s) x {s.steps} steps, model {self.model.preset.name}{weights}, "
                f"attention {self.model.attention}",
                file=sys.stderr,
            )
            self.segment_bar = tqdm(total=len(event.plan), desc="segments", unit="seg", position=0, file=sys.stderr)
        elif isinstance(event, SegmentStarted):
            if self.step_bar is not None:  # a segment held back (`backtrack`) is reported finished later
                self.step_bar.close()
            self.step_index = event.index
            self.step_bar = tqdm(total=self.steps_per_segment, desc=f"segment {event.index + 1}",
                                 unit="step", position=1, leave=False, file=sys.stderr)  # fmt: skip
        elif isinstance(event, StepProgress) and self.step_bar is not None:
            self.step_bar.update(1)
        elif isinstance(event, SegmentRetried):
            self._write(f"videogen: segment {event.index + 1} failed {', '.join(event.reasons)}; "
                        f"re-sampling (attempt {event.attempt + 1})")  # fmt: skip
            if self.step_bar is not None:
                self.step_bar.reset()
        elif isinstance(event, SegmentFinished):
            if event.failed_checks:
                self._write(f"videogen: segment {event.index + 1} kept its best of {event.attempts} attempts, "
                            f"still failing {', '.join(event.failed_checks)}")  # fmt: skip
            if self.step_bar is not None and event.index == self.step_index:
                self.step_bar.close()
                self.step_bar = None
            if self.segment_bar is not None:
                self.segment_bar.update(1)
        elif isinstance(event, RenderFinished):
            if self.segment_bar is not None:
                self.segment_bar.close()
            print(f"videogen: wrote {event.video} ({event.frames} frames)", file=sys.stderr)

    def _write(self, line: str) -> None:
        from tqdm import tqdm

        tqdm.write(line, file=sys.stderr)


def cmd_render(args: argparse.Namespace) -> int:
    """Load the model, report all bad input, then render with progress on stderr."""
    from videogen.config.resolve import resolve_render
    from videogen.config.threads import check_threads, use_threads
    from videogen.io.video import check_output_path

    check_threads(args.threads)
    spec = spec_from_args(args)
    check_output_path(args.output)
    resolved = resolve_render(spec)  # all bad input is reported before the model loads
    use_threads(args.threads)  # before torch is imported (its OpenMP wait policy)
    from videogen.cli.estimates import confirm_render_cost, print_memory_estimate
    from videogen.models.loader import load_model
    from videogen.rendering.render import render

    confirm_render_cost(resolved, spec.model, spec.device, args.yes, args.quiet)  # an hours-long render asks first
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(spec.model, device=spec.device, dtype=spec.dtype, attention=spec.attention,
                           checkpoint=args.checkpoint, offload=args.offload, vae_tiling=args.vae_tiling)  # fmt: skip
    print_library_warnings(caught, args.quiet)
    if not args.quiet:
        print_memory_estimate(model, resolved)
    progress = None if args.quiet else _ProgressDisplay(model)
    for event in render(spec, args.output, model=model, workdir=args.workdir):
        if progress is not None:
            progress.show(event)
    return 0

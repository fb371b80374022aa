"""`videogen stream`: chunked causal generation to a file or to stdout, frames out as they are made.

    videogen stream "a red circle moving right on a black background" --seconds 30 -o out.mp4
    videogen stream "..." --forever -o - | ffplay -f mjpeg -            # watch it live
    videogen stream "..." --forever -o - --format raw | ffplay -f rawvideo -pixel_format rgb24 -video_size 64x64 -framerate 16 -

`--switch SECONDS:PROMPT` (repeatable) changes the prompt at that point of the stream;
`--interactive` reads a new prompt from every line of stdin. Ctrl-C ends a stream cleanly: the
file holds everything generated so far.
"""

from __future__ import annotations

import argparse
import io
import sys
import threading
import warnings
from pathlib import Path

from videogen.cli.options import print_library_warnings
from videogen.cli.render import (
    add_health_arguments,
    add_lora_argument,
    add_threads_argument,
    health_options,
    lora_options,
)
from videogen.config.spec import StreamSpec
from videogen.errors import InvalidOption

FORMATS = ("mp4", "mjpeg", "raw")


def add_stream_parser(sub: argparse._SubParsersAction) -> None:
    """Register `videogen stream`."""
    p = sub.add_parser("stream", help="generate chunk by chunk and write frames as they are made (experimental)",
                       description="Autoregressive streaming generation with a block-causal model and a KV cache.")  # fmt: skip
    p.add_argument("prompt")
    p.add_argument("-o", "--output", required=True, help="output file (.mp4 or .mjpeg), or - for stdout")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--seconds", type=float, help="duration (default 10)")
    g.add_argument("--forever", action="store_true", help="until interrupted (Ctrl-C) or the reader goes away")
    p.add_argument("--format", choices=FORMATS, help="mp4 (files), mjpeg (default for stdout), raw rgb24")
    p.add_argument(
        "--switch", action="append", default=[], metavar="SECONDS:PROMPT", help="change the prompt at SECONDS; repeat"
    )
    p.add_argument("--interactive", action="store_true", help="read new prompts from stdin, one per line")
    # Unset options stay None: the spec and the model's preset decide (`videogen.config.resolve`).
    p.add_argument("--model", help="a causal preset (default: builtin-causal)")
    p.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="causal generator weights (original Wan or diffusers naming, "
        "e.g. Self-Forcing / CausVid / LongLive) over --model's Wan folder",
    )
    add_lora_argument(p)
    p.add_argument("--size", help="WIDTHxHEIGHT")
    p.add_argument("--fps", type=float)
    p.add_argument("--steps", type=int, help="denoising steps per chunk")
    p.add_argument("--guidance", type=float)
    p.add_argument("--seed", type=int, help="noise seed (default 0)")
    p.add_argument("--chunk-frames", type=int, help="latent frames per chunk (default 3)")
    p.add_argument("--sink-frames", type=int, help="first latent frames kept in the KV cache (default 1)")
    p.add_argument("--window-frames", type=int, help="recent latent frames kept in the KV cache (default 6)")
    add_health_arguments(p, "chunk")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--dtype", help="auto | float32 | bfloat16 | float16 (default auto)")
    add_threads_argument(p)
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_stream)


def _parse_switch(text: str) -> tuple[float, str]:
    at, sep, prompt = text.partition(":")
    try:
        seconds = float(at)
    except ValueError:
        raise InvalidOption("--switch", text, 'expected "SECONDS:PROMPT"') from None
    if not sep or not prompt.strip() or seconds < 0:
        raise InvalidOption("--switch", text, 'expected "SECONDS:PROMPT" with SECONDS >= 0')
    return seconds, prompt.strip()


def spec_from_args(args: argparse.Namespace) -> StreamSpec:
    """The `StreamSpec` the options describe, validated; unset options keep the spec's defaults."""
    from videogen.config.presets import parse_size

    given = dict(
        seconds=None if args.forever else args.seconds,
        model=args.model,
        size=parse_size(args.size, "size") if args.size else None,
        fps=args.fps,
        steps=args.steps,
        guidance=args.guidance,
        seed=args.seed,
        chunk_frames=args.chunk_frames,
        sink_frames=args.sink_frames,
        window_frames=args.window_frames,
        checkpoint=args.checkpoint,
        device=args.device,
        dtype=args.dtype,
    )
    options = {name: value for name, value in given.items() if value is not None}
    options.update(health_options(args))
    if args.lora:
        options["loras"] = lora_options(args.lora)
    if args.forever:
        options["seconds"] = None  # until interrupted
    spec = StreamSpec(prompt=args.prompt, switches=[_parse_switch(s) for s in args.switch], **options)
    spec.validate()
    return spec


class _Sink:
    """Where frames go: an MP4 (VideoWriter), or MJPEG / raw RGB to a file or stdout."""

    def __init__(self, output: str, fmt: str, width: int, height: int, fps: float) -> None:
        from videogen.io.video import VideoWriter, check_output_path

        self.fmt = fmt
        self.writer = None
        self.stream = None
        if fmt == "mp4":
            self.writer = VideoWriter(check_output_path(output), width, height, fps)
        elif output == "-":
            self.stream = sys.stdout.buffer
        else:
            self.stream = open(check_output_path(output), "wb")

    def write(self, frames) -> None:
        if self.writer is not None:
            self.writer.write(frames)
            return
        if self.fmt == "raw":
            self.stream.write(frames.tobytes())
        else:
            from PIL import Image

            for frame in frames:
                buf = io.BytesIO()
                Image.fromarray(frame).save(buf, "JPEG", quality=90)
                self.stream.write(buf.getvalue())
        self.stream.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        elif self.stream is not None and self.stream is not sys.stdout.buffer:
            self.stream.close()

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
        elif self.stream is not None and self.stream is not sys.stdout.buffer:
            self.stream.close()


def cmd_stream(args: argparse.Namespace) -> int:
    """Stream chunks to the sink until the duration, Ctrl-C or a closed pipe ends it."""
    from tqdm import tqdm

    from videogen.config.resolve import resolve_stream
    from videogen.config.threads import check_threads, use_threads

    check_threads(args.threads)
    fmt = args.format or ("mjpeg" if args.output == "-" else "mjpeg" if args.output.endswith(".mjpeg") else "mp4")
    if fmt == "mp4" and args.output == "-":
        raise InvalidOption("--format", fmt, "stdout takes mjpeg or raw (an MP4 is not streamable through a pipe)")
    if fmt == "mp4" and Path(args.output).suffix.lower() != ".mp4":
        raise InvalidOption("--output", args.output, "an MP4 output must end in .mp4 (or pass --format mjpeg|raw)")
    spec = spec_from_args(args)
    resolved = resolve_stream(spec)  # all bad input is reported before the model loads
    use_threads(args.threads)  # before torch is imported (its OpenMP wait policy)
    from videogen.models.loader import load_model
    from videogen.streaming.stream import StreamChunk, StreamControl, stream

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(
            spec.model, device=spec.device, dtype=spec.dtype, attention="dense", checkpoint=spec.checkpoint
        )
    print_library_warnings(caught, args.quiet)
    width, height, fps = resolved.width, resolved.height, resolved.fps
    control = StreamControl()
    if args.interactive:

        def read_prompts() -> None:
            for line in sys.stdin:
                if line.strip():
                    control.switch_prompt(line.strip())

        threading.Thread(target=read_prompts, daemon=True, name="videogen-stdin").start()

    gen = stream(spec, model, control=control)
    first = next(gen)  # bad input (size, chunking) is reported before anything is written
    sink = _Sink(args.output, fmt, width, height, fps)
    total = resolved.frames
    bar = None if args.quiet else tqdm(total=total, desc="frames", unit="frame", file=sys.stderr)
    frames = 0
    try:
        chunk: StreamChunk | None = first
        while chunk is not None:
            sink.write(chunk.frames)
            frames += len(chunk.frames)
            if bar is not None:
                if chunk.attempts > 1:
                    failed = ", ".join(chunk.failed_checks) or "nothing"
                    bar.write(f"videogen: chunk {chunk.index} re-generated {chunk.attempts - 1} time(s) "
                              f"({'; '.join(', '.join(r) for r in chunk.reasons if r)}); kept attempt fails {failed}",
                              file=sys.stderr)  # fmt: skip
                bar.update(len(chunk.frames))
                bar.set_postfix_str(chunk.prompt[:40])
            chunk = next(gen, None)
    except KeyboardInterrupt:
        print("videogen: interrupted: keeping what was generated", file=sys.stderr)
    except BrokenPipeError:  # the player went away: a normal end for a pipe
        gen.close()
        return 0
    except BaseException:
        sink.abort()
        raise
    finally:
        gen.close()
        if bar is not None:
            bar.close()
    sink.close()
    if not args.quiet and args.output != "-":
        print(f"videogen: wrote {args.output} ({frames} frames, {frames / fps:.1f} s)", file=sys.stderr)
    return 0

"""`RenderSpec`: everything a render needs, validated once, shared by the CLI, server and workers;
`StreamSpec`: the same for a live stream (`videogen.streaming.stream`).

A spec is a request: plain data (JSON-serialisable through `to_dict`/`from_dict`) so the job
store and the queue can carry it; None means "the model's preset decides". What can be checked
without the model is checked here (`validate`); `videogen.config.resolve` fills the preset's
defaults and checks the rest (size multiple, frame rules, the segment plan) for every entry point.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from videogen.config.presets import (
    ATTENTION_BACKENDS,
    CONTINUATION_MODES,
    HEALTH_CHECKS,
    IMAGE_FITS,
    MAX_GUIDANCE,
    MAX_RETRIES,
)
from videogen.config.step_cache import check_cache_options
from videogen.errors import InvalidOption

DEFAULT_SECONDS = 5.0  # a render's length when a prompt is given without one (CLI, Python)
API_DEFAULT_SECONDS = 4.0  # /v1/videos without `seconds`: OpenAI's default duration
DEFAULT_STREAM_SECONDS = 10.0  # a stream's, likewise
DEFAULT_STREAM_MODEL = "builtin-causal"  # `videogen stream` and `stream: true` without a model

# Upper bounds that catch typos (an extra zero) rather than limit real use.
MAX_SECONDS = 3600.0
MAX_FPS = 120.0
MAX_STEPS = 1000
MAX_SIDE = 4096
DTYPES = ("auto", "float32", "bfloat16", "float16")
MAX_LORAS = 8  # adapters per request
MAX_LORA_SCALE = 5.0  # |scale|: published Wan LoRAs are used at 0.25..2; 10 is a typo


@dataclass(frozen=True)
class Shot:
    """One prompt held for `seconds`. A new shot is a deliberate cut: fresh start, new anchor."""

    prompt: str
    seconds: float


@dataclass(frozen=True)
class Lora:
    """A LoRA adapter for the transformer, for one request (`videogen.models.lora`): a
    `.safetensors` file in original-Wan or diffusers key names, applied as W + scale * (alpha/r) B A."""

    path: str
    scale: float = 1.0


@dataclass
class RenderSpec:
    shots: list[Shot]
    model: str = ""  # preset name or a local diffusers folder; "" = the default preset
    size: tuple[int, int] | None = None  # (width, height); None = preset default
    fps: float | None = None
    steps: int | None = None
    guidance: float | None = None
    flow_shift: float | None = None  # None: the preset's, else the model folder's scheduler's
    seed: int = 0
    negative_prompt: str = ""
    segment_seconds: float | None = None
    overlap_frames: int | None = None
    attention: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    drift_correction: dict[str, Any] = field(default_factory=dict)  # videogen.stitch.config.DriftConfig fields
    image: str | None = None  # first frame: an image file the video starts from (image-to-video)
    retries: int | None = None  # re-samplings of a segment that fails the health gate; None: the preset's
    health_checks: list[str] | None = None  # the gate's checks; None: the preset's; []: the gate is off
    loras: list[Lora] = field(default_factory=list)  # adapters applied to the transformer for this render
    continuation: str | None = None  # how a segment sees its prefix (`CONTINUATION_MODES`); None: the preset's
    image_fit: str = "cover"  # how `image` of another aspect ratio fills the frame (`IMAGE_FITS`)
    # Two-expert models (Wan 2.2 A14B): the low-noise expert's guidance scale (diffusers'
    # `guidance_scale_2`); None: the preset's, else `guidance`. A one-expert model refuses it.
    guidance_2: float | None = None
    cache: str | None = None  # step caching (`CACHE_MODES`: off | first-block | mag | taylor); None: the preset's
    cache_threshold: float | None = None  # the cache's threshold; None: the preset's measured one

    @classmethod
    def single(cls, prompt: str, seconds: float | None = None, **kw: Any) -> RenderSpec:
        """One shot of `prompt`, `seconds` long (None: `DEFAULT_SECONDS`)."""
        return cls(shots=[Shot(prompt, DEFAULT_SECONDS if seconds is None else seconds)], **kw)

    @property
    def prompt(self) -> str:
        return self.shots[0].prompt

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.shots)

    def validate(self) -> RenderSpec:
        """Check what can be checked without the model. Raises InvalidOption."""
        if not self.shots:
            raise InvalidOption("prompt", "", "at least one prompt is required")
        for i, shot in enumerate(self.shots):
            name = "prompt" if len(self.shots) == 1 else f"shots[{i}].prompt"
            if not isinstance(shot.prompt, str) or not shot.prompt.strip():
                raise InvalidOption(name, shot.prompt, "must not be empty")
            sname = "seconds" if len(self.shots) == 1 else f"shots[{i}].seconds"
            _check_range(sname, shot.seconds, 0.0, MAX_SECONDS, open_low=True)
        if self.seconds > MAX_SECONDS:
            raise InvalidOption("seconds", self.seconds, f"total must be at most {MAX_SECONDS:g}")
        _check_sampling(self.size, self.fps, self.steps, self.guidance, self.seed)
        if self.flow_shift is not None:
            _check_range("flow_shift", self.flow_shift, 0.0, 100.0, open_low=True)
        if self.guidance_2 is not None:
            _check_range("guidance_2", self.guidance_2, 0.0, MAX_GUIDANCE)
        if self.segment_seconds is not None:
            _check_range("segment_seconds", self.segment_seconds, 0.0, MAX_SECONDS, open_low=True)
        if self.overlap_frames is not None and (not isinstance(self.overlap_frames, int) or self.overlap_frames < 1):
            raise InvalidOption("overlap_frames", self.overlap_frames, "must be a whole number >= 1")
        if self.attention is not None and self.attention not in ATTENTION_BACKENDS:
            raise InvalidOption("attention", self.attention, f"must be one of {', '.join(ATTENTION_BACKENDS)}")
        if self.dtype not in DTYPES:
            raise InvalidOption("dtype", self.dtype, f"must be one of {', '.join(DTYPES)}")
        if not isinstance(self.device, str) or not self.device:
            raise InvalidOption("device", self.device, "must be auto, cpu, cuda or cuda:N")
        if self.image is not None:
            from pathlib import Path

            if not isinstance(self.image, str) or not Path(self.image).is_file():
                raise InvalidOption("image", self.image, "no such image file")
        if self.continuation is not None and self.continuation not in CONTINUATION_MODES:
            raise InvalidOption("continuation", self.continuation, f"must be one of {', '.join(CONTINUATION_MODES)}")
        if self.image_fit not in IMAGE_FITS:
            raise InvalidOption("image_fit", self.image_fit, f"must be one of {', '.join(IMAGE_FITS)}")
        self.drift_config()
        check_health_options(self.retries, self.health_checks)
        check_loras(self.loras)
        check_cache_options(self.cache, self.cache_threshold)
        return self

    def drift_config(self):
        """The stitcher's `DriftConfig` for this spec; InvalidOption naming `drift_correction.<field>`."""
        import re

        from videogen.stitch.config import DriftConfig

        known = set(DriftConfig.__dataclass_fields__)
        for key in self.drift_correction:
            if key not in known:
                raise InvalidOption(f"drift_correction.{key}", self.drift_correction[key],
                                    f"unknown field (known: {', '.join(sorted(known))})")  # fmt: skip
        try:
            return DriftConfig(**self.drift_correction)
        except ValueError as exc:
            m = re.match(r"`(\w+)`", str(exc))
            key = m[1] if m else "mode"
            raise InvalidOption(f"drift_correction.{key}", self.drift_correction.get(key), str(exc)) from None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shots"] = [{"prompt": s.prompt, "seconds": s.seconds} for s in self.shots]
        d["size"] = list(self.size) if self.size is not None else None
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RenderSpec:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["shots"] = [Shot(str(s["prompt"]), float(s["seconds"])) for s in data["shots"]]
        if kw.get("size") is not None:
            kw["size"] = tuple(kw["size"])
        kw["loras"] = [Lora(**lora) for lora in kw.get("loras") or []]
        return cls(**kw)


@dataclass
class StreamSpec:
    """A live stream (`videogen.streaming.stream.stream`): one prompt, switchable at chunk boundaries.
    Plain data like `RenderSpec` (here, not in `streaming`, so the API validates it without torch)."""

    prompt: str
    seconds: float | None = DEFAULT_STREAM_SECONDS  # None: until cancelled (--forever)
    model: str = DEFAULT_STREAM_MODEL
    size: tuple[int, int] | None = None  # (width, height); None = the preset's
    fps: float | None = None
    steps: int | None = None  # denoising steps per chunk
    guidance: float | None = None
    flow_shift: float | None = None
    negative_prompt: str = ""
    seed: int = 0
    chunk_frames: int = 3  # latent frames per chunk (12 pixel frames with Wan's 4x temporal stride)
    first_chunk_frames: int = 1  # the first chunk: the first frame alone, on screen fastest
    sink_frames: int = 1  # first latent frames kept in the cache for good
    window_frames: int = 6  # most recent latent frames kept in the cache
    switches: list[tuple[float, str]] = field(default_factory=list)  # (at second, prompt)
    checkpoint: str | None = None  # causal generator weights (e.g. Self-Forcing's) over a Wan folder
    loras: list[Lora] = field(default_factory=list)  # adapters on the transformer for the whole stream
    retries: int | None = None  # re-generations of a chunk that fails the health gate; None: the preset's
    health_checks: list[str] | None = None  # the gate's checks; None: the preset's; []: the gate is off
    device: str = "auto"
    dtype: str = "auto"

    def validate(self) -> None:
        if not self.prompt or not self.prompt.strip():
            raise InvalidOption("prompt", self.prompt, "must not be empty")
        if self.seconds is not None and not (0 < self.seconds <= 24 * 3600):
            raise InvalidOption("seconds", self.seconds, "must be > 0 (or use --forever)")
        if not 1 <= self.chunk_frames <= 16:
            raise InvalidOption("chunk_frames", self.chunk_frames, "must be between 1 and 16 latent frames")
        if not 1 <= self.first_chunk_frames <= 16:
            raise InvalidOption("first_chunk_frames", self.first_chunk_frames, "must be between 1 and 16 latent frames")
        if self.sink_frames < 0:
            raise InvalidOption("sink_frames", self.sink_frames, "must be >= 0")
        if self.window_frames < self.chunk_frames:
            raise InvalidOption("window_frames", self.window_frames, f"must be >= chunk_frames ({self.chunk_frames})")
        _check_sampling(self.size, self.fps, self.steps, self.guidance, self.seed)
        if self.flow_shift is not None:
            _check_range("flow_shift", self.flow_shift, 0.0, 100.0, open_low=True)
        for at, prompt in self.switches:
            if at < 0 or not prompt.strip():
                raise InvalidOption("switch", f"{at}:{prompt}", "needs a time >= 0 and a prompt")
        check_health_options(self.retries, self.health_checks)
        check_loras(self.loras)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["size"] = list(self.size) if self.size is not None else None
        d["switches"] = [[at, prompt] for at, prompt in self.switches]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamSpec:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        if kw.get("size") is not None:
            kw["size"] = tuple(kw["size"])
        kw["switches"] = [(float(at), str(prompt)) for at, prompt in kw.get("switches") or []]
        kw["loras"] = [Lora(**lora) for lora in kw.get("loras") or []]
        return cls(**kw)


def check_health_options(retries: Any, checks: Any) -> None:
    """The health gate's options (`videogen.sampling.health`): InvalidOption naming `retries` or `health_checks`."""
    bad_int = not isinstance(retries, int) or isinstance(retries, bool)
    if retries is not None and (bad_int or not 0 <= retries <= MAX_RETRIES):
        raise InvalidOption("retries", retries, f"must be a whole number in 0..{MAX_RETRIES}")
    if checks is not None:
        if not isinstance(checks, (list, tuple)) or not all(isinstance(c, str) for c in checks):
            raise InvalidOption("health_checks", checks, "must be a list of check names")
        for check in checks:
            if check not in HEALTH_CHECKS:
                raise InvalidOption("health_checks", check, f"unknown check (known: {', '.join(HEALTH_CHECKS)})")


def check_loras(loras: Any) -> None:
    """A request's LoRA adapters: InvalidOption naming `loras` (the CLI's `--lora`). Whether a file
    fits the model is checked when it is loaded (`videogen.models.lora`)."""
    from pathlib import Path

    if not isinstance(loras, (list, tuple)) or not all(isinstance(lora, Lora) for lora in loras):
        raise InvalidOption("loras", loras, "must be a list of LoRA adapters (path and scale)")
    if len(loras) > MAX_LORAS:
        raise InvalidOption("loras", len(loras), f"at most {MAX_LORAS} adapters per request")
    seen = set()
    for lora in loras:
        if not isinstance(lora.path, str) or not lora.path.endswith(".safetensors"):
            raise InvalidOption("loras", lora.path, "must be a .safetensors file")
        if not Path(lora.path).is_file():
            raise InvalidOption("loras", lora.path, "no such LoRA file")
        if lora.path in seen:
            raise InvalidOption("loras", lora.path, "is given twice")
        seen.add(lora.path)
        if isinstance(lora.scale, bool):
            raise InvalidOption("loras", lora.scale, "the scale must be a number")
        _check_range("loras", lora.scale, -MAX_LORA_SCALE, MAX_LORA_SCALE)


def approved_lora(folder: Any, name: Any) -> str:
    """The file `name` names inside the operator's LoRA folder (the service's `lora_dir`), or
    InvalidOption naming `loras`: no folder configured, a name that leaves it (`../x`, an absolute
    path, a symlink pointing out), or no such file."""
    from pathlib import Path, PurePosixPath

    if folder is None or not str(folder).strip():  # unset; never "" as the working directory
        raise InvalidOption("loras", name, "this server offers no LoRA adapters (its operator sets VIDEOGEN_LORA_DIR)")
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        raise InvalidOption("loras", name, "must be the name of a file in the server's LoRA folder")
    if not name.endswith(".safetensors"):
        raise InvalidOption("loras", name, "must be a .safetensors file")
    if PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
        raise InvalidOption("loras", name, "must name a file inside the server's LoRA folder")
    root = Path(folder).expanduser().resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        raise InvalidOption("loras", name, "must name a file inside the server's LoRA folder")
    if not path.is_file():
        raise InvalidOption("loras", name, "no such LoRA on this server")
    return str(path)


def _check_sampling(size, fps, steps, guidance, seed) -> None:
    """The checks `RenderSpec` and `StreamSpec` share (None = the preset's value)."""
    if size is not None:
        w, h = size
        if not (0 < w <= MAX_SIDE and 0 < h <= MAX_SIDE):
            raise InvalidOption("size", f"{w}x{h}", f"width and height must be in 1..{MAX_SIDE}")
    if fps is not None:
        _check_range("fps", fps, 0.0, MAX_FPS, open_low=True)
    if steps is not None:
        if not isinstance(steps, int) or isinstance(steps, bool):
            raise InvalidOption("steps", steps, "must be a whole number")
        _check_range("steps", steps, 1, MAX_STEPS)
    if guidance is not None:
        _check_range("guidance", guidance, 0.0, MAX_GUIDANCE)
    if not isinstance(seed, int) or not (0 <= seed < 2**63):
        raise InvalidOption("seed", seed, "must be a whole number in 0..2**63-1")


def _check_range(option: str, value: Any, low: float, high: float, *, open_low: bool = False) -> None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InvalidOption(option, value, "must be a number") from None
    if not math.isfinite(x):
        raise InvalidOption(option, value, "must be a finite number")
    too_low = x <= low if open_low else x < low
    if too_low or x > high:
        bound = f"> {low:g}" if open_low else f">= {low:g}"
        raise InvalidOption(option, value, f"must be {bound} and <= {high:g}")

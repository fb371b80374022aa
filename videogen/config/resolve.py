"""The one resolution step: a request (`RenderSpec`, `StreamSpec`) plus its model's preset and
geometry -> a complete, validated, frozen spec (`ResolvedRender`, `ResolvedStream`).

Every entry point calls it (`render()`, `stream()`, the CLI commands, the API's catalog), so a
request means the same video wherever it comes from: every default is filled here and nowhere
else, and every rule that needs the model is checked here (the size multiple, whole frame counts,
the segment plan, chunk sizes against the temporal patch). It imports no torch: the API process
validates requests with it before a worker ever loads the model.

    resolved = resolve_render(RenderSpec.single("a red circle", 2.0))
    resolved.settings.fps, len(resolved.plan)   # 16.0, 1
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from videogen.config.geometry import ModelGeometry, geometry_for
from videogen.config.plan import RenderPlan, frames_for, plan_render
from videogen.config.presets import (
    HealthConfig,
    Preset,
    folder_flow_shift,
    folder_has_two_experts,
    load_presets,
    resolve_preset,
)
from videogen.config.spec import Lora, RenderSpec, Shot, StreamSpec
from videogen.config.step_cache import StepCacheConfig
from videogen.errors import InvalidOption


@dataclass(frozen=True)
class ResolvedSettings:
    """The numbers a render runs with: the request's, else its model's preset's."""

    width: int
    height: int
    fps: float
    steps: int
    guidance: float
    flow_shift: float | None  # None: the folder's scheduler sets none (its class default applies)
    segment_seconds: float
    overlap_frames: int
    guidance_2: float | None = None  # the low-noise expert's guidance (two-expert models); None: one expert


@dataclass(frozen=True)
class ResolvedRender:
    """A `RenderSpec` with every default filled and every model-dependent rule checked."""

    shots: tuple[Shot, ...]
    model: str  # the preset's name
    settings: ResolvedSettings
    plan: RenderPlan
    attention: str
    seed: int
    negative_prompt: str
    drift_correction: tuple[tuple[str, Any], ...]  # the requested overrides of the stitcher's DriftConfig, sorted
    image: str | None
    device: str
    dtype: str
    health: HealthConfig  # the segment health gate: the preset's, with the request's checks and retries
    continuation: str = (
        "clean"  # how a segment sees its prefix: the request's, else the preset's (`CONTINUATION_MODES`)
    )
    image_fit: str = "cover"  # how `image` fills the frame (`IMAGE_FITS`)
    loras: tuple[Lora, ...] = ()  # adapters on the transformer for this render (`videogen.models.lora`)
    cache: StepCacheConfig = field(
        default_factory=StepCacheConfig
    )  # step caching: the request's mode/threshold, else the preset's

    @property
    def total_steps(self) -> int:
        return self.settings.steps * len(self.plan)


@dataclass(frozen=True)
class ResolvedStream:
    """A `StreamSpec` with every default filled and every model-dependent rule checked."""

    prompt: str
    seconds: float | None  # None: until cancelled
    model: str  # the preset's name
    width: int
    height: int
    fps: float
    steps: int  # denoising steps per chunk
    guidance: float
    flow_shift: float | None  # None: the folder's scheduler sets none
    negative_prompt: str
    seed: int
    chunk_frames: int
    first_chunk_frames: int
    sink_frames: int
    window_frames: int
    switches: tuple[tuple[float, str], ...]  # (at second, prompt), in time order
    checkpoint: str | None
    device: str
    dtype: str
    health: HealthConfig  # the chunk health gate, as for a render
    frames: int | None  # round(seconds * fps), exactly; None: until cancelled
    chunks: int | None  # chunks that make `frames`
    loras: tuple[Lora, ...] = ()  # adapters on the transformer for the whole stream


def resolve_render(spec: RenderSpec, preset: Preset | None = None, geometry: ModelGeometry | None = None, *,
                   continue_first: bool = False) -> ResolvedRender:  # fmt: skip
    """`spec` for `preset` (default: the one `spec.model` names) whose model has `geometry`
    (default: read from the preset's config files). `continue_first`: the render extends an
    earlier video (its first segment continues that video's last). Raises InvalidOption."""
    spec.validate()
    preset = preset if preset is not None else resolve_preset(spec.model)
    geometry = geometry if geometry is not None else geometry_for(preset)
    width, height = _frame_size(spec.size, preset, geometry)
    guidance = _given(spec.guidance, preset.guidance)
    settings = ResolvedSettings(
        width=width,
        height=height,
        fps=_given(spec.fps, preset.fps),
        steps=_given(spec.steps, preset.steps),
        guidance=guidance,
        flow_shift=_given(spec.flow_shift, _flow_shift(preset)),
        segment_seconds=_given(spec.segment_seconds, preset.segment_seconds),
        overlap_frames=_given(spec.overlap_frames, preset.overlap_frames),
        guidance_2=_guidance_2(spec.guidance_2, preset, guidance),
    )
    return ResolvedRender(
        shots=tuple(spec.shots),
        model=preset.name,
        settings=settings,
        plan=_segment_plan(spec.shots, settings, geometry.temporal_factor, continue_first),
        attention=_given(spec.attention, preset.attention),
        seed=spec.seed,
        negative_prompt=spec.negative_prompt,
        drift_correction=tuple(sorted(spec.drift_correction.items())),
        image=spec.image,
        device=spec.device,
        dtype=spec.dtype,
        health=_health(preset.health, spec.retries, spec.health_checks),
        continuation=_given(spec.continuation, preset.continuation),
        image_fit=spec.image_fit,
        loras=tuple(spec.loras),
        cache=preset.cache.resolve(spec.cache, spec.cache_threshold),
    )


def resolve_stream(
    spec: StreamSpec, preset: Preset | None = None, geometry: ModelGeometry | None = None
) -> ResolvedStream:
    """`spec` for `preset` (default: the one `spec.model` names) whose model has `geometry`
    (default: read from the preset's config files). Raises InvalidOption."""
    spec.validate()
    preset = preset if preset is not None else resolve_preset(spec.model)
    geometry = geometry if geometry is not None else geometry_for(preset)
    if not preset.causal and spec.checkpoint is None:
        causal = sorted(name for name, p in load_presets().items() if p.causal and p.available)
        raise InvalidOption("model", spec.model or preset.name, "is not a block-causal model (streaming models: "
                            f"{', '.join(causal) or 'none'}; or a causal generator's checkpoint over a Wan folder)")  # fmt: skip
    width, height = _frame_size(spec.size, preset, geometry)
    pt = geometry.patch_size[0]
    for name in ("chunk_frames", "first_chunk_frames"):
        if getattr(spec, name) % pt:
            raise InvalidOption(name, getattr(spec, name), f"must be a multiple of the temporal patch size {pt}")
    fps = _given(spec.fps, preset.fps)
    frames = None if spec.seconds is None else frames_for(spec.seconds, fps)
    return ResolvedStream(
        prompt=spec.prompt,
        seconds=spec.seconds,
        model=preset.name,
        width=width,
        height=height,
        fps=fps,
        steps=_given(spec.steps, preset.steps),
        guidance=_given(spec.guidance, preset.guidance),
        flow_shift=_given(spec.flow_shift, _flow_shift(preset)),
        negative_prompt=spec.negative_prompt,
        seed=spec.seed,
        chunk_frames=spec.chunk_frames,
        first_chunk_frames=spec.first_chunk_frames,
        sink_frames=spec.sink_frames,
        window_frames=spec.window_frames,
        switches=tuple(sorted(spec.switches)),
        checkpoint=spec.checkpoint,
        device=spec.device,
        dtype=spec.dtype,
        health=_health(preset.health, spec.retries, spec.health_checks),
        frames=frames,
        chunks=None if frames is None else _chunks(frames, spec, geometry.temporal_factor),
        loras=tuple(spec.loras),
    )


def _given(value: Any, default: Any) -> Any:
    """The request's value where it sets one (None: unset; 0 and "" are values), else the preset's."""
    return default if value is None else value


def _flow_shift(preset: Preset) -> float | None:
    """The preset's flow shift where it writes one, else its model folder's own (the scheduler
    config's, as diffusers' WanPipeline samples it; None: the config sets none)."""
    if preset.flow_shift is not None or preset.path is None:
        return preset.flow_shift
    return folder_flow_shift(preset.path)


def _guidance_2(given: float | None, preset: Preset, guidance: float) -> float | None:
    """The low-noise expert's guidance scale for a two-expert folder (Wan 2.2 A14B): the request's,
    else the preset's, else `guidance` (diffusers' `guidance_scale_2` default). None for a model
    with one transformer, which refuses one given (diffusers' WanPipeline refuses it too)."""
    if preset.path is None or not folder_has_two_experts(preset.path):
        if given is not None:
            raise InvalidOption("guidance_2", given, "applies only to two-expert models (Wan 2.2 A14B: "
                                "transformer_2 and boundary_ratio); this model has one transformer")  # fmt: skip
        return None
    return _given(given, _given(preset.guidance_2, guidance))


def _health(preset: HealthConfig, retries: int | None, checks: list[str] | None) -> HealthConfig:
    """The preset's gate with the request's retries and checks (an empty list: the gate is off)."""
    from dataclasses import replace

    return replace(preset, retries=_given(retries, preset.retries),
                   checks=preset.checks if checks is None else tuple(dict.fromkeys(checks)))  # fmt: skip


def _frame_size(size: tuple[int, int] | None, preset: Preset, geometry: ModelGeometry) -> tuple[int, int]:
    width, height = size or preset.size
    mw, mh = geometry.size_multiple
    if width % mw or height % mh:
        raise InvalidOption(
            "size", f"{width}x{height}", f"width must be a multiple of {mw} and height of {mh} for this model"
        )
    return width, height


def _segment_plan(
    shots: list[Shot], settings: ResolvedSettings, temporal_factor: int, continue_first: bool
) -> RenderPlan:
    frames = []
    for i, shot in enumerate(shots):
        option = "seconds" if len(shots) == 1 else f"shots[{i}].seconds"
        frames.append((shot.prompt, frames_for(shot.seconds, settings.fps, option)))
    return plan_render(
        frames,
        fps=settings.fps,
        segment_frames=max(1, round(settings.segment_seconds * settings.fps)),
        overlap_frames=settings.overlap_frames,
        temporal_factor=temporal_factor,
        continue_first=continue_first,
    )


def _chunks(frames: int, spec: StreamSpec, temporal_factor: int) -> int:
    # A causal codec decodes the first chunk's F latent frames to tf*(F-1)+1 frames (F = 1: the
    # first frame alone), every later chunk (decoded after the previous chunk's last latent frame)
    # its C latent frames to tf*C new ones.
    first = temporal_factor * (spec.first_chunk_frames - 1) + 1
    per_chunk = temporal_factor * spec.chunk_frames
    return 1 + max(0, -(-(frames - first) // per_chunk))

"""Model presets: named defaults (size, fps, steps, ...) and where each model's weights live.

Presets are data in `configs/models.yaml`; this module only reads and checks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from videogen.config import environment
from videogen.config.step_cache import CachePreset
from videogen.errors import ModelLoadError

ATTENTION_BACKENDS = ("dense", "sparse", "sparse-triton", "sparse-cpu", "reference")
# The segment health gate's checks (`videogen.sampling.health`), in the order they are reported.
HEALTH_CHECKS = ("nonfinite", "black", "blown", "frozen", "seam_jump", "content_loss", "copies", "colours", "objects")
MAX_RETRIES = 10
MAX_GUIDANCE = 50.0  # a guidance scale past this is a typo, not a setting
MAX_PREVIEWS = 4  # looks a gate preview ladder may take (`HealthConfig.preview`)
MAX_PREVIEW_MARGIN = 10.0  # `HealthConfig.preview_margin`: past this, an early look stops nothing
# How a continuing segment (or an image-to-video start) sees its latent prefix
# (`videogen.sampling.loop.denoise_segment`; docs/architecture.md, "Continuation in latent space"):
#   clean    the prefix is given clean, its tokens at timestep 0 (Wan's per-token timesteps): for
#            models trained on clean context (SkyReels-V2 diffusion forcing, Wan 2.2 TI2V, the built-in one)
#   renoise  training-free: the prefix is re-noised to every step's noise level and the whole
#            latent is denoised at one timestep (RePaint/SDEdit-style): for models that never saw
#            mixed timesteps (Wan 2.1 T2V)
CONTINUATION_MODES = ("clean", "renoise")
# How a start image (`--image`) of another aspect ratio fills the frame (`videogen.rendering.image`):
# cover (default: scaled to cover, centre-cropped; nothing is distorted), stretch (scaled to the
# frame, distorted, as diffusers' pipelines do), contain (scaled to fit, centred on black bars).
IMAGE_FITS = ("cover", "stretch", "contain")
# Where a model's components live during a render (`videogen.models.memory`): none (all on the
# device), model (whole components moved to the device while used), group (the transformer block by block).
OFFLOAD_MODES = ("none", "model", "group")
VAE_TILING_MODES = ("auto", "on", "off")  # tiled VAE decode; auto: from 720p (`videogen.models.memory.vae_tiling_on`)


@dataclass(frozen=True)
class HealthConfig:
    """The segment health gate of a preset (`health:` in configs/models.yaml): which checks run,
    how many times a failed segment is re-sampled, and the thresholds. Pixel values are 0..255;
    motion and steps are mean absolute differences of consecutive frames; histograms are coarse
    RGB histograms compared by total variation (0..1)."""

    # Only the threshold-free check unless a preset lists more: the thresholds below are the
    # built-in model's, and a model without its own calibration (a local folder, a preset with
    # no `health:` block) would retry good segments on them. `--checks` turns the rest on.
    checks: tuple[str, ...] = ("nonfinite",)
    retries: int = 2
    # After this many segments (or chunks) in a row kept a failing attempt, the next are judged
    # but not re-sampled until one passes: a flaw the chain already carries (an object lost
    # before the seam) is one no new noise brings back, and retrying it costs the whole render
    # time. 0: always re-sample. `videogen.sampling.health.gate_for`.
    give_up_after: int = 0
    # The transformer evaluations retries may add to one render (or stream), as a share of those
    # of the attempts it keeps: a segment starts a retry only while the retries' evaluations so
    # far stay within `retries` segments' steps (a bucket that starts full) + this share of the
    # kept evaluations, so retries add about this share to the sampling time however many
    # segments keep failing. Evaluations, not steps: a step the step cache forecasts costs next to
    # nothing, and a retry stopped at its `preview` costs the evaluations it ran, not all of an
    # attempt's. None: no such bound. `videogen.sampling.health.retry_spare`.
    retry_budget: float | None = None
    # Judge each attempt first on the clean frames the model predicts at the first step whose
    # noise level (sigma, 1 = pure noise) is at or below this (x0 = x - sigma v, decoded), and run
    # an attempt that fails there no further: a failed attempt then costs the steps down to this
    # level, not all of them. When every attempt stops there, the one whose preview judged best
    # is run to its end and kept. A noise level, not a step count, so that a render of few steps
    # is not judged on a prediction from nearly pure noise. A list of falling levels takes a look
    # at each (a ladder: most failing attempts show at the first, cheap look; the rest at the
    # later ones). 0: off (every attempt runs to its end). `videogen.sampling.health.run_gate`.
    preview: float | tuple[float, ...] = 0.0
    # A ladder's looks before its last (glances at a prediction from mostly noise) stop an attempt
    # only on a check this many times past its threshold; the last look, and the final frames,
    # judge at the thresholds themselves. An early prediction is blurred: a thin object's
    # foreground mass or a bounce's smear reads just past `content_loss` or `copies` on attempts
    # that pass in the end, while the splits and losses worth stopping early read far past them.
    preview_margin: float = 1.0
    # The guidance scale retries sample at (None: the job's own). A retry from fresh noise under
    # the same guidance tends to fail as the first attempt did; a stronger pull towards the
    # prompt keeps both of two objects in view more often (docs/builtin-model.md, "Retries at a
    # higher guidance"). Only where the job samples with guidance (its scale above 1): an
    # unguided job has no negative-prompt pass to scale. The first attempt, and so a render that
    # no segment fails, is unchanged.
    retry_guidance: float | None = None
    dark_level: int = 24  # a pixel whose brightest channel is below this is dark
    bright_level: int = 235  # a pixel whose darkest channel is above this is blown
    empty_fraction: float = 0.985  # a frame this dark (or blown) is black (or blown)
    bad_frames: float = 0.25  # a segment with this share of black (or blown) frames fails
    frozen_ratio: float = 0.15  # frozen: motion below this share of the previous segment's ...
    frozen_floor: float = 0.6  # ... when the previous segment moved at least this much
    seam_ratio: float = 4.0  # seam jump: the seam's histogram step over the p95 in-segment step ...
    seam_floor: float = 0.08  # ... and at least this large
    foreground_distance: float = 60.0  # a pixel this far from the border colour is foreground
    foreground_ratio: float = 0.35  # content loss: foreground mass below this share of the previous segment's
    foreground_floor: float = 0.02  # ... when that held at least this share of the frame
    histogram_distance: float = 0.5  # content loss: the colour histogram moved this far from the previous segment's
    copies_fraction: float = 0.1  # copies: more than this share of new frames shows more copies of a colour than the
    object_area: float = 0.01  # anchor (components of at least this share of the frame), or foreground below
    lost_share: float = 0.75  # this share of the anchor's (an object lost)
    lost_colour: float = 0.25  # colours: a colour below this share of its share in the previous segment is gone
    # objects: a frame is wrong where an anchor object shows more copies than in the anchor, or its
    # colour holds below this share of its anchor share (gone); it fails as `copies` does, past
    # `copies_fraction` of the new frames, counting components of at least `object_area`
    vanished: float = 0.1

    def __post_init__(self) -> None:
        unknown = [c for c in self.checks if c not in HEALTH_CHECKS]
        if unknown:
            raise ValueError(f"unknown health check {unknown[0]!r} (known: {', '.join(HEALTH_CHECKS)})")
        if not 0 <= self.retries <= MAX_RETRIES:
            raise ValueError(f"retries must be in 0..{MAX_RETRIES}")
        if not isinstance(self.give_up_after, int) or isinstance(self.give_up_after, bool) or self.give_up_after < 0:
            raise ValueError(f"give_up_after must be a whole number >= 0, got {self.give_up_after!r}")
        budget = self.retry_budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float)
                                   or not 0 <= budget <= MAX_RETRIES):  # fmt: skip
            raise ValueError(
                f"retry_budget must be a share of the transformer evaluations in 0..{MAX_RETRIES} or null, got {budget!r}"
            )
        levels = self.preview if isinstance(self.preview, tuple) else None
        if levels is None:
            if isinstance(self.preview, bool) or not isinstance(self.preview, int | float) or not 0 <= self.preview < 1:
                raise ValueError(f"preview must be a noise level in [0, 1) or a list of them, got {self.preview!r}")
        elif (not 1 <= len(levels) <= MAX_PREVIEWS
              or any(isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1 for v in levels)
              or any(a <= b for a, b in zip(levels, levels[1:]))):  # fmt: skip
            raise ValueError(
                f"preview must list 1..{MAX_PREVIEWS} falling noise levels in (0, 1), got {list(levels)!r}"
            )

        rg = self.retry_guidance
        if rg is not None and (isinstance(rg, bool) or not isinstance(rg, int | float) or not 1 <= rg <= MAX_GUIDANCE):
            raise ValueError(f"retry_guidance must be a guidance scale in 1..{MAX_GUIDANCE:g} or null, got {rg!r}")
        margin = self.preview_margin
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not 1 <= margin <= MAX_PREVIEW_MARGIN:
            raise ValueError(f"preview_margin must be a ratio in 1..{MAX_PREVIEW_MARGIN:g}, got {margin!r}")

    @property
    def preview_levels(self) -> tuple[float, ...]:
        """The noise levels at which an attempt is judged before its end, falling; () for none."""
        if isinstance(self.preview, tuple):
            return tuple(float(v) for v in self.preview)
        return (float(self.preview),) if self.preview else ()

    @property
    def enabled(self) -> bool:
        return bool(self.checks)


@dataclass(frozen=True)
class AdmissionLimits:
    """The most one job may ask of a model on the job service (`limits:` in configs/models.yaml),
    checked when a job is created (`videogen.api.admission`) so that no request occupies a worker
    for hours; the CLI renders any valid geometry. None (or no `sizes`): the preset sets no such
    limit and the service's own default applies (`ServiceSettings.max_frame_pixels`, `max_job_work`)."""

    sizes: tuple[tuple[int, int], ...] = ()  # the only (width, height) admitted; (): any up to max_pixels
    max_pixels: int | None = None  # width x height of a frame
    max_frames: int | None = None  # frames one job makes (a render's, an extension's new ones, a stream's)
    max_work: int | None = None  # width x height x frames x denoising steps of one job

    def __post_init__(self) -> None:
        for name in ("max_pixels", "max_frames", "max_work"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")

    def admits_size(self, width: int, height: int) -> bool:
        if self.sizes and (width, height) not in self.sizes:
            return False
        return self.max_pixels is None or width * height <= self.max_pixels


def parse_size(value: str | tuple[int, int], option: str = "size") -> tuple[int, int]:
    """'832x480' -> (832, 480). Raises InvalidOption naming `option`."""
    from videogen.errors import InvalidOption

    if isinstance(value, tuple):
        w, h = value
    else:
        parts = str(value).lower().replace("×", "x").split("x")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise InvalidOption(option, value, "expected WIDTHxHEIGHT, for example 832x480")
        w, h = (int(p) for p in parts)
    if w <= 0 or h <= 0:
        raise InvalidOption(option, value, "width and height must be positive")
    return int(w), int(h)


@dataclass(frozen=True)
class Preset:
    name: str
    kind: str  # "builtin" | "diffusers"
    description: str
    size: tuple[int, int]  # (width, height)
    fps: float
    steps: int
    guidance: float
    # The scheduler's shift. None: the model folder's own (its scheduler config's `flow_shift` or
    # `shift`, as diffusers' WanPipeline samples it); a preset that writes one overrides the folder.
    flow_shift: float | None
    segment_seconds: float
    overlap_frames: int
    attention: str
    path: Path | None = None  # diffusers folder; None for the built-in model
    weights: str = "builtin.safetensors"  # built-in models: the weights file in videogen/models/weights/
    # Built-in models: the codec's temporal decoder (`videogen.models.refiner`), a file in
    # videogen/models/weights/. None: the codec decodes losslessly (objects move in 4-frame steps).
    decoder: str | None = None
    causal: bool = False  # trained block-causal: generates chunk by chunk (`videogen stream`)
    health: HealthConfig = HealthConfig()  # the segment health gate's defaults for this model
    limits: AdmissionLimits = AdmissionLimits()  # what the job service admits per job for this model
    # A continuing segment holds its handed-over prefix at this noise level rather than clean (the
    # model was fine-tuned on such context: `videogen train builtin --context-noise`), so it keeps
    # the prefix's layout without copying its pixel-level artefacts. 0: clean (any other model).
    context_noise: float = 0.0
    # A continuing segment sees the shot's first segment's latent frame `anchor_frame` (at its own
    # time, at `SINK_POSITION`) in place of its prefix's first latent frame: the object's true size
    # and shape, which a chain's prefix loses by compounding. Only for models trained with anchors
    # (`videogen train builtin --anchor-frac`). None: off.
    anchor_frame: int | None = None
    continuation: str = "clean"  # how a segment sees its prefix (`CONTINUATION_MODES`): what the model was trained for
    # Two-expert folders (Wan 2.2 A14B): the low-noise expert's guidance scale (diffusers'
    # `guidance_scale_2`). None: `guidance`.
    guidance_2: float | None = None
    offload: str = "none"  # `OFFLOAD_MODES`: the default of `--offload` for this model (CUDA only)
    vae_tiling: str = "auto"  # `VAE_TILING_MODES`: the default of `--vae-tiling`
    cache: CachePreset = field(
        default_factory=CachePreset
    )  # step caching: default mode and measured thresholds (`--cache`)

    @property
    def available(self) -> bool:
        return self.kind == "builtin" or (self.path is not None and (self.path / "model_index.json").is_file())


def _resolve_path(raw: str) -> Path:
    p = Path(raw).expanduser()
    return p if p.is_absolute() else environment.models_dir() / p


@lru_cache(maxsize=4)
def _load(config_file: Path) -> tuple[str, dict[str, Preset]]:
    if not config_file.is_file():
        raise ModelLoadError(f"preset file {str(config_file)!r} does not exist")
    data = yaml.safe_load(config_file.read_text()) or {}
    presets: dict[str, Preset] = {}
    for name, raw in (data.get("presets") or {}).items():
        kind = raw.get("kind", "diffusers")
        if kind not in ("builtin", "diffusers"):
            raise ModelLoadError(f"preset {name!r} in {config_file}: unknown kind {kind!r}")
        attention = raw.get("attention", "dense")
        if attention not in ATTENTION_BACKENDS:
            raise ModelLoadError(f"preset {name!r} in {config_file}: unknown attention {attention!r}")
        presets[name] = Preset(
            name=name,
            kind=kind,
            description=raw.get("description", ""),
            size=parse_size(raw["size"], f"{name}.size"),
            fps=float(raw["fps"]),
            steps=int(raw["steps"]),
            guidance=float(raw["guidance"]),
            # The built-in model has no scheduler config of its own: 3.0 unless its preset says.
            flow_shift=float(raw["flow_shift"]) if "flow_shift" in raw else (3.0 if kind == "builtin" else None),
            segment_seconds=float(raw["segment_seconds"]),
            overlap_frames=int(raw["overlap_frames"]),
            attention=attention,
            path=_resolve_path(raw["path"]) if kind == "diffusers" else None,
            weights=str(raw.get("weights", "builtin.safetensors")),
            decoder=str(raw["decoder"]) if raw.get("decoder") is not None else None,
            causal=bool(raw.get("causal", False)),
            health=_health(name, config_file, raw.get("health") or {}),
            limits=_limits(name, config_file, raw.get("limits") or {}),
            context_noise=float(raw.get("context_noise", 0.0)),
            anchor_frame=int(raw["anchor_frame"]) if raw.get("anchor_frame") is not None else None,
            continuation=str(raw.get("continuation", "clean")),
            guidance_2=float(raw["guidance_2"]) if raw.get("guidance_2") is not None else None,
            offload=str(raw.get("offload", "none")),
            vae_tiling=str(raw.get("vae_tiling", "auto")),
            cache=_cache(name, config_file, raw.get("cache") or {}),
        )
        if presets[name].offload not in OFFLOAD_MODES or presets[name].vae_tiling not in VAE_TILING_MODES:
            raise ModelLoadError(f"preset {name!r} in {config_file}: offload must be one of {', '.join(OFFLOAD_MODES)} "
                                 f"and vae_tiling one of {', '.join(VAE_TILING_MODES)}")  # fmt: skip
        if presets[name].continuation not in CONTINUATION_MODES:
            raise ModelLoadError(f"preset {name!r} in {config_file}: continuation must be one of "
                                 f"{', '.join(CONTINUATION_MODES)}, got {presets[name].continuation!r}")  # fmt: skip
        guidance_2 = presets[name].guidance_2
        if guidance_2 is not None and not 0.0 <= guidance_2 <= 50.0:
            raise ModelLoadError(f"preset {name!r} in {config_file}: guidance_2 must be in [0, 50], "
                                 f"got {guidance_2}")  # fmt: skip
        if not 0.0 <= presets[name].context_noise <= 0.5:
            raise ModelLoadError(f"preset {name!r} in {config_file}: context_noise must be in [0, 0.5], "
                                 f"got {presets[name].context_noise}")  # fmt: skip
        anchor = presets[name].anchor_frame
        if anchor is not None and (kind != "builtin" or anchor < 1):
            raise ModelLoadError(f"preset {name!r} in {config_file}: anchor_frame must be >= 1 and needs a "
                                 f"model trained with anchors (kind builtin), got {anchor}")  # fmt: skip
        if presets[name].decoder is not None and kind != "builtin":
            raise ModelLoadError(f"preset {name!r} in {config_file}: decoder is the built-in codec's "
                                 f"temporal decoder (kind builtin only)")  # fmt: skip
        if not presets[name].limits.admits_size(*presets[name].size):
            raise ModelLoadError(f"preset {name!r} in {config_file}: its size {raw['size']} is outside its limits")
    default = data.get("default", next(iter(presets), ""))
    return default, presets


def _health(name: str, config_file: Path, raw: dict) -> HealthConfig:
    """A preset's `health:` block over `HealthConfig`'s defaults."""
    known = set(HealthConfig.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ModelLoadError(f"preset {name!r} in {config_file}: unknown health key {unknown[0]!r}")
    values = dict(raw)
    if "checks" in values:
        values["checks"] = tuple(values["checks"] or ())
    if isinstance(values.get("preview"), list):
        values["preview"] = tuple(values["preview"])
    try:
        return HealthConfig(**values)
    except (TypeError, ValueError) as exc:
        raise ModelLoadError(f"preset {name!r} in {config_file}: health: {exc}") from None


def _cache(name: str, config_file: Path, raw: dict) -> CachePreset:
    """A preset's `cache:` block (`videogen.config.step_cache.CachePreset`)."""
    from videogen.errors import InvalidOption

    try:
        return CachePreset.from_yaml(raw)
    except (InvalidOption, TypeError, ValueError) as exc:
        raise ModelLoadError(f"preset {name!r} in {config_file}: cache: {exc}") from None


def _limits(name: str, config_file: Path, raw: dict) -> AdmissionLimits:
    """A preset's `limits:` block: `sizes` as WxH strings, numbers as integers (or floats such as
    2.0e10, which YAML 1.1 reads as text without a sign in the exponent)."""
    from videogen.errors import InvalidOption

    where = f"preset {name!r} in {config_file}: limits"
    unknown = sorted(set(raw) - set(AdmissionLimits.__dataclass_fields__))
    if unknown:
        raise ModelLoadError(f"{where}: unknown key {unknown[0]!r}")
    values: dict = {}
    try:
        values["sizes"] = tuple(parse_size(s, f"{name}.limits.sizes") for s in raw.get("sizes") or ())
        for key in ("max_pixels", "max_frames", "max_work"):
            if raw.get(key) is not None:
                number = float(raw[key])
                if not number.is_integer():
                    raise ValueError(f"{key} must be a whole number, got {raw[key]!r}")
                values[key] = int(number)
        return AdmissionLimits(**values)
    except (InvalidOption, TypeError, ValueError) as exc:
        raise ModelLoadError(f"{where}: {exc}") from None


def load_presets() -> dict[str, Preset]:
    return dict(_load(environment.config_dir() / "models.yaml")[1])


def default_preset_name() -> str:
    return _load(environment.config_dir() / "models.yaml")[0]


def get_preset(name: str) -> Preset:
    presets = load_presets()
    if name not in presets:
        raise ModelLoadError(
            f"--model {name!r}: no such preset and no such folder (presets: {', '.join(sorted(presets))})"
        )
    return presets[name]


def resolve_preset(model: str) -> Preset:
    """A preset name, or a path to a diffusers folder (anything containing a path separator or
    naming an existing folder); "" is the default preset."""
    name = model or default_preset_name()
    path = Path(name).expanduser()
    looks_like_path = "/" in name or name.startswith((".", "~")) or path.is_dir()
    if looks_like_path:
        if not path.is_dir():
            raise ModelLoadError(f"--model {name!r}: folder does not exist")
        return preset_for_folder(path)
    return get_preset(name)


def preset_for_folder(path: Path) -> Preset:
    """Defaults for `--model PATH`: the preset pointing at that folder, else Wan 2.1-style defaults
    adapted to the folder's VAE (Wan 2.2's 16x VAE gets the TI2V defaults). Its continuation is
    "clean" where the model was trained on clean context (per-token timesteps: `expand_timesteps`
    in model_index.json, Wan 2.2 TI2V; a diffusion-forcing pipeline, SkyReels-V2), else "renoise"
    (Wan 2.1 T2V). Its flow shift is left to the folder's scheduler (`folder_flow_shift`)."""
    path = path.resolve()
    for preset in load_presets().values():
        if preset.path is not None and preset.path.expanduser().resolve() == path:
            return preset
    import json

    vae_cfg = path / "vae" / "config.json"
    z_dim = json.loads(vae_cfg.read_text()).get("z_dim", 16) if vae_cfg.is_file() else 16
    index_file = path / "model_index.json"
    index = json.loads(index_file.read_text()) if index_file.is_file() else {}
    trained_on_clean_context = bool(index.get("expand_timesteps")) or "DiffusionForcing" in str(
        index.get("_class_name")
    )
    continuation = "clean" if trained_on_clean_context else "renoise"
    if z_dim == 48:  # Wan 2.2 TI2V's high-compression VAE
        return Preset(path.name, "diffusers", "local folder (Wan 2.2 TI2V defaults)", (1280, 704), 24.0,
                      50, 5.0, None, 5.0, 17, "dense", path, continuation=continuation)  # fmt: skip
    return Preset(path.name, "diffusers", "local folder (Wan 2.1 defaults)", (832, 480), 16.0,
                  50, 5.0, None, 5.0, 17, "dense", path, continuation=continuation)  # fmt: skip


def folder_flow_shift(path: Path) -> float | None:
    """The shift a diffusers folder's scheduler config sets: `flow_shift` (UniPC) or `shift`
    (FlowMatchEuler), whichever its class reads, as diffusers' WanPipeline samples it. None: the
    config sets neither (the scheduler's class default applies) or there is none to read."""
    import json

    try:
        cfg = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
    except (OSError, ValueError):
        return None
    euler = cfg.get("_class_name") == "FlowMatchEulerDiscreteScheduler"
    for key in ("shift", "flow_shift") if euler else ("flow_shift", "shift"):
        if isinstance(cfg.get(key), (int, float)) and not isinstance(cfg.get(key), bool):
            return float(cfg[key])
    return None


def folder_has_two_experts(path: Path) -> bool:
    """Whether a diffusers folder is a two-expert model (Wan 2.2 A14B): `model_index.json` names a
    `transformer_2` and a `boundary_ratio` (the denoising loop switches experts only with both)."""
    import json

    try:
        index = json.loads((path / "model_index.json").read_text())
    except (OSError, ValueError):
        return False
    second = index.get("transformer_2")
    return bool(second and second[0]) and index.get("boundary_ratio") is not None

"""Which models this server offers, and request -> `RenderSpec` validation without torch.

A request names a model by public name only: a preset from `configs/models.yaml` or a folder the
operator listed in `VIDEOGEN_MODELS`. A request can never name a path. Everything that can be
checked without loading the model is checked here, so bad input is a 400 at create time and not a
failed job later: the spec's own rules, the frame count of every shot at the model's fps, the
size multiple of the model's VAE x patch size, and the segment plan (for a stream: that the
model is block-causal, and the frame and chunk counts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import videogen.sampling.plan as _plan  # torch-free: videogen's __init__ is lazy
import videogen.config.presets as _presets
import videogen.config.spec as _spec
from .errors import APIError
from .settings import ServiceSettings
from videogen.errors import InvalidOption, ModelLoadError  # noqa: F401

RenderSpec, Shot, StreamSpec = _spec.RenderSpec, _spec.Shot, _spec.StreamSpec
parse_size = _presets.parse_size

# Spec field -> the API field a client sent (error `param`).
API_PARAM = {"guidance": "guidance_scale"}


@dataclass(frozen=True)
class ModelEntry:
    name: str  # public name
    ref: str  # what the worker loads: a preset name or an operator-configured folder
    preset: object  # videogen.config.presets.Preset


@dataclass(frozen=True)
class CheckedSpec:
    spec: object  # RenderSpec, validated
    size: tuple[int, int]
    segments: int
    steps_total: int


@dataclass(frozen=True)
class CheckedStream:
    spec: object  # StreamSpec, validated, with size and fps filled in
    frames: int  # round(seconds * fps), exactly
    chunks: int


class ModelCatalog:
    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings

    def names(self) -> list[str]:
        presets = [name for name, p in _presets.load_presets().items() if p.available]
        return sorted(set(presets) | set(self.settings.model_folders))

    def resolve(self, name: str | None) -> ModelEntry:
        name = name or self.settings.default_model or _presets.default_preset_name()
        folders = self.settings.model_folders
        try:
            if name in folders:
                return ModelEntry(name, str(folders[name]), _presets.preset_for_folder(folders[name]))
            preset = _presets.load_presets().get(name)
        except (ModelLoadError, OSError, ValueError) as exc:
            raise APIError(400, f"model '{name}' is misconfigured on this server: {exc}", param="model",
                           code="model_not_available") from None  # fmt: skip
        if preset is None:
            raise APIError(400, f"The model '{name}' does not exist. Available: {', '.join(self.names())}.",
                           param="model", code="model_not_found")  # fmt: skip
        if not preset.available:
            raise APIError(400, f"The model '{name}' has no weights on this server.", param="model",
                           code="model_not_available")  # fmt: skip
        return ModelEntry(name, name, preset)

    def _size_fps(self, spec, entry: ModelEntry, verb: str) -> tuple[int, int, float]:
        """`spec.validate()`, the server's length cap, and the frame size/fps for `entry`'s preset."""
        spec.validate()
        if spec.seconds > self.settings.max_seconds:
            raise InvalidOption("seconds", spec.seconds, f"this server {verb} at most {self.settings.max_seconds:g} s")
        p = entry.preset
        width, height = spec.size or p.size
        mw, mh = size_multiple(p.kind, str(p.path) if p.path else None)
        if width % mw or height % mh:
            raise InvalidOption("size", f"{width}x{height}",
                                f"width must be a multiple of {mw} and height of {mh} for model {entry.name}")  # fmt: skip
        return width, height, (spec.fps if spec.fps is not None else p.fps)

    def check(self, spec, entry: ModelEntry) -> CheckedSpec:
        """Validate `spec` for `entry` the way `videogen.rendering.render.prepare` will, minus the model load."""
        try:
            p = entry.preset
            width, height, fps = self._size_fps(spec, entry, "renders")
            shots = []
            for i, shot in enumerate(spec.shots):
                option = "seconds" if len(spec.shots) == 1 else f"shots[{i}].seconds"
                shots.append((shot.prompt, _plan.frames_for(shot.seconds, fps, option)))
            seg_seconds = spec.segment_seconds if spec.segment_seconds is not None else p.segment_seconds
            plan = _plan.plan_render(
                shots, fps=fps, segment_frames=max(1, round(seg_seconds * fps)),
                overlap_frames=spec.overlap_frames if spec.overlap_frames is not None else p.overlap_frames,
                temporal_factor=temporal_factor(p.kind, str(p.path) if p.path else None),
            )  # fmt: skip
        except InvalidOption as exc:
            raise invalid(exc) from None
        steps = spec.steps if spec.steps is not None else p.steps
        return CheckedSpec(spec, (width, height), len(plan), steps * len(plan))

    def check_stream(self, spec, entry: ModelEntry) -> CheckedStream:
        """Validate a live stream `spec` for `entry` the way `videogen.streaming.stream.stream` will, minus
        the model load, and fill in the preset's size and fps (the worker makes exactly that)."""
        p = entry.preset
        try:
            if not getattr(p, "causal", False):
                causal = sorted(n for n, q in _presets.load_presets().items() if q.causal and q.available)
                raise InvalidOption("model", entry.name, "cannot stream: it is not a block-causal model "
                                    f"(streaming models on this server: {', '.join(causal) or 'none'})")  # fmt: skip
            width, height, fps = self._size_fps(spec, entry, "streams")
            frames = _plan.frames_for(spec.seconds, fps)
        except InvalidOption as exc:
            raise invalid(exc) from None
        # A causal codec decodes the first chunk's F latent frames to tf*(F-1)+1 frames (F = 1: the
        # first frame alone), every later chunk (decoded after the previous chunk's last latent
        # frame) its C latent frames to tf*C new ones.
        tf = temporal_factor(p.kind, str(p.path) if p.path else None)
        first, per = tf * (spec.first_chunk_frames - 1) + 1, tf * spec.chunk_frames
        spec.size, spec.fps = (width, height), fps
        return CheckedStream(spec, frames, 1 + max(0, -(-(frames - first) // per)))


def invalid(exc) -> APIError:
    param = API_PARAM.get(exc.option, exc.option)
    return APIError(400, f"Invalid '{param}' ({exc.value!r}): {exc.reason}.", param=param, code="invalid_value")


@lru_cache(maxsize=32)
def _vae_and_patch(kind: str, folder: str | None) -> tuple[int, int, tuple[int, int, int]]:
    """(spatial factor, temporal factor, patch size), read from config files (no torch)."""
    if kind == "builtin":
        return 4, 4, (1, 2, 2)  # videogen.models.builtin: 4x4x4 pixel codec, 1x2x2 patches
    path = Path(folder)
    vae = json.loads((path / "vae" / "config.json").read_text())
    transformer = json.loads((path / "transformer" / "config.json").read_text())
    spatial = vae.get("scale_factor_spatial") or (16 if vae.get("z_dim") == 48 else 8)
    temporal = vae.get("scale_factor_temporal") or 4
    return int(spatial), int(temporal), tuple(transformer.get("patch_size", (1, 2, 2)))


def size_multiple(kind: str, folder: str | None) -> tuple[int, int]:
    spatial, _, (_, ph, pw) = _vae_and_patch(kind, folder)
    return spatial * pw, spatial * ph


def temporal_factor(kind: str, folder: str | None) -> int:
    return _vae_and_patch(kind, folder)[1]

"""Which models this server offers, and a request's validation before it becomes a job.

A request names a model by public name only: a preset from `configs/models.yaml` or a folder the
operator listed in `VIDEOGEN_MODELS`. A request can never name a path. A request is checked by
the same resolution step the worker runs (`videogen.config.resolve`, torch-free), against the
model's preset and its geometry read from config files, so bad input is a 400 at create time and
not a failed job later; the server's own length cap and the model's admission limits (sizes,
frames, work per job: `api.admission`) are checked here.
"""

from __future__ import annotations

from dataclasses import dataclass

from videogen.config.geometry import ModelGeometry, geometry_for
from videogen.config.presets import Preset, default_preset_name, load_presets, preset_for_folder
from videogen.config.resolve import ResolvedRender, ResolvedStream, resolve_render, resolve_stream
from videogen.config.spec import RenderSpec, StreamSpec
from videogen.errors import InvalidOption, ModelLoadError

from .admission import Asked, JobShape, admit, effective_limits
from .errors import APIError
from .settings import ServiceSettings

# Spec field -> the API field a client sent (error `param`).
API_PARAM = {"guidance": "guidance_scale", "guidance_2": "guidance_scale_2"}


@dataclass(frozen=True)
class ModelEntry:
    name: str  # public name
    ref: str  # what the worker loads: a preset name or an operator-configured folder
    preset: Preset


@dataclass(frozen=True)
class CheckedSpec:
    spec: RenderSpec  # the request, validated
    resolved: ResolvedRender  # what the worker will render

    @property
    def size(self) -> tuple[int, int]:
        return self.resolved.settings.width, self.resolved.settings.height

    @property
    def segments(self) -> int:
        return len(self.resolved.plan)

    @property
    def steps_total(self) -> int:
        return self.resolved.total_steps


@dataclass(frozen=True)
class CheckedStream:
    spec: StreamSpec  # the request, validated, with size and fps filled in
    resolved: ResolvedStream

    @property
    def frames(self) -> int:  # round(seconds * fps), exactly: a stored stream has a length
        assert self.resolved.frames is not None
        return self.resolved.frames

    @property
    def chunks(self) -> int:
        assert self.resolved.chunks is not None
        return self.resolved.chunks


class ModelCatalog:
    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings

    def names(self) -> list[str]:
        presets = [name for name, p in load_presets().items() if p.available]
        return sorted(set(presets) | set(self.settings.model_folders))

    def resolve(self, name: str | None) -> ModelEntry:
        name = name or self.settings.default_model or default_preset_name()
        folders = self.settings.model_folders
        try:
            if name in folders:
                return ModelEntry(name, str(folders[name]), preset_for_folder(folders[name]))
            preset = load_presets().get(name)
        except (ModelLoadError, OSError, ValueError) as exc:
            raise _misconfigured(name, exc) from None
        if preset is None:
            raise APIError(400, f"The model '{name}' does not exist. Available: {', '.join(self.names())}.",
                           param="model", code="model_not_found")  # fmt: skip
        if not preset.available:
            raise APIError(400, f"The model '{name}' has no weights on this server.", param="model",
                           code="model_not_available")  # fmt: skip
        return ModelEntry(name, name, preset)

    def check(self, spec: RenderSpec, entry: ModelEntry, *, extends: bool = False) -> CheckedSpec:
        """Resolve `spec` for `entry` as `videogen.render()` will, minus the model load, and admit
        it (`api.admission`). `extends`: an extension, whose only field of its own is `seconds`."""
        geometry = _geometry(entry)
        try:
            resolved = resolve_render(spec, entry.preset, geometry)
            self._check_length(spec.seconds, "renders")
            s = resolved.settings
            asked = Asked(size=spec.size is not None, fps=spec.fps is not None, steps=spec.steps is not None,
                          seconds_param="seconds" if len(spec.shots) == 1 else "shots")  # fmt: skip
            self._admit(JobShape(s.width, s.height, s.fps, resolved.plan.total_frames, s.steps),
                        Asked(False, False, False) if extends else asked, entry)  # fmt: skip
        except InvalidOption as exc:
            raise invalid(exc, entry) from None
        return CheckedSpec(spec, resolved)

    def check_stream(self, spec: StreamSpec, entry: ModelEntry) -> CheckedStream:
        """Resolve a live stream `spec` for `entry` as `videogen.streaming.stream.stream` will,
        minus the model load, and fill in the size and fps it resolves to (the worker's writer
        and prompt-switch clock read them from the stored spec)."""
        geometry = _geometry(entry)
        try:
            resolved = resolve_stream(spec, entry.preset, geometry)
            self._check_length(spec.seconds, "streams")
            if resolved.frames is not None:  # a stored stream has a length (the API requires one)
                shape = JobShape(resolved.width, resolved.height, resolved.fps, resolved.frames, resolved.steps)
                self._admit(shape, Asked(size=spec.size is not None, fps=spec.fps is not None,
                                         steps=spec.steps is not None), entry)  # fmt: skip
        except InvalidOption as exc:
            raise invalid(exc, entry) from None
        spec.size, spec.fps = (resolved.width, resolved.height), resolved.fps
        return CheckedStream(spec, resolved)

    def _admit(self, job: JobShape, asked: Asked, entry: ModelEntry) -> None:
        limits = effective_limits(entry.preset, self.settings.max_frame_pixels, self.settings.max_job_work)
        admit(job, asked, entry.preset, limits, entry.name)

    def _check_length(self, seconds: float | None, verb: str) -> None:
        if seconds is not None and seconds > self.settings.max_seconds:
            raise InvalidOption("seconds", seconds, f"this server {verb} at most {self.settings.max_seconds:g} s")


def invalid(exc: InvalidOption, entry: ModelEntry | None = None) -> APIError:
    """An `InvalidOption` as a 400 naming the API field; a model is named by its public name only."""
    param = API_PARAM.get(exc.option, exc.option)
    value = entry.name if param == "model" and entry is not None else exc.value
    return APIError(400, f"Invalid '{param}' ({value!r}): {exc.reason}.", param=param, code="invalid_value")


def _geometry(entry: ModelEntry) -> ModelGeometry:
    try:
        return geometry_for(entry.preset)
    except ModelLoadError as exc:
        raise _misconfigured(entry.name, exc) from None


def _misconfigured(name: str, exc: Exception) -> APIError:
    return APIError(400, f"model '{name}' is misconfigured on this server: {exc}", param="model",
                    code="model_not_available")  # fmt: skip

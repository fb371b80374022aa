"""The one resolution step: the CLI, the HTTP API and the Python API turn the same request into
the same resolved spec, defaults come from the spec and the preset only, and model rules are
checked without torch."""

from __future__ import annotations

import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

from videogen.config.geometry import BUILTIN_GEOMETRY, geometry_for
from videogen.config.presets import get_preset
from videogen.config.resolve import resolve_render, resolve_stream
from videogen.config.spec import RenderSpec, StreamSpec
from videogen.errors import InvalidOption

PROMPT = "a red circle moving right on a black background"


def _cli_args(*argv: str):
    from videogen.cli.main import build_parser

    return build_parser().parse_args(list(argv))


def _api(tmp_path):
    """What the API's routes use to turn a body into a job: the settings and the catalog, on a no-auth server."""
    from videogen.api.catalog import ModelCatalog
    from videogen.api.settings import ServiceSettings

    settings = ServiceSettings(data_dir=str(tmp_path), no_auth=True)
    return types.SimpleNamespace(settings=settings, catalog=ModelCatalog(settings))


def _api_render_job(tmp_path, body: dict):
    from videogen.api.schemas import CreateParams
    from videogen.api.videos import _new_job, spec_from_params

    svc = _api(tmp_path)
    params = CreateParams.model_validate(body)
    spec = spec_from_params(params)
    entry = svc.catalog.resolve(params.model)
    checked = svc.catalog.check(spec, entry)
    return checked, _new_job("tenant", entry, checked, params.prompt)


def _api_stream_job(tmp_path, body: dict):
    from videogen.api.schemas import CreateParams
    from videogen.api.videos import _new_stream_job

    return _new_stream_job(_api(tmp_path), "tenant", CreateParams.model_validate({**body, "stream": True}))


def test_a_render_resolves_alike_from_the_cli_the_api_and_python(tmp_path):
    from videogen.cli.render import spec_from_args

    cli = resolve_render(spec_from_args(_cli_args("render", PROMPT, "-o", "x.mp4", "--seconds", "2.5", "--steps", "3",
                                                  "--guidance", "2.5", "--size", "64x64")))  # fmt: skip
    checked, job = _api_render_job(
        tmp_path, {"prompt": PROMPT, "seconds": 2.5, "steps": 3, "guidance_scale": 2.5, "size": "64x64"}
    )
    worker = resolve_render(RenderSpec.from_dict(job.spec))  # what the worker renders from the stored job
    python = resolve_render(RenderSpec.single(PROMPT, 2.5, steps=3, guidance=2.5, size=(64, 64)))
    assert cli == checked.resolved == worker == python
    preset = get_preset("builtin")
    assert (python.model, python.settings.fps, python.settings.overlap_frames) == (
        "builtin",
        preset.fps,
        preset.overlap_frames,
    )
    assert (python.settings.steps, python.settings.guidance, python.attention) == (3, 2.5, preset.attention)
    assert python.plan.total_frames == 40 and python.total_steps == 3 * len(python.plan)


def test_a_stream_resolves_alike_from_the_cli_the_api_and_python(tmp_path):
    from videogen.cli.stream import spec_from_args

    cli = resolve_stream(spec_from_args(_cli_args("stream", PROMPT, "--seconds", "2", "--steps", "2", "-o", "a.mp4")))
    job = _api_stream_job(tmp_path, {"prompt": PROMPT, "seconds": 2, "steps": 2})
    api = resolve_stream(StreamSpec.from_dict(job.spec))  # what the worker streams from the stored job
    python = resolve_stream(StreamSpec(PROMPT, seconds=2.0, steps=2))
    assert cli == api == python
    assert (python.model, python.window_frames, python.chunk_frames) == ("builtin-causal", 6, 3)  # the spec's defaults
    assert (python.width, python.height, python.fps, python.frames, python.chunks) == (64, 64, 16.0, 32, 4)
    assert (job.steps_total, job.segments_total) == (python.frames, python.chunks)


def test_unset_cli_options_are_none_so_the_spec_and_preset_decide():
    args = _cli_args("stream", PROMPT, "-o", "a.mp4")
    for name in ("seconds", "model", "fps", "steps", "guidance", "seed", "chunk_frames", "sink_frames", "window_frames",
                 "device", "dtype"):  # fmt: skip
        assert getattr(args, name) is None, name
    args = _cli_args("render", PROMPT, "-o", "a.mp4")
    for name in ("seconds", "model", "seed", "negative_prompt", "device", "dtype", "steps", "fps"):
        assert getattr(args, name) is None, name


def test_the_builtin_geometry_is_the_one_its_codec_and_transformer_are_built_with(builtin_model):
    from videogen.config.geometry import geometry_of

    assert geometry_of(builtin_model) == BUILTIN_GEOMETRY == geometry_for(get_preset("builtin"))
    assert BUILTIN_GEOMETRY.size_multiple == (8, 8)


@pytest.mark.parametrize("variant", ["tiny_wan21", "tiny_wan22"])
def test_a_folders_geometry_read_from_its_configs_matches_the_loaded_model(variant, request):
    from videogen.config.geometry import geometry_of
    from videogen.config.presets import resolve_preset
    from videogen.models.loader import load_model

    folder = request.getfixturevalue(variant)
    assert geometry_for(resolve_preset(str(folder))) == geometry_of(
        load_model(str(folder), device="cpu", dtype="float32")
    )


@pytest.mark.parametrize("spec, option", [
    (RenderSpec.single("x", 1.0, size=(60, 64)), "size"),  # not a multiple of 8
    (RenderSpec.single("x", 1.01), "seconds"),  # 16.16 frames at 16 fps
    (RenderSpec.single("x", 4.0, segment_seconds=0.25), "segment_seconds"),  # cannot hold the 5-frame overlap
    (RenderSpec.single("x", 1.0, overlap_frames=6), "overlap_frames"),  # not 4k+1
])  # fmt: skip
def test_model_rules_are_named_by_the_resolution_step(spec, option):
    with pytest.raises(InvalidOption) as info:
        resolve_render(spec)
    assert info.value.option == option


@pytest.mark.parametrize("spec, option", [
    (StreamSpec("x", seconds=1.0, model="builtin"), "model"),  # not block-causal
    (StreamSpec("x", seconds=1.01), "seconds"),
    (StreamSpec("x", seconds=1.0, size=(64, 60)), "size"),
])  # fmt: skip
def test_stream_rules_are_named_by_the_resolution_step(spec, option):
    with pytest.raises(InvalidOption) as info:
        resolve_stream(spec)
    assert info.value.option == option


def test_resolution_imports_no_torch():
    code = ("import sys; from videogen.config.resolve import resolve_render, resolve_stream; "
            "from videogen.config.spec import RenderSpec, StreamSpec; "
            "resolve_render(RenderSpec.single('a red circle', 2.0)); resolve_stream(StreamSpec('a red circle', 2.0)); "
            "assert 'torch' not in sys.modules")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_cli_stream_and_the_api_stream_give_identical_frames(tmp_path):
    """`videogen stream` and the job the API makes of the same body (streamed the way the worker
    streams it) write the same frames. 2 s: the stream outgrows a 5-frame KV cache window."""
    from videogen.cli.main import main
    from videogen.io.video import VideoReader, VideoWriter
    from videogen.models.loader import load_model
    from videogen.streaming.stream import stream

    assert main(["stream", PROMPT, "--seconds", "2", "--steps", "2", "-q", "-o", str(tmp_path / "a.mp4")]) == 0
    job = _api_stream_job(tmp_path, {"prompt": PROMPT, "seconds": 2, "steps": 2})
    spec = StreamSpec.from_dict(job.spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no trained weights" where they are absent
        model = load_model(spec.model, device=spec.device, dtype=spec.dtype, attention="dense")
    writer = VideoWriter(tmp_path / "b.mp4", *spec.size, spec.fps)
    for chunk in stream(spec, model):
        writer.write(chunk.frames)
    writer.close()
    a, b = VideoReader(tmp_path / "a.mp4").read_all(), VideoReader(tmp_path / "b.mp4").read_all()
    assert a.shape == (32, 64, 64, 3) and np.array_equal(a, b)

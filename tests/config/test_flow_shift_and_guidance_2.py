"""Where a render's flow shift and its low-noise expert's guidance come from, as diffusers'
WanPipeline takes them: the folder's own scheduler shift unless the request or a preset writes
one; `guidance_2` (`--guidance-2`, API `guidance_scale_2`) for two-expert folders only. And the
prompt is cleaned as the reference cleans it. Frames against WanPipeline: tests/models/test_golden.py.

The resolution step reads only a folder's config files, so most folders here are config copies
of the tiny pipelines (`tests/tiny_wan.py`) with their scheduler or model index edited.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from videogen.config import presets
from videogen.config.resolve import resolve_render
from videogen.config.spec import RenderSpec
from videogen.errors import InvalidOption

CONFIGS = ("model_index.json", "scheduler/scheduler_config.json", "transformer/config.json", "vae/config.json")


def config_copy(folder: Path, dest: Path, scheduler: dict | None = None, index: dict | None = None) -> Path:
    """`folder`'s config files at `dest`, with `scheduler` and `index` merged into the scheduler
    config and model_index.json (a value None removes the key)."""
    for name in CONFIGS:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / name, dest / name)
    for name, changes in (("scheduler/scheduler_config.json", scheduler), ("model_index.json", index)):
        cfg = json.loads((dest / name).read_text())
        for key, value in (changes or {}).items():
            if value is None:
                cfg.pop(key, None)
            else:
                cfg[key] = value
        (dest / name).write_text(json.dumps(cfg))
    return dest


@pytest.fixture
def two_experts(tiny_wan21, tmp_path):
    """A Wan 2.2 A14B-style folder's configs: a `transformer_2` and a `boundary_ratio`."""
    index = {"transformer_2": ["diffusers", "WanTransformer3DModel"], "boundary_ratio": 0.875}
    return config_copy(tiny_wan21, tmp_path / "a14b", index=index)


def settings(model: str, **kw):
    return resolve_render(RenderSpec.single("a red circle", 1.0, model=model, size=(32, 32), **kw)).settings


def test_a_folder_is_sampled_with_its_own_schedulers_shift(tiny_wan21, tiny_wan22, tmp_path):
    unipc5 = config_copy(tiny_wan21, tmp_path / "unipc5", scheduler={"flow_shift": 5.0})
    euler7 = config_copy(tiny_wan22, tmp_path / "euler7", scheduler={"shift": 7.0})
    assert settings(str(tiny_wan21)).flow_shift == 3.0  # UniPC's `flow_shift`
    assert settings(str(unipc5)).flow_shift == 5.0  # was 3.0 for every 16-channel folder
    assert resolve_render(RenderSpec.single("x", 1.0, model=str(euler7))).settings.flow_shift == 7.0  # `shift`
    assert settings(str(unipc5), flow_shift=4.0).flow_shift == 4.0  # --flow-shift wins


def test_a_scheduler_config_without_a_shift_leaves_the_schedulers_own(tiny_wan21, tmp_path):
    bare = config_copy(tiny_wan21, tmp_path / "bare", scheduler={"flow_shift": None})
    assert settings(str(bare)).flow_shift is None  # make_scheduler(None) writes nothing over the config


def test_a_preset_that_writes_flow_shift_overrides_its_folder_and_one_that_does_not_takes_the_folders(
    tiny_wan21, tmp_path, presets_file
):
    folder = config_copy(tiny_wan21, tmp_path / "unipc5", scheduler={"flow_shift": 5.0})
    common = "kind: diffusers\n    size: 32x32\n    fps: 16\n    steps: 2\n    guidance: 5.0\n" \
             "    segment_seconds: 5.0\n    overlap_frames: 5\n"  # fmt: skip
    presets_file(
        f"presets:\n  written:\n    {common}    path: {folder}\n    flow_shift: 3.0\n"
        f"  unwritten:\n    {common}    path: {folder}\n"
    )
    assert settings("written").flow_shift == 3.0
    assert settings("unwritten").flow_shift == 5.0
    assert settings("written", flow_shift=8.0).flow_shift == 8.0


def test_guidance_2_defaults_to_guidance_on_a_two_expert_folder(two_experts):
    assert settings(str(two_experts)).guidance_2 == 5.0  # the folder's defaults: guidance 5.0
    assert settings(str(two_experts), guidance=4.0).guidance_2 == 4.0
    assert settings(str(two_experts), guidance=4.0, guidance_2=3.0).guidance_2 == 3.0


def test_a_presets_guidance_2_applies_to_its_two_expert_folder(two_experts, presets_file):
    presets_file(
        f"presets:\n  a14b:\n    kind: diffusers\n    path: {two_experts}\n    size: 32x32\n    fps: 16\n"
        "    steps: 2\n    guidance: 4.0\n    guidance_2: 3.0\n    segment_seconds: 5.0\n    overlap_frames: 5\n"
    )
    assert (settings("a14b").guidance, settings("a14b").guidance_2) == (4.0, 3.0)
    assert settings("a14b", guidance_2=2.5).guidance_2 == 2.5


def test_a_presets_guidance_2_out_of_range_is_refused_at_load(presets_file):
    from videogen.errors import ModelLoadError

    presets_file(
        "presets:\n  m:\n    kind: builtin\n    size: 64x64\n    fps: 16\n    steps: 2\n    guidance: 4.0\n"
        "    guidance_2: 80\n    segment_seconds: 2.0\n    overlap_frames: 5\n"
    )
    with pytest.raises(ModelLoadError, match="guidance_2 must be in"):
        presets.load_presets()


@pytest.mark.parametrize("model", ["builtin", "tiny_wan21"])
def test_guidance_2_is_refused_for_a_model_with_one_transformer(model, request):
    name = str(request.getfixturevalue(model)) if model.startswith("tiny") else model
    assert settings(name).guidance_2 is None
    with pytest.raises(InvalidOption) as info:
        settings(name, guidance_2=3.0)
    assert info.value.option == "guidance_2" and "two-expert" in info.value.reason


@pytest.mark.parametrize("value", [-1.0, 50.5, float("nan"), "high"])
def test_guidance_2_out_of_range_names_guidance_2(value):
    with pytest.raises(InvalidOption) as info:
        RenderSpec.single("x", 1.0, guidance_2=value).validate()
    assert info.value.option == "guidance_2"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--guidance-2", "60"], "--guidance-2=60.0: must be >= 0 and <= 50"),
        (["--guidance-2", "-2"], "--guidance-2=-2.0: must be >= 0 and <= 50"),
        (["--guidance-2", "3"], "--guidance-2=3.0: applies only to two-expert models"),  # the built-in model
    ],
)
def test_bad_guidance_2_is_one_cli_line_with_exit_2(tmp_path, capsys, args, message):
    from videogen.cli import main

    assert main(["render", "x", *args, "-o", str(tmp_path / "out.mp4")]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("videogen: error:") and message in lines[0], lines
    assert not list(tmp_path.iterdir())


def test_the_cli_passes_guidance_2_and_flow_shift_to_the_spec(two_experts):
    from videogen.cli.main import build_parser
    from videogen.cli.render import spec_from_args

    args = build_parser().parse_args(["render", "x", "--model", str(two_experts), "--guidance-2", "2.5",
                                      "--flow-shift", "6", "-o", "o.mp4"])  # fmt: skip
    spec = spec_from_args(args)
    assert (spec.guidance_2, spec.flow_shift) == (2.5, 6.0)
    assert resolve_render(spec).settings.guidance_2 == 2.5


def test_the_api_names_guidance_scale_2_in_its_400s(tiny_wan21, two_experts):
    pytest.importorskip("fastapi")
    from videogen.api.catalog import ModelCatalog, invalid
    from videogen.api.errors import APIError
    from videogen.api.schemas import CreateParams
    from videogen.api.settings import ServiceSettings
    from videogen.api.videos import spec_from_params

    with pytest.raises(InvalidOption) as info:
        spec_from_params(CreateParams(prompt="a red circle", guidance_scale_2=51)).validate()
    error = invalid(info.value)
    assert (error.status, error.param) == (400, "guidance_scale_2")

    catalog = ModelCatalog(ServiceSettings(models=f"one={tiny_wan21},two={two_experts}"))
    params = CreateParams(prompt="a red circle", size="32x32", seconds=1.0, guidance_scale_2=2.0, flow_shift=4.0)
    checked = catalog.check(spec_from_params(params), catalog.resolve("two"))
    assert (checked.resolved.settings.guidance_2, checked.resolved.settings.flow_shift) == (2.0, 4.0)
    with pytest.raises(APIError) as refused:  # a one-transformer model: refused at create time
        catalog.check(spec_from_params(params), catalog.resolve("one"))
    assert (refused.value.status, refused.value.param) == (400, "guidance_scale_2")


@pytest.mark.parametrize(
    "prompt",
    [
        "a cat &amp; a dog",
        "a cat &amp;amp; a dog",  # unescaped twice, as the reference does
        "  &lt;b&gt;bold&lt;/b&gt;\t\n red  circle ",
        "a\u00a0red\u3000circle\u2028moving",  # Unicode spaces
        "tab\x1fseparated",  # \x1f: str.isspace() but not Unicode White_Space (the `regex` package's \s)
        "",
    ],
)
def test_prompts_are_cleaned_as_wan_pipeline_cleans_them(prompt):
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean

    from videogen.models.text import clean_prompt

    assert clean_prompt(prompt) == prompt_clean(prompt)

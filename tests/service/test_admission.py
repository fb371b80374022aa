"""Admission control per model: sizes, frames and work per job come from the preset's `limits:`
(else the service's defaults), and a create beyond them is a 400 in OpenAI's error shape naming
the field, with the value and the limit, before any worker sees the job. Over real HTTP against
`videogen serve`, plus the shipped presets' limits checked without a server."""

from __future__ import annotations

import shutil

import openai
import pytest
from service_helpers import causal_preset, presets_yaml, tiny_preset, wait_done

from videogen.api.admission import Asked, JobShape, admit, effective_limits
from videogen.config.presets import load_presets
from videogen.errors import InvalidOption, ModelLoadError

ADMISSION_LIMITS = """\
    limits:
      max_pixels: 16384      # 128x128
      max_frames: 4000       # 500 s at 8 fps
      max_work: 5.0e+6       # 32x32 x 2,441 frames x 2 steps
"""
CAUSAL_LIMITS = """\
    limits:
      max_pixels: 16384
      max_work: 1.0e+8
"""
TWO_SHOTS = [{"prompt": "a red circle", "seconds": 200}, {"prompt": "a blue square", "seconds": 200}]
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # openai marks the Sora API deprecated
SERVICE_DEFAULT_PIXELS, SERVICE_DEFAULT_WORK = 1280 * 720, 20_000_000_000  # ServiceSettings' defaults


@pytest.fixture(scope="module")
def server(tmp_path_factory, make_server, tiny_model):
    d = tmp_path_factory.mktemp("admission")
    (d / "config").mkdir()
    (d / "config" / "models.yaml").write_text(
        presets_yaml(tiny_preset(tiny_model, extra=ADMISSION_LIMITS), causal_preset(extra=CAUSAL_LIMITS))
    )
    local = shutil.copytree(tiny_model, d / "local-wan")  # an operator's folder that no preset names
    s = make_server(d / "data", d / "server.log",
                    extra_env={"VIDEOGEN_CONFIG_DIR": str(d / "config"), "VIDEOGEN_MODELS": f"local={local}"})  # fmt: skip
    yield s
    s.stop()


@pytest.fixture
def alpha(server):
    with server.client("key-alpha") as c:
        yield c


def _refused(r, param: str, *words: str) -> dict:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, "invalid_value"), error
    for word in words:  # the value and the limit
        assert word in error["message"], error["message"]
    return error


@pytest.mark.parametrize(
    "body, param, words",
    [
        ({"size": "4096x4096"}, "size", ["'4096x4096'", "16,777,216 pixels", "16,384"]),
        ({"size": "1280x720"}, "size", ["'1280x720'", "921,600 pixels", "16,384"]),
        ({"size": "64x64", "seconds": 1, "steps": 1000}, "steps", ["(1000)", "1000 steps", "5e+06"]),
        ({"size": "128x128", "seconds": 30}, "size", ["'128x128'", "240 frames", "5e+06"]),
        ({"seconds": 400}, "seconds", ["(400.0)", "3200 frames x 2 steps", "5e+06"]),
        ({"seconds": 550}, "seconds", ["(550.0)", "4400 frames", "at most 4000 frames"]),
        ({"seconds": 300, "fps": 16}, "fps", ["(16.0)", "4800 frames at 16 fps", "4000"]),
        ({"shots": TWO_SHOTS}, "shots", ["3200 frames", "5e+06"]),  # 400 s in all
        ({"model": "local", "size": "1920x1088"}, "size", ["'1920x1088'", "921,600"]),  # the service's default
        ({"model": "local", "size": "1280x720", "steps": 1000}, "steps", ["(1000)", "2e+10"]),
    ],
)
def test_a_job_beyond_its_models_limits_is_a_400_naming_the_field(alpha, body, param, words):
    fields = {"prompt": "a red circle", "model": "tiny", **body}
    if "shots" in fields:
        del fields["prompt"]
    _refused(alpha.post("/v1/videos", json=fields), param, *words)


def test_the_openai_clients_720p_request_on_a_small_model_is_refused_naming_size(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="key-alpha", max_retries=0)
    before = [v.id for v in client.videos.list(limit=100).data]
    with pytest.raises(openai.BadRequestError) as refused:
        client.videos.create(prompt="a blue square moving left", model="tiny", seconds="4", size="1280x720")
    assert refused.value.param == "size" and "1280x720" in refused.value.message
    assert [v.id for v in client.videos.list(limit=100).data] == before  # nothing was queued


def test_jobs_within_the_limits_are_admitted_and_render(alpha):
    r = alpha.post("/v1/videos", json={"prompt": "a red circle", "model": "tiny", "size": "128x128", "seconds": 1})
    assert r.status_code == 200, r.text
    assert wait_done(alpha, r.json()["id"])["status"] == "completed"


def test_an_extension_over_the_budget_names_seconds_its_only_field(alpha):
    source = alpha.post("/v1/videos", json={"prompt": "a red circle", "model": "tiny", "size": "32x32",
                                            "seconds": 1, "steps": 4}).json()  # fmt: skip
    assert wait_done(alpha, source["id"])["status"] == "completed"
    # 2,000 new frames x 4 steps is over the budget; the source's steps (not the extension's to
    # choose) at the model's default would fit, yet only `seconds` can be changed here.
    r = alpha.post("/v1/videos/extensions", json={"prompt": "a blue square", "seconds": 250,
                                                  "video": {"id": source["id"]}})  # fmt: skip
    _refused(r, "seconds", "2000 frames x 4 steps")
    ok = alpha.post(
        "/v1/videos/extensions", json={"prompt": "a blue square", "seconds": 1, "video": {"id": source["id"]}}
    )
    assert ok.status_code == 200, ok.text
    assert wait_done(alpha, ok.json()["id"])["status"] == "completed"


@pytest.mark.parametrize(
    "body, param",
    [({"size": "4096x4096"}, "size"), ({"seconds": 60, "steps": 100}, "steps")],
)
def test_a_stream_beyond_its_models_limits_is_a_400_naming_the_field(alpha, body, param):
    fields = {"prompt": "a red circle", "model": "builtin-causal", "stream": True, "seconds": 1, **body}
    _refused(alpha.post("/v1/videos", json=fields), param)


# -- the shipped presets' limits (configs/models.yaml), without a server --------------------------
def _admit(preset_name: str, size: tuple[int, int] | None = None, seconds: float = 10.0, steps: int | None = None):
    preset = load_presets()[preset_name]
    (w, h), fps = size or preset.size, preset.fps
    job = JobShape(w, h, fps, round(seconds * fps), steps or preset.steps)
    limits = effective_limits(preset, SERVICE_DEFAULT_PIXELS, SERVICE_DEFAULT_WORK)
    admit(job, Asked(size=size is not None, fps=False, steps=steps is not None), preset, limits, preset_name)


@pytest.fixture
def shipped_presets(monkeypatch):
    monkeypatch.delenv("VIDEOGEN_CONFIG_DIR", raising=False)
    return load_presets()


def test_every_shipped_preset_admits_ten_seconds_at_its_own_defaults(shipped_presets):
    for name, preset in shipped_presets.items():
        assert preset.limits.max_work is not None and preset.limits.max_frames is not None, name
        _admit(name)
        (w, h) = preset.size
        if preset.limits.sizes:  # each orientation of the native size
            assert (w, h) in preset.limits.sizes and (h, w) in preset.limits.sizes, name


@pytest.mark.parametrize(
    "preset, size, admitted",
    [
        ("builtin", (128, 128), True),
        ("builtin", (1280, 720), False),
        ("builtin", (4096, 4096), False),
        ("builtin-causal", (512, 512), False),
        ("wan2.1-t2v-1.3b", (480, 832), True),
        ("wan2.1-t2v-1.3b", (1280, 720), False),
        ("wan2.1-t2v-14b", (720, 1280), True),
        ("wan2.1-t2v-14b", (832, 480), True),
        ("wan2.1-t2v-14b", (1920, 1088), False),
        ("wan2.2-ti2v-5b", (704, 1280), True),
        ("wan2.2-ti2v-5b", (1280, 720), False),
    ],
)
def test_the_shipped_presets_admit_their_models_sizes_only(shipped_presets, preset, size, admitted):
    if admitted:
        _admit(preset, size, seconds=4.0)
    else:
        with pytest.raises(InvalidOption) as refused:
            _admit(preset, size, seconds=4.0)
        assert refused.value.option == "size"


def test_the_shipped_budgets_bound_the_work_of_one_job(shipped_presets):
    _admit("builtin", seconds=600.0)  # the server's longest job at the built-in model's size ...
    with pytest.raises(InvalidOption):  # ... but not at four times the pixels
        _admit("builtin", (128, 128), seconds=600.0)
    for name in ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "wan2.2-ti2v-5b", "skyreels-v2-df-1.3b"):
        with pytest.raises(InvalidOption) as refused:  # five minutes of a Wan model: hours of a GPU
            _admit(name, seconds=300.0)
        assert refused.value.option == "seconds", name


@pytest.mark.parametrize(
    "limits, message",
    [
        ("{colour: red}", "unknown key 'colour'"),
        ("{max_work: -5}", "max_work must be a whole number >= 1"),
        ("{max_frames: 2.5}", "max_frames must be a whole number"),
        ("{sizes: [big]}", "expected WIDTHxHEIGHT"),
        ("{max_pixels: 1000}", "its size 64x64 is outside its limits"),
    ],
)
def test_a_preset_with_bad_limits_is_refused_at_load(tmp_path, monkeypatch, limits, message):
    (tmp_path / "models.yaml").write_text(
        "presets:\n  b:\n    kind: builtin\n    size: 64x64\n    fps: 16\n    steps: 2\n    guidance: 1.0\n"
        f"    segment_seconds: 2.0\n    overlap_frames: 5\n    limits: {limits}\n"
    )
    monkeypatch.setenv("VIDEOGEN_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ModelLoadError, match=message):
        load_presets()

"""The health gate's options: the preset's `health:` block, the spec's `retries`/`health_checks`,
the CLI's `--retries`/`--checks`/`--gate` and the API's fields resolve to one `HealthConfig`."""

from __future__ import annotations

import re

import pytest

from videogen.cli.main import build_parser
from videogen.cli.render import spec_from_args
from videogen.config.presets import HEALTH_CHECKS, load_presets
from videogen.config.resolve import resolve_render, resolve_stream
from videogen.config.spec import RenderSpec, StreamSpec
from videogen.errors import InvalidOption, ModelLoadError


def _cli(*argv):
    return spec_from_args(build_parser().parse_args(["render", "a red circle", "-o", "x.mp4", *argv]))


def test_every_preset_has_a_gate_and_the_defaults_come_from_it():
    presets = load_presets()
    # every check but `colours` (measured on the shipped weights, not adopted: docs/builtin-model.md)
    # and `copies` (`objects` replaced it)
    assert set(HEALTH_CHECKS) - set(presets["builtin"].health.checks) == {"colours", "copies"}
    assert presets["builtin"].health.retries == 2
    assert presets["wan2.1-t2v-1.3b"].health != presets["builtin"].health  # real models get their own thresholds
    resolved = resolve_render(RenderSpec.single("a red circle", 2.0))
    assert resolved.health == presets["builtin"].health
    stream = resolve_stream(StreamSpec("a red circle", seconds=2.0, retries=0, health_checks=["black", "frozen"]))
    assert (stream.health.retries, stream.health.checks) == (0, ("black", "frozen"))


def test_cli_options_map_to_the_spec():
    assert (_cli().retries, _cli().health_checks) == (None, None)
    spec = _cli("--retries", "5", "--checks", "black, frozen")
    assert (spec.retries, spec.health_checks) == (5, ["black", "frozen"])
    assert _cli("--gate", "off").health_checks == []
    for argv, option in ((("--retries", "11"), "retries"), (("--checks", "black,fuzzy"), "health_checks"),
                         (("--gate", "off", "--checks", "black"), "--checks")):  # fmt: skip
        with pytest.raises(InvalidOption) as info:
            _cli(*argv)
        assert info.value.option == option


def test_a_bad_health_block_in_the_presets_file_is_named(presets_file):
    presets_file(
        "presets:\n  m:\n    kind: builtin\n    size: 64x64\n    fps: 16\n    steps: 2\n    guidance: 1\n"
        "    segment_seconds: 2\n    overlap_frames: 5\n    health:\n      checks: [black, blurry]\n"
    )
    with pytest.raises(ModelLoadError, match="blurry"):
        load_presets()


@pytest.mark.parametrize(("field", "value", "says"), [
    ("give_up_after", "-1", "must be a whole number >= 0"), ("give_up_after", "1.5", "must be a whole number >= 0"),
    ("give_up_after", "two", "must be a whole number >= 0"), ("backtrack", "-1", "must be a whole number in 0..10"),
    ("backtrack", "11", "must be a whole number in 0..10"), ("backtrack", "1.5", "must be a whole number in 0..10"),
    ("retry_budget", "-0.5", "must be a share of the transformer evaluations"),
    ("retry_budget", "11", "must be a share of the transformer evaluations"), ("retry_budget", "lots", "must be a share of the transformer evaluations"),
    ("preview", "1", "must be a noise level in"), ("preview", "-0.1", "must be a noise level in"),
    ("preview", "soon", "must be a noise level in"), ("preview", "[0.9, 0.95]", "must list 1..4 falling noise levels"),
    ("preview", "[0.9, 0]", "must list 1..4 falling noise levels"), ("preview", "[]", "must list 1..4 falling noise levels"),
    ("preview", "[0.9, 0.8, 0.7, 0.6, 0.5]", "must list 1..4 falling noise levels"),
    ("preview_margin", "0.5", "must be a ratio in 1..10"), ("preview_margin", "11", "must be a ratio in 1..10"),
    ("preview_margin", "wide", "must be a ratio in 1..10"), ("preview_margin", "[2]", "must be a ratio in 1..10"),
    ("retry_guidance", "0.5", "must be a guidance scale in 1..50"), ("retry_guidance", "51", "must be a guidance scale in 1..50"),
    ("retry_guidance", "strong", "must be a guidance scale in 1..50"), ("retry_guidance", "[5]", "must be a guidance scale in 1..50"),
])  # fmt: skip
def test_a_bad_gate_bound_in_the_presets_file_is_named(presets_file, field, value, says):
    presets_file(
        "presets:\n  m:\n    kind: builtin\n    size: 64x64\n    fps: 16\n    steps: 2\n    guidance: 1\n"
        f"    segment_seconds: 2\n    overlap_frames: 5\n    health:\n      {field}: {value}\n"
    )
    with pytest.raises(ModelLoadError, match=re.escape(f"{field} {says}") + ".*" + re.escape(value)) as info:
        load_presets()
    assert "preset 'm'" in str(info.value)


def test_a_ladder_of_preview_levels_loads_as_falling_levels(presets_file):
    presets_file(
        "presets:\n  m:\n    kind: builtin\n    size: 64x64\n    fps: 16\n    steps: 2\n    guidance: 1\n"
        "    segment_seconds: 2\n    overlap_frames: 5\n    health:\n      preview: [0.953, 0.873]\n"
    )
    health = load_presets()["m"].health
    assert health.preview == (0.953, 0.873) and health.preview_levels == (0.953, 0.873)
    assert __import__("dataclasses").replace(health, preview=0.5).preview_levels == (0.5,)
    assert __import__("dataclasses").replace(health, preview=0).preview_levels == ()


def test_the_stream_preset_gives_up_on_a_failing_run_and_the_render_preset_does_not():
    # Measured at five minutes (docs/builtin-model.md, "Giving up on a failing run"): a stream
    # stalls while a chunk is re-generated; a render keeps every retry. The rest of the gate is shared.
    presets = load_presets()
    render, stream = presets["builtin"].health, presets["builtin-causal"].health
    assert (render.give_up_after, stream.give_up_after) == (0, 2)
    assert stream == __import__("dataclasses").replace(render, give_up_after=2, preview=0.0)
    # Previews (docs/builtin-model.md, "Previews", "A ladder"): the render's retries stop a sixth
    # or a third of the way when their predicted frames already fail (the first, cheap look only
    # when far past a threshold); a stream chunk's few steps are not worth a preview.
    assert (render.preview, render.preview_margin, stream.preview) == ((0.953, 0.885), 1.5, 0.0)
    assert resolve_stream(StreamSpec("a red circle", seconds=2.0)).health.give_up_after == 2


def test_api_fields_reach_the_spec_and_bad_ones_name_the_field():
    pytest.importorskip("fastapi")
    from videogen.api.catalog import invalid
    from videogen.api.schemas import CreateParams
    from videogen.api.videos import spec_from_params

    spec = spec_from_params(CreateParams(prompt="a red circle", retries=3, health_checks=[]))
    assert (spec.retries, spec.health_checks) == (3, [])
    for field, value in (("retries", 11), ("health_checks", ["nope"])):
        with pytest.raises(InvalidOption) as info:
            spec_from_params(CreateParams(prompt="a red circle", **{field: value})).validate()
        error = invalid(info.value)  # what the catalog's check answers: a 400 naming the field
        assert (error.status, error.param) == (400, field)

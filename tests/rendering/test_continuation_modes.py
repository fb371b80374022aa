"""Continuation modes: "clean" (prefix at timestep 0, per-token timesteps) and the training-free
"renoise" (prefix re-noised to every step's level, one timestep), chosen per model by what it was
trained for."""

import numpy as np
import pytest
import torch

from videogen import RenderSpec, render
from videogen.config.presets import get_preset, resolve_preset
from videogen.config.resolve import resolve_render
from videogen.errors import InvalidOption
from videogen.io.video import VideoReader
from videogen.models.loader import load_model
from videogen.rendering.render import RenderFinished, RenderStarted
from videogen.sampling.loop import denoise_segment, run_to_end, segment_noise

SIZES = {"tiny_wan21": (32, 32), "tiny_wan22": (64, 64)}


@pytest.fixture(scope="module")
def models(tiny_wan21, tiny_wan22):
    return {name: load_model(str(folder), device="cpu", dtype="float32")
            for name, folder in (("tiny_wan21", tiny_wan21), ("tiny_wan22", tiny_wan22))}  # fmt: skip


def _render(model, folder, size, path, continuation):
    spec = RenderSpec.single("a red cat moving left", 3.0, model=str(folder), size=size, fps=8, steps=3,
                             segment_seconds=2.0, overlap_frames=5, continuation=continuation)  # fmt: skip
    events = list(render(spec, path, model=model))
    assert isinstance(events[-1], RenderFinished)
    return events[0], VideoReader(path).read_all()


def test_each_model_defaults_to_the_continuation_it_was_trained_for(tiny_wan21, tiny_wan22):
    # Wan 2.1 T2V never saw a clean prefix beside noisy frames; Wan 2.2 TI2V (expand_timesteps),
    # SkyReels-V2 diffusion forcing and the built-in model were trained on it.
    assert resolve_preset(str(tiny_wan21)).continuation == "renoise"
    assert resolve_preset(str(tiny_wan22)).continuation == "clean"
    assert {name: get_preset(name).continuation for name in
            ("builtin", "wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "wan2.2-ti2v-5b", "skyreels-v2-df-1.3b")} == {
        "builtin": "clean", "wan2.1-t2v-1.3b": "renoise", "wan2.1-t2v-14b": "renoise",
        "wan2.2-ti2v-5b": "clean", "skyreels-v2-df-1.3b": "clean"}  # fmt: skip
    assert (
        resolve_render(RenderSpec.single("a cat", 2.0, model=str(tiny_wan21), size=(32, 32))).continuation == "renoise"
    )
    assert resolve_render(RenderSpec.single("a cat", 2.0)).continuation == "clean"
    override = RenderSpec.single("a cat", 2.0, model=str(tiny_wan21), size=(32, 32), continuation="clean")
    assert resolve_render(override).continuation == "clean"
    with pytest.raises(InvalidOption) as err:
        resolve_render(RenderSpec.single("a cat", 2.0, continuation="noisy"))
    assert err.value.option == "continuation"


@pytest.mark.parametrize("name", ["tiny_wan21", "tiny_wan22"])
def test_both_modes_render_a_chained_video_deterministically_and_differently(name, models, request, tmp_path):
    folder, model = request.getfixturevalue(name), models[name]
    started, renoise = _render(model, folder, SIZES[name], tmp_path / "renoise.mp4", "renoise")
    assert isinstance(started, RenderStarted) and len(started.plan) >= 2  # really chained
    _, again = _render(model, folder, SIZES[name], tmp_path / "again.mp4", "renoise")
    _, clean = _render(model, folder, SIZES[name], tmp_path / "clean.mp4", "clean")
    assert renoise.shape == clean.shape == (24, *SIZES[name][::-1], 3)
    assert (tmp_path / "renoise.mp4").read_bytes() == (tmp_path / "again.mp4").read_bytes()  # same inputs, same bytes
    assert np.array_equal(renoise, again)
    # the mode changes the video; segment 0 has no prefix, so only what follows the seam differs
    assert not np.array_equal(renoise, clean)


def _hooked_denoise(model, prefix, continuation, steps=3, frames=4):
    """denoise_segment with the transformer's inputs recorded: [(hidden_states, timestep)] per call."""
    seen = []

    def record(_module, _args, kwargs):
        seen.append((kwargs["hidden_states"].detach().clone(), kwargs["timestep"].detach().clone()))

    handle = model.transformer.register_forward_pre_hook(record, with_kwargs=True)
    try:
        out = run_to_end(denoise_segment(
            model, cond=model.prompt_encoder.encode(["a blue square"]), uncond=None, latent_frames=frames,
            latent_size=tuple(prefix.shape[3:]), prefix=prefix, steps=steps, guidance=1.0, flow_shift=3.0,
            seed=5, segment=1, continuation=continuation))  # fmt: skip
    finally:
        handle.remove()
    return out, seen


def test_renoise_sees_the_prefix_at_each_steps_noise_level_and_ends_on_it_exactly(models):
    model = models["tiny_wan21"]
    torch.manual_seed(0)
    prefix = torch.randn(1, 16, 2, 4, 4)  # the previous segment's last two latent frames
    out, seen = _hooked_denoise(model, prefix, "renoise")
    assert torch.equal(out[:, :, :2], prefix)  # the last step re-imposes the clean prefix, bit for bit
    scheduler = model.make_scheduler(3.0)
    scheduler.set_timesteps(3)
    noise = segment_noise((1, 16, 4, 4, 4), 5, 1)[:, :, :2]  # the segment's own noise there
    assert len(seen) == 3
    for (hidden, timestep), sigma in zip(seen, scheduler.sigmas[:3].tolist()):
        assert timestep.shape == (1,)  # one timestep for the whole latent: what Wan 2.1 was trained on
        expected = (1 - sigma) * prefix + sigma * noise
        torch.testing.assert_close(hidden[:, :, :2], expected, rtol=0, atol=1e-6)  # fp32 of the same sum
    assert 0 < scheduler.sigmas[2] < scheduler.sigmas[0]  # the levels really fall, so the check above bites


def test_clean_mode_holds_the_prefix_at_timestep_zero(models):
    model = models["tiny_wan21"]
    torch.manual_seed(0)
    prefix = torch.randn(1, 16, 2, 4, 4)
    out, seen = _hooked_denoise(model, prefix, "clean")
    assert torch.equal(out[:, :, :2], prefix)
    tokens_per_frame = (4 // 2) * (4 // 2)
    for hidden, timestep in seen:
        assert torch.equal(hidden[:, :, :2], prefix)
        assert timestep.shape == (1, 4 * tokens_per_frame)
        assert timestep[0, : 2 * tokens_per_frame].eq(0).all() and timestep[0, 2 * tokens_per_frame :].gt(0).all()


def test_the_cli_sets_continuation_and_image_fit(tiny_wan21, capsys):
    from videogen.cli.main import build_parser, main
    from videogen.cli.render import spec_from_args

    argv = ["render", "a cat", "-o", "x.mp4", "--model", str(tiny_wan21), "--size", "32x32"]
    spec = spec_from_args(build_parser().parse_args([*argv, "--continuation", "clean", "--image-fit", "contain"]))
    assert (resolve_render(spec).continuation, spec.image_fit) == ("clean", "contain")
    assert resolve_render(spec_from_args(build_parser().parse_args(argv))).continuation == "renoise"  # the folder's
    assert main([*argv, "--continuation", "noisy"]) == 2
    assert "--continuation" in capsys.readouterr().err

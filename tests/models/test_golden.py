"""Golden test: our render path against diffusers' own `WanPipeline` on the same folder.

Tiny Wan 2.1, Wan 2.2 TI2V and Wan 2.2 A14B (two experts) folders (`tests/tiny_wan.py`), fp32,
classifier-free guidance on, a few steps, the same starting noise: our render path draws a
segment's noise with `segment_noise(shape, seed, segment)`, and the pipeline is handed exactly
those latents (`latents=`). The frames must agree to >= 60 dB PSNR and the final latents to
1e-4. Both compute the same arithmetic, batched differently (we run the cond and uncond passes
as one batch of two, the pipeline as two calls), so they differ by float rounding only: latents
within 1e-6-4e-6, frames at 134-151 dB (fp32, peak 1), written uint8 frames identical or >= 92 dB
(docs/architecture.md, "Models"). A real difference fails: the folder's shift 5.0 overridden by
3.0 (the old behaviour) measured 35.2 dB. The tiny random VAE decodes to low-contrast frames, so
a change late in sampling moves the frames little (an ignored `guidance_scale_2` still measured
110 dB): the latent bound is what catches it (it moves the latents by > 1e-3).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_wan import A14B_BOUNDARY_RATIO, save_tiny_wan

from videogen.config.geometry import geometry_of
from videogen.config.resolve import resolve_render
from videogen.config.spec import RenderSpec
from videogen.models.loader import load_model
from videogen.rendering.segment import SegmentOutput, make_segment, segment_inputs
from videogen.sampling.loop import run_to_end, segment_noise
from videogen.stitch.stitcher import Stitcher

MIN_PSNR_DB = 60.0  # the bar; measured >= 92 dB (module docstring)
LATENT_TOLERANCE = 1e-4  # max |diff| of the final latents; fp32 rounding measured <= 4e-6
FRAMES, FPS, SEED = 9, 16.0, 7  # 9 frames: 3 latent frames, one segment


@pytest.fixture(scope="module")
def tiny_a14b(tmp_path_factory):
    return save_tiny_wan(tmp_path_factory.mktemp("golden") / "tiny-wan2.2-a14b", "wan2.2-a14b")


@pytest.fixture(scope="module")
def tiny_wan21_shift5(tmp_path_factory):
    """A Wan 2.1 folder whose scheduler config says `flow_shift: 5.0` (the presets' default is 3.0)."""
    return save_tiny_wan(tmp_path_factory.mktemp("golden") / "tiny-wan2.1-shift5", "wan2.1", flow_shift=5.0)


def render_segment(model, spec: RenderSpec) -> SegmentOutput:
    """`spec` (one segment) through our render path: resolve -> prompt embeddings -> denoise ->
    stitch, as `videogen.render()` runs it, minus the video writer (its encoding is lossy)."""
    resolved = resolve_render(spec, model.preset, geometry_of(model))
    assert len(resolved.plan) == 1
    inputs = segment_inputs(model, resolved, None, None)
    stitcher = Stitcher(resolved.settings.overlap_frames, spec.drift_config(), fps=resolved.settings.fps)
    steps = make_segment(resolved.plan.segments[0], inputs, stitcher, None, None, last=True, keep_state=False)
    return run_to_end(steps)


def pipeline_video(folder, model, prompt: str, size: tuple[int, int], steps: int, guidance: float,
                   **kw) -> tuple[np.ndarray, torch.Tensor]:  # fmt: skip
    """diffusers' `WanPipeline` on `folder` from the noise our render draws for segment 0:
    frames (T, H, W, 3) in [0, 1] and the final latents (1, C, F, h, w)."""
    from diffusers import WanPipeline

    w, h = size
    s = model.codec.spatial_factor
    noise = segment_noise((1, model.codec.latent_channels, (FRAMES - 1) // 4 + 1, h // s, w // s), SEED, 0)
    pipe = WanPipeline.from_pretrained(folder, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    final = {}

    def keep_latents(pipe, step, t, tensors):
        final["latents"] = tensors["latents"]
        return {}

    out = pipe(prompt=prompt, height=h, width=w, num_frames=FRAMES, num_inference_steps=steps,
               guidance_scale=guidance, latents=noise, output_type="np", callback_on_step_end=keep_latents,
               generator=torch.Generator().manual_seed(0), **kw)  # fmt: skip
    return out.frames[0], final["latents"]


def psnr(a: np.ndarray, b: np.ndarray, peak: float) -> float:
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(peak**2 / mse)


def assert_matches_pipeline(model, folder, prompt: str, size: tuple[int, int], steps: int, guidance: float,
                            guidance_2: float | None = None) -> SegmentOutput:  # fmt: skip
    """Render with our path and with WanPipeline; both agree to MIN_PSNR_DB. Returns our segment."""
    spec = RenderSpec.single(prompt, FRAMES / FPS, size=size, fps=FPS, steps=steps, guidance=guidance,
                             guidance_2=guidance_2, seed=SEED, health_checks=[], device="cpu", dtype="float32")  # fmt: skip
    ours = render_segment(model, spec)
    kw = {} if guidance_2 is None else {"guidance_scale_2": guidance_2}
    frames, latents = pipeline_video(folder, model, prompt, size, steps, guidance, **kw)
    assert ours.frames.shape == (FRAMES, size[1], size[0], 3) == frames.shape
    assert float((ours.latents - latents).abs().max()) <= LATENT_TOLERANCE
    ours_float = ((model.codec.decode(ours.latents)[0].permute(1, 2, 3, 0) + 1) / 2).clamp(0, 1).numpy()
    db = psnr(ours_float, frames, 1.0)
    assert db >= MIN_PSNR_DB, f"frames {db:.1f} dB from WanPipeline (latents differ by up to "\
                              f"{float((ours.latents - latents).abs().max()):.2e})"  # fmt: skip
    # What the video writer receives: uint8 frames after the stitcher, to the same bar.
    db8 = psnr(ours.frames, np.round(frames * 255), 255.0)
    assert db8 >= MIN_PSNR_DB, f"written frames {db8:.1f} dB from WanPipeline"
    # the figures docs/architecture.md quotes (`pytest tests/models/test_golden.py -s`)
    print(f"golden {model.preset.name} {prompt!r}: frames {db:.1f} dB, written frames {db8:.1f} dB, "
          f"latents max |diff| {float((ours.latents - latents).abs().max()):.1e}")  # fmt: skip
    return ours


@pytest.fixture(scope="module")
def wan21(tiny_wan21):
    return load_model(str(tiny_wan21), device="cpu", dtype="float32")


def test_wan21_renders_what_wan_pipeline_renders(wan21, tiny_wan21):
    assert_matches_pipeline(wan21, tiny_wan21, "a red circle moving left", (32, 32), steps=3, guidance=5.0)


def test_a_prompt_with_html_entities_gives_wan_pipelines_embeddings_and_frames(wan21, tiny_wan21):
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean

    prompt = "a cat &amp; a dog"
    # The reference cleans "&amp;" to "&": the tiny tokenizer reads a different token sequence
    # from the raw text, so a missing unescape would show as different embeddings.
    raw = wan21.prompt_encoder.tokenizer(prompt).input_ids
    cleaned = wan21.prompt_encoder.tokenizer(prompt_clean(prompt)).input_ids
    assert raw != cleaned
    assert torch.equal(wan21.prompt_encoder.encode([prompt]), wan21.prompt_encoder.encode([prompt_clean(prompt)]))
    assert_matches_pipeline(wan21, tiny_wan21, prompt, (32, 32), steps=2, guidance=5.0)


def test_a_folders_own_flow_shift_is_the_one_sampled(tiny_wan21_shift5):
    model = load_model(str(tiny_wan21_shift5), device="cpu", dtype="float32")
    assert resolve_render(RenderSpec.single("x", FRAMES / FPS, size=(32, 32), fps=FPS), model.preset,
                          geometry_of(model)).settings.flow_shift == 5.0  # fmt: skip
    assert_matches_pipeline(model, tiny_wan21_shift5, "a blue square", (32, 32), steps=3, guidance=5.0)


def test_wan22_ti2v_renders_what_wan_pipeline_renders(tiny_wan22):
    model = load_model(str(tiny_wan22), device="cpu", dtype="float32")
    assert model.expand_timesteps  # per-token timesteps, the TI2V path
    assert_matches_pipeline(model, tiny_wan22, "a green triangle on a white background", (64, 64), steps=3,
                            guidance=5.0)  # fmt: skip


def test_a_two_expert_folder_uses_the_low_noise_experts_own_guidance(tiny_a14b):
    model = load_model(str(tiny_a14b), device="cpu", dtype="float32")
    assert model.transformer_2 is not None and model.boundary_ratio == A14B_BOUNDARY_RATIO
    steps = 4
    scheduler = model.make_scheduler(3.0)
    scheduler.set_timesteps(steps)
    boundary = A14B_BOUNDARY_RATIO * scheduler.config.num_train_timesteps
    below = sum(float(t) < boundary for t in scheduler.timesteps)
    assert 0 < below < steps  # both experts denoise: 999, 900 high-noise; 750, 500 low-noise

    ours = assert_matches_pipeline(model, tiny_a14b, "a yellow car", (32, 32), steps, guidance=5.0, guidance_2=2.0)
    # and guidance_2 is what the match depends on: without it the low-noise steps use `guidance`
    plain = render_segment(model, RenderSpec.single("a yellow car", FRAMES / FPS, size=(32, 32), fps=FPS, steps=steps,
                                                    guidance=5.0, seed=SEED, health_checks=[]))  # fmt: skip
    assert float((plain.latents - ours.latents).abs().max()) > 1e-3

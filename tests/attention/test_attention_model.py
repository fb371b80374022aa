"""Sparse self-attention inside the Wan transformer: backends chosen at load, the policy, and
equivalence with dense attention at density 1.0."""

import warnings

import pytest
import torch

from videogen.attention.processor import WanSelfAttnProcessor, install_attention
from videogen.attention.sparse import SparsityPolicy, TileSparseAttention
from videogen.errors import InvalidOption
from videogen.models.loader import load_model
from videogen.sampling.loop import denoise_segment, run_to_end


def _load(attention, policy=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load_model("builtin", device="cpu", dtype="float32", attention=attention)
    if policy is not None:
        install_attention(model, attention, policy)
    return model


def _sample(model, prefix=None, steps=3):
    gen = denoise_segment(model, cond=model.prompt_encoder.encode(["a red circle moving right on a black background"]),
                          uncond=None, latent_frames=9, latent_size=(16, 16), prefix=prefix, steps=steps,
                          guidance=1.0, flow_shift=3.0, seed=1, segment=0)  # fmt: skip
    return run_to_end(gen)


ALL_SPARSE = dict(dense_step_fraction=0.0, dense_layers=())


@pytest.mark.parametrize("backend", ["sparse-cpu", "reference"])
def test_sparse_processors_at_density_one_equal_the_dense_model(backend):
    dense = _sample(_load("dense"))
    sparse = _sample(_load(backend, SparsityPolicy(density=1.0, **ALL_SPARSE)))
    # fp32 attention in two summation orders; through 4 layers x 3 steps the outputs agree to ~1e-5
    torch.testing.assert_close(sparse, dense, rtol=1e-4, atol=1e-4)


def test_low_density_changes_the_output_and_matches_the_reference_backend():
    policy = SparsityPolicy(density=0.125, tile=(4, 4, 4), **ALL_SPARSE)
    cpu, ref, dense = _sample(_load("sparse-cpu", policy)), _sample(_load("reference", policy)), _sample(_load("dense"))
    torch.testing.assert_close(cpu, ref, rtol=1e-4, atol=1e-4)
    assert (cpu - dense).abs().max() > 1e-3  # attention really was restricted


def test_policy_keeps_the_first_steps_and_listed_layers_dense(monkeypatch):
    model = _load("sparse-cpu", SparsityPolicy(density=0.25, dense_step_fraction=0.5, dense_layers=(0,)))
    calls = []
    from videogen import kernels

    real = kernels.sparse_video_attention

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels, "sparse_video_attention", spy)
    _sample(model, steps=4)
    # 4 steps, the first 2 dense; 4 layers, layer 0 dense -> 2 steps x 3 layers sparse
    assert len(calls) == 2 * 3
    procs = [b.attn1.processor for b in model.transformer.blocks]
    assert all(isinstance(p, WanSelfAttnProcessor) and isinstance(p.backend, TileSparseAttention) for p in procs)
    assert not any(isinstance(b.attn2.processor, WanSelfAttnProcessor) for b in model.transformer.blocks)


def test_the_triton_backend_needs_cuda_or_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(InvalidOption, match="attention='sparse-triton'"):
        _load("sparse-triton")


def test_a_tiny_wan_folder_renders_with_sparse_attention(tiny_wan21, tmp_path):
    from videogen import RenderSpec, render
    from videogen.io.video import probe

    model = load_model(str(tiny_wan21), device="cpu", dtype="float32", attention="sparse")
    spec = RenderSpec.single("a red cat", 1.0, model=str(tiny_wan21), size=(64, 64), fps=8, steps=2)
    list(render(spec, tmp_path / "s.mp4", model=model))
    assert probe(tmp_path / "s.mp4").num_frames == 8

"""LoRA adapters (`videogen.models.lora`): a LoRA built here for the built-in model and a tiny Wan
folder changes a render exactly as merging W + scale * (alpha/r) B A into the weights does, in
diffusers' and the original Wan repository's key names; a cached model switches adapters between
requests as fresh loads would and is the base model again after each; bad input is one clear error."""

from __future__ import annotations

import copy
import dataclasses
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from videogen import RenderSpec, render
from videogen.cli.main import main
from videogen.config.spec import Lora, approved_lora
from videogen.errors import InvalidOption
from videogen.io.video import VideoReader
from videogen.models.loader import load_model
from videogen.models.lora import lora_adapters
from videogen.workers.models import ModelCache

# diffusers' module name -> the original Wan repository's (`WanModel`)
ORIGINAL = {"attn1.to_q": "self_attn.q", "attn1.to_k": "self_attn.k", "attn1.to_v": "self_attn.v",
            "attn1.to_out.0": "self_attn.o", "attn2.to_q": "cross_attn.q", "attn2.to_k": "cross_attn.k",
            "attn2.to_v": "cross_attn.v", "attn2.to_out.0": "cross_attn.o", "ffn.net.0.proj": "ffn.0",
            "ffn.net.2": "ffn.2"}  # fmt: skip
TARGETS = ["blocks.0.attn1.to_q", "blocks.0.attn2.to_k", "blocks.1.attn1.to_out.0", "blocks.1.ffn.net.0.proj",
           "blocks.1.ffn.net.2"]  # fmt: skip


def make_factors(transformer, targets=TARGETS, rank=4, seed=0, std=0.15) -> dict[str, tuple[torch.Tensor, ...]]:
    """Random low-rank factors per linear: A (r, in), B (out, r)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name in targets:
        layer = transformer.get_submodule(name)
        a = torch.randn(rank, layer.in_features, generator=g) * std
        b = torch.randn(layer.out_features, rank, generator=g) * std
        out[name] = (a, b)
    return out


def save_lora(path, factors, style: str, alpha: float | None = None):
    """`style`: "diffusers" (transformer.<module>.lora_A/B), "original" (diffusion_model.<wan name>.lora_A/B)
    or "original-down-up" (lora_down/lora_up with an `alpha`, as kohya-style trainers write)."""
    state = {}
    for name, (a, b) in factors.items():
        if style == "diffusers":
            stem = f"transformer.{name}"
            state[f"{stem}.lora_A.weight"], state[f"{stem}.lora_B.weight"] = a.clone(), b.clone()
            continue
        block, module = name.split(".", 2)[1], name.split(".", 2)[2]
        stem = f"diffusion_model.blocks.{block}.{ORIGINAL[module]}"
        down, up = ("lora_down", "lora_up") if style == "original-down-up" else ("lora_A", "lora_B")
        state[f"{stem}.{down}.weight"], state[f"{stem}.{up}.weight"] = a.clone(), b.clone()
        if alpha is not None:
            state[f"{stem}.alpha"] = torch.tensor(float(alpha))
    save_file(state, str(path))
    return str(path)


def merge(state: dict[str, torch.Tensor], factors, scale: float, prefix: str = "") -> dict[str, torch.Tensor]:
    """The reference: W + scale * B A on every adapted linear (fp32)."""
    merged = dict(state)
    for name, (a, b) in factors.items():
        key = f"{prefix}{name}.weight"
        merged[key] = (state[key].double() + scale * (b.double() @ a.double())).to(state[key].dtype)
    return merged


@pytest.fixture(scope="module")
def builtin(builtin_model):
    """A private copy of the session's built-in model: adapters stay cached on the one they touch."""
    return copy.deepcopy(builtin_model)


def merged_model(model, factors, scale):
    """`model` (never adapted: PEFT renames the layers it wraps) with the factors merged into a copy."""
    transformer = copy.deepcopy(model.transformer)
    transformer.load_state_dict(merge(transformer.state_dict(), factors, scale))
    return dataclasses.replace(model, transformer=transformer)


def frames(spec, model, path):
    list(render(spec, path, model=model, thumbnail=False))
    return VideoReader(path).read_all().astype(np.int16)


def spec_for(**kw):
    return RenderSpec.single("a red circle moving right on a black background", 1.0, steps=2, seed=3,
                             device="cpu", dtype="float32", **kw)  # fmt: skip


STYLES = [  # (file style, alpha, scale, the scale the merged weights take)
    ("diffusers", None, 0.7, 0.7),
    ("original", None, 1.0, 1.0),
    ("original-down-up", 8.0, 0.5, 0.5 * 8.0 / 4),  # alpha / rank: 8 / 4
]


def test_a_lora_renders_as_its_weights_merged_into_the_model_would(builtin, builtin_model, tmp_path):
    factors = make_factors(builtin.transformer, std=0.25)
    path = save_lora(tmp_path / "style.safetensors", factors, "original-down-up", 8.0)
    with_lora = frames(spec_for(loras=[Lora(path, 0.5)]), builtin, tmp_path / "lora.mp4")
    merged = frames(spec_for(), merged_model(builtin_model, factors, 0.5 * 8.0 / 4), tmp_path / "merged.mp4")
    base = frames(spec_for(), builtin, tmp_path / "base.mp4")
    # fp32: the LoRA path (x W^T + s (x A^T) B^T) and the merged weights differ only by rounding
    # (transformer outputs within 1e-5, test below); after decoding and H.264 that is at most a
    # code value or two on a few pixels, while the LoRA itself moves the picture far more.
    off, moved = np.abs(with_lora - merged), np.abs(with_lora - base).mean()
    assert off.mean() < 0.05 and off.max() <= 4 and moved > 1.0, (off.mean(), off.max(), moved)


@pytest.mark.parametrize("style, alpha, scale, effective", STYLES)
def test_the_adapted_transformer_equals_the_merged_one_to_fp32_rounding(builtin, builtin_model, tmp_path, style,
                                                                        alpha, scale, effective):  # fmt: skip
    factors = make_factors(builtin.transformer, seed=1)
    path = save_lora(tmp_path / "a.safetensors", factors, style, alpha)
    merged = merged_model(builtin_model, factors, effective).transformer
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, builtin.transformer.config.in_channels, 2, 8, 8, generator=g)
    text = torch.randn(1, 6, builtin.transformer.config.text_dim, generator=g)
    t = torch.tensor([600.0])
    with torch.no_grad():
        base = builtin.transformer(x, t, text, return_dict=False)[0]
        with lora_adapters(builtin, [Lora(path, scale)]):
            adapted = builtin.transformer(x, t, text, return_dict=False)[0]
        after = builtin.transformer(x, t, text, return_dict=False)[0]
        reference = merged(x, t, text, return_dict=False)[0]
    assert torch.allclose(adapted, reference, rtol=0, atol=1e-5), (adapted - reference).abs().max()
    assert (adapted - base).abs().max() > 1e-2  # the LoRA does change the output
    assert torch.equal(after, base)  # and leaves the base model exactly as it was


def test_a_tiny_wan_folder_with_a_lora_renders_like_a_folder_with_merged_weights(tiny_wan21, tmp_path, capsys):
    """Through the CLI: `--lora FILE:SCALE` on the folder vs the same folder with the LoRA merged in."""
    model = load_model(str(tiny_wan21), device="cpu", dtype="float32")
    factors = make_factors(model.transformer, std=0.5)
    path = save_lora(tmp_path / "wan.safetensors", factors, "original-down-up", alpha=2.0)
    merged_folder = tmp_path / "merged"
    shutil.copytree(tiny_wan21, merged_folder)
    weights = merged_folder / "transformer" / "diffusion_pytorch_model.safetensors"
    save_file(merge(load_file(str(weights)), factors, 1.5 * 2.0 / 4), str(weights))

    def cli(folder, out, *extra):
        args = ["render", "a red cat moving left", "--model", str(folder), "--size", "32x32", "--fps", "8",
                "--seconds", "1", "--steps", "2", "--device", "cpu", "--dtype", "float32", "-q",
                "-o", str(out)]  # fmt: skip
        assert main([*args, *extra]) == 0, capsys.readouterr().err
        return VideoReader(out).read_all().astype(np.int16)

    with_lora = cli(tiny_wan21, tmp_path / "lora.mp4", "--lora", f"{path}:1.5")
    merged = cli(merged_folder, tmp_path / "merged.mp4")
    base = cli(tiny_wan21, tmp_path / "base.mp4")
    off, moved = np.abs(with_lora - merged), np.abs(with_lora - base).mean()
    assert off.mean() < 0.05 and off.max() <= 4 and moved > 1.0, (off.mean(), off.max(), moved)


def test_one_model_cache_switches_loras_between_requests_as_fresh_loads_would(tiny_wan21, tmp_path):
    probe = load_model(str(tiny_wan21), device="cpu", dtype="float32")
    a = save_lora(tmp_path / "a.safetensors", make_factors(probe.transformer, seed=1, std=0.5), "diffusers")
    b = save_lora(tmp_path / "b.safetensors", make_factors(probe.transformer, TARGETS[2:], seed=2, std=0.5),
                  "original", alpha=None)  # fmt: skip
    requests = {"base": [], "a": [Lora(a, 1.0)], "b": [Lora(b, 0.6)], "ab": [Lora(a, 0.5), Lora(b, 1.2)]}

    def spec(loras):
        return RenderSpec.single("a blue square", 1.0, model=str(tiny_wan21), size=(32, 32), fps=8, steps=2,
                                 device="cpu", dtype="float32", loras=loras)  # fmt: skip

    cache = ModelCache()
    cached = cache.get(str(tiny_wan21), device="cpu", dtype="float32", attention=None)
    order = ["base", "a", "b", "ab", "base", "a"]  # one worker, one model, one request after another
    served = [frames(spec(requests[name]), cached, tmp_path / f"w{i}.mp4") for i, name in enumerate(order)]
    assert len(cache) == 1
    for name in requests:
        fresh = load_model(str(tiny_wan21), device="cpu", dtype="float32")
        expected = frames(spec(requests[name]), fresh, tmp_path / f"fresh-{name}.mp4")
        for got in (v for n, v in zip(order, served, strict=True) if n == name):
            assert np.array_equal(got, expected), name  # bit for bit: an inactive adapter adds nothing
    assert not np.array_equal(served[1], served[0]) and not np.array_equal(served[2], served[1])


def test_a_stream_with_a_lora_equals_the_stream_of_the_merged_model_and_leaves_the_base_as_it_was(tmp_path):
    from videogen.config.spec import StreamSpec
    from videogen.streaming.stream import stream

    causal = load_model("builtin-causal", device="cpu", dtype="float32", attention="dense")
    factors = make_factors(causal.transformer, std=0.25)
    merged = merged_model(causal, factors, 0.6)
    path = save_lora(tmp_path / "causal.safetensors", factors, "original")

    def run(model, loras=()):
        spec = StreamSpec("a red circle moving right", seconds=0.5, steps=2, health_checks=[], loras=list(loras))
        return np.concatenate([chunk.frames for chunk in stream(spec, model)]).astype(np.int16)

    base = run(causal)
    with_lora, reference, again = run(causal, [Lora(path, 0.6)]), run(merged), run(causal)
    # uint8 frames straight from the decoder (no video codec): fp32 rounding moves a code value at most
    assert np.abs(with_lora - reference).max() <= 1 and np.abs(with_lora - base).mean() > 1.0
    assert np.array_equal(again, base)


# -- bad input ----------------------------------------------------------------------------------
def test_a_lora_for_another_model_names_its_first_mismatched_key(builtin, tmp_path):
    factors = make_factors(builtin.transformer, TARGETS[:1])
    factors["blocks.7.attn1.to_q"] = factors["blocks.0.attn1.to_q"]  # the built-in model has 4 blocks
    path = save_lora(tmp_path / "deep.safetensors", factors, "diffusers")
    with pytest.raises(InvalidOption) as exc:
        list(render(spec_for(loras=[Lora(path)]), tmp_path / "x.mp4", model=builtin))
    assert exc.value.option == "loras" and "transformer.blocks.7.attn1.to_q.lora_A.weight" in exc.value.reason
    assert "no such layer" in exc.value.reason and not (tmp_path / "x.mp4").exists()

    wide = {"blocks.1.attn2.to_v": (torch.randn(4, 200), torch.randn(128, 4))}  # a 200-wide model's LoRA
    path = save_lora(tmp_path / "wide.safetensors", wide, "original")
    with pytest.raises(InvalidOption, match=r"blocks\.1\.attn2\.to_v\.lora_A\.weight: shape \[4, 200\]"):
        list(render(spec_for(loras=[Lora(path)]), tmp_path / "x.mp4", model=builtin))


@pytest.mark.parametrize("loras, reason", [
    ([Lora("/nonexistent/x.safetensors")], "no such LoRA file"),
    ([Lora("style.pt")], "must be a .safetensors file"),
    ([Lora("{path}", 7.0)], "must be >= -5 and <= 5"),
    ([Lora("{path}", float("nan"))], "finite"),
    ([Lora("{path}"), Lora("{path}", 0.5)], "given twice"),
])  # fmt: skip
def test_bad_lora_options_are_refused_before_any_model_loads(tmp_path, loras, reason):
    path = tmp_path / "ok.safetensors"
    save_file({"x": torch.zeros(1)}, str(path))
    loras = [Lora(lora.path.format(path=path), lora.scale) for lora in loras]
    with pytest.raises(InvalidOption, match=reason) as exc:
        RenderSpec.single("a red circle", 1.0, loras=loras).validate()
    assert exc.value.option == "loras"


def test_the_cli_reports_a_bad_lora_in_one_line_and_exits_2(builtin, tmp_path, capsys):
    path = save_lora(tmp_path / "deep.safetensors", {"blocks.9.ffn.net.2": (torch.zeros(2, 512), torch.zeros(128, 2))},
                     "diffusers")  # fmt: skip
    out = str(tmp_path / "x.mp4")
    for lora, expected in [(f"{path}:0.5", "blocks.9.ffn.net.2.lora_A.weight"),
                           (f"{path}:lots", "scale 'lots' is not a number"),
                           (f"{tmp_path}/missing.safetensors", "no such LoRA file"),
                           (f"{path}:9", "must be >= -5 and <= 5")]:  # fmt: skip
        assert main(["render", "a red circle", "--seconds", "1", "--steps", "1", "--device", "cpu", "-q",
                     "--lora", lora, "-o", out]) == 2  # fmt: skip
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("videogen: error: --lora=") and expected in err[0], err


def test_a_served_lora_name_must_stay_inside_the_approved_folder(tmp_path):
    folder = tmp_path / "loras"
    (folder / "styles").mkdir(parents=True)
    (folder / "styles" / "ink.safetensors").write_bytes(b"")
    (tmp_path / "secret.safetensors").write_bytes(b"")
    (folder / "link.safetensors").symlink_to(tmp_path / "secret.safetensors")
    assert approved_lora(folder, "styles/ink.safetensors") == str((folder / "styles" / "ink.safetensors").resolve())
    for name, reason in [("../secret.safetensors", "inside the server's LoRA folder"),
                         ("styles/../../secret.safetensors", "inside the server's LoRA folder"),
                         (str(tmp_path / "secret.safetensors"), "inside the server's LoRA folder"),
                         ("link.safetensors", "inside the server's LoRA folder"),
                         ("nope.safetensors", "no such LoRA on this server"),
                         ("", "must be the name of a file")]:  # fmt: skip
        with pytest.raises(InvalidOption, match=reason) as exc:
            approved_lora(folder, name)
        assert exc.value.option == "loras"
    with pytest.raises(InvalidOption, match="VIDEOGEN_LORA_DIR"):
        approved_lora(None, "styles/ink.safetensors")

"""The render-time estimate (`videogen.config.estimate`) and `videogen render`'s --yes gate."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from videogen.cli.main import main
from videogen.config.estimate import (
    BUILTIN_SHAPE,
    CONFIRM_SECONDS,
    TransformerShape,
    format_duration,
    render_cost,
    transformer_shape,
)
from videogen.config.geometry import geometry_for
from videogen.config.presets import resolve_preset
from videogen.config.resolve import resolve_render
from videogen.config.spec import RenderSpec
from videogen.errors import ModelLoadError

# Wan 2.1 T2V 1.3B's configs (the fields geometry and shape read): a folder with configs only, no weights.
WAN_13B_TRANSFORMER = dict(_class_name="WanTransformer3DModel", patch_size=[1, 2, 2], num_attention_heads=12,
                           attention_head_dim=128, in_channels=16, out_channels=16, text_dim=4096, freq_dim=256,
                           ffn_dim=8960, num_layers=30)  # fmt: skip


@pytest.fixture
def wan13b_configs(tmp_path):
    folder = tmp_path / "wan13b-configs"
    (folder / "transformer").mkdir(parents=True)
    (folder / "vae").mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline"}))
    (folder / "transformer" / "config.json").write_text(json.dumps(WAN_13B_TRANSFORMER))
    (folder / "vae" / "config.json").write_text(json.dumps({"z_dim": 16}))
    return folder


def test_the_flop_count_matches_torchs_flop_counter_on_a_wan_transformer():
    """Linear layers and attention of a real forward, counted by torch (SDPA on its math path)."""
    import torch
    from diffusers import WanTransformer3DModel
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=16,
                                  out_channels=16, text_dim=64, freq_dim=32, ffn_dim=256, num_layers=2,
                                  cross_attn_norm=True, qk_norm="rms_norm_across_heads").eval()  # fmt: skip
    x = torch.randn(2, 16, 4, 16, 16)  # (B, C, F, h, w): 4 x 8 x 8 = 256 tokens per row
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x, torch.tensor([500.0, 500.0]), torch.randn(2, 16, 64), return_dict=False)
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    shape = TransformerShape(layers=2, width=64, ffn=256, text_tokens=16)
    ours = shape.flops_per_forward(256, batch=2)
    attention = 2 * 2 * (4 * 256 * 256 * 64 + 4 * 256 * 16 * 64)  # batch x layers x (self + cross)
    assert counts["aten.bmm"] == attention  # attention exactly
    # The rest is the projections and feed-forward; the embedders and output head, which the
    # estimate leaves out, add 4.5% here (less in wider models).
    assert 0.9 < ours / counter.get_total_flops() <= 1.0


def test_the_builtin_shape_is_the_builtin_models_config():
    from videogen.models.builtin import TRANSFORMER_CONFIG, BuiltinPromptEncoder

    cfg = TRANSFORMER_CONFIG
    assert BUILTIN_SHAPE.layers == cfg["num_layers"] and BUILTIN_SHAPE.ffn == cfg["ffn_dim"]
    assert BUILTIN_SHAPE.width == cfg["num_attention_heads"] * cfg["attention_head_dim"]
    assert BUILTIN_SHAPE.text_tokens == BuiltinPromptEncoder().max_length


def test_the_builtin_shape_follows_its_weights_files_depth_and_width(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    from videogen.models.builtin import WEIGHTS_FILE, weights_size

    assert transformer_shape(resolve_preset("builtin")).layers == weights_size(WEIGHTS_FILE)[0]
    deeper = tmp_path / "deeper.safetensors"  # a grown model's key layout (`train builtin --layers 6`)
    save_file({f"transformer.blocks.{i}.ffn.net.2.bias": torch.zeros(2) for i in range(6)}, str(deeper))
    monkeypatch.setenv("VIDEOGEN_BUILTIN_WEIGHTS", str(deeper))
    assert transformer_shape(resolve_preset("builtin")) == replace(BUILTIN_SHAPE, layers=6)
    wider = tmp_path / "wider.safetensors"  # `train builtin --heads 8`: twice the width and feed-forward
    save_file({"transformer.blocks.0.ffn.net.2.bias": torch.zeros(256),
               "transformer.scale_shift_table": torch.zeros(1, 2, 256)}, str(wider))  # fmt: skip
    monkeypatch.setenv("VIDEOGEN_BUILTIN_WEIGHTS", str(wider))
    assert transformer_shape(resolve_preset("builtin")) == replace(BUILTIN_SHAPE, layers=1, width=256, ffn=1024)
    monkeypatch.setenv("VIDEOGEN_BUILTIN_WEIGHTS", str(tmp_path / "missing.safetensors"))
    assert transformer_shape(resolve_preset("builtin")) == BUILTIN_SHAPE  # seeded random weights: the default
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    monkeypatch.setenv("VIDEOGEN_BUILTIN_WEIGHTS", str(tmp_path / "bad.safetensors"))
    with pytest.raises(ModelLoadError, match="bad.safetensors"):
        transformer_shape(resolve_preset("builtin"))


def test_a_five_second_480p_render_of_wan_13b_on_this_cpu_takes_days(wan13b_configs):
    preset = resolve_preset(str(wan13b_configs))
    assert transformer_shape(preset) == TransformerShape(layers=30, width=1536, ffn=8960, text_tokens=512)
    resolved = resolve_render(RenderSpec.single("a cat", 5.0, model=str(wan13b_configs)))
    cpu = render_cost(resolved, transformer_shape(preset), geometry_for(preset), "cpu", cores=2)
    assert cpu.forwards == 50 and cpu.needs_confirmation and cpu.seconds > 86400
    assert 2.5e16 < cpu.flops < 3.2e16  # 21 x 30 x 52 tokens, 30 layers, guidance batch 2, 50 steps
    gpu = render_cost(resolved, transformer_shape(preset), geometry_for(preset), "cuda")
    assert not gpu.needs_confirmation and gpu.seconds < cpu.seconds / 100
    assert "days on cpu (2 cores)" in cpu.describe()


def test_a_default_builtin_render_needs_no_confirmation():
    preset = resolve_preset("builtin")
    resolved = resolve_render(RenderSpec.single("a red circle", 5.0))
    cost = render_cost(resolved, transformer_shape(preset), geometry_for(preset), "cpu", cores=1)
    assert cost.seconds < 60 < CONFIRM_SECONDS


def test_render_refuses_an_hours_long_render_without_yes_before_loading(wan13b_configs, tmp_path, capsys):
    argv = ["render", "a cat", "--model", str(wan13b_configs), "--device", "cpu", "-o", str(tmp_path / "o.mp4")]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--yes" in lines[0] and "days on cpu" in lines[0]
    # With --yes it goes on to load the model: this folder holds configs only, so the loader says so.
    assert main([*argv, "--yes"]) == 2
    err = capsys.readouterr().err
    assert "incomplete" in err and "--yes" not in err


@pytest.mark.parametrize("seconds, text", [(3, "3 s"), (720, "12 min"), (3 * 3600 + 1800, "3.5 h"),
                                           (3 * 86400, "3.0 days")])  # fmt: skip
def test_durations_read_naturally(seconds, text):
    assert format_duration(seconds) == text

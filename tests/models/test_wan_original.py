"""Checkpoints in the original Wan naming (Self-Forcing, CausVid, LongLive): converted, loaded, rendered.

A tiny `WanTransformer3DModel` is written to disk under original-Wan names by the table below,
written from the original `WanModel`'s module tree independently of the converter, in the
packagings those projects publish.
"""

import re

import pytest
import torch
from safetensors.torch import save_file
from tiny_wan import tiny_transformer_config

from videogen.errors import InvalidOption
from videogen.models.loader import load_model
from videogen.models.wan_original import convert_wan_original_state_dict, infer_wan_config, load_wan_original

# diffusers name -> original Wan name, outside the blocks
ORIGINAL_TOP = {
    "patch_embedding": "patch_embedding",
    "condition_embedder.time_embedder.linear_1": "time_embedding.0",
    "condition_embedder.time_embedder.linear_2": "time_embedding.2",
    "condition_embedder.time_proj": "time_projection.1",
    "condition_embedder.text_embedder.linear_1": "text_embedding.0",
    "condition_embedder.text_embedder.linear_2": "text_embedding.2",
    "condition_embedder.image_embedder.norm1": "img_emb.proj.0",
    "condition_embedder.image_embedder.ff.net.0.proj": "img_emb.proj.1",
    "condition_embedder.image_embedder.ff.net.2": "img_emb.proj.3",
    "condition_embedder.image_embedder.norm2": "img_emb.proj.4",
    "condition_embedder.image_embedder.pos_embed": "img_emb.emb_pos",
    "proj_out": "head.head",
    "scale_shift_table": "head.modulation",
}
# ... and inside `blocks.N.`
ORIGINAL_BLOCK = {
    "attn1.to_q": "self_attn.q",
    "attn1.to_k": "self_attn.k",
    "attn1.to_v": "self_attn.v",
    "attn1.to_out.0": "self_attn.o",
    "attn1.norm_q": "self_attn.norm_q",
    "attn1.norm_k": "self_attn.norm_k",
    "attn2.to_q": "cross_attn.q",
    "attn2.to_k": "cross_attn.k",
    "attn2.to_v": "cross_attn.v",
    "attn2.to_out.0": "cross_attn.o",
    "attn2.norm_q": "cross_attn.norm_q",
    "attn2.norm_k": "cross_attn.norm_k",
    "attn2.add_k_proj": "cross_attn.k_img",
    "attn2.add_v_proj": "cross_attn.v_img",
    "attn2.norm_added_k": "cross_attn.norm_k_img",
    "norm2": "norm3",
    "ffn.net.0.proj": "ffn.0",
    "ffn.net.2": "ffn.2",
    "scale_shift_table": "modulation",
}
# FLF2V-style image conditioning: CLIP tokens of 2 images (2 x 4 tokens, 20 wide)
I2V = dict(image_dim=20, added_kv_proj_dim=24, pos_embed_seq_len=8)


def original_name(key: str) -> str:
    """The original Wan name of a diffusers `WanTransformer3DModel` parameter."""
    if key.startswith("blocks."):
        _, index, rest = key.split(".", 2)
        return f"blocks.{index}.{_lookup(ORIGINAL_BLOCK, rest)}"
    return _lookup(ORIGINAL_TOP, key)


def _lookup(table: dict, name: str) -> str:
    if name in table:  # a parameter of its own, e.g. "scale_shift_table"
        return table[name]
    module, param = name.rsplit(".", 1)  # a module's ".weight" / ".bias"
    return f"{table[module]}.{param}"


def original_state(model, prefix: str = "") -> dict:
    return {prefix + original_name(k): v.clone() for k, v in model.state_dict().items()}


def tiny_transformer(seed: int, **extra):
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    return WanTransformer3DModel(**(tiny_transformer_config(16) | extra)).eval()


def forward(model, image: bool = False):
    gen = torch.Generator().manual_seed(0)
    kwargs = dict(
        hidden_states=torch.randn(1, 16, 2, 8, 8, generator=gen),  # (B, C, F, H, W)
        timestep=torch.tensor([500]),
        encoder_hidden_states=torch.randn(1, 512, 32, generator=gen),  # I2V splits text at 512 tokens
    )
    if image:
        kwargs["encoder_hidden_states_image"] = torch.randn(2, 4, I2V["image_dim"], generator=gen)
    with torch.no_grad():
        return model(**kwargs, return_dict=False)[0]


@pytest.fixture(scope="module")
def source():
    return tiny_transformer(seed=1)


@pytest.fixture(scope="module")
def checkpoints(source, tmp_path_factory):
    """The source model's weights in the three packagings, and a decoy under "generator"."""
    root = tmp_path_factory.mktemp("checkpoints")
    save_file(original_state(source), root / "plain.safetensors")
    decoy = original_state(tiny_transformer(seed=2), "model.")
    torch.save(
        {"generator_ema": original_state(source, "model."), "generator": decoy, "step": 600}, root / "self_forcing.pt"
    )
    # FSDP wraps the model and each block: "_fsdp_wrapped_module.blocks.0._fsdp_wrapped_module.self_attn.q.weight"
    fsdp = {"_fsdp_wrapped_module." + re.sub(r"^(blocks\.\d+\.)", r"\1_fsdp_wrapped_module.", k): v
            for k, v in original_state(source).items()}  # fmt: skip
    torch.save({"state_dict": fsdp}, root / "fsdp.pt")
    return root


@pytest.mark.parametrize("extra", [{}, I2V], ids=["t2v", "i2v"])
def test_original_names_convert_to_exactly_the_diffusers_parameters(extra):
    model = tiny_transformer(seed=3, **extra)
    converted = convert_wan_original_state_dict(original_state(model))
    assert converted.keys() == model.state_dict().keys()
    assert all(torch.equal(converted[k], v) for k, v in model.state_dict().items())


def test_diffusers_names_pass_through_unchanged(source):
    state = source.state_dict()
    assert convert_wan_original_state_dict(state) == state


@pytest.mark.parametrize("extra", [{}, I2V], ids=["t2v", "i2v"])
def test_the_config_is_inferred_from_the_shapes(extra):
    model = tiny_transformer(seed=3, **extra)
    config = infer_wan_config(original_state(model), head_dim=12)
    not_in_the_weights = ("rope_max_seq_len", "_use_default_values")
    assert config == {k: v for k, v in model.config.items() if k not in not_in_the_weights}
    with pytest.raises(ValueError, match="`head_dim` must divide the model width 24, but is 128"):
        infer_wan_config(original_state(model))


@pytest.mark.parametrize("name", ["plain.safetensors", "self_forcing.pt", "fsdp.pt"])
def test_a_packaged_checkpoint_loads_to_the_same_outputs(name, source, checkpoints):
    loaded = load_wan_original(checkpoints / name, head_dim=12)
    assert torch.equal(forward(loaded), forward(source))  # fp32, same weights: bit-identical


def test_an_i2v_checkpoint_loads_to_the_same_outputs(tmp_path):
    source = tiny_transformer(seed=4, **I2V)
    save_file(original_state(source), tmp_path / "i2v.safetensors")
    loaded = load_wan_original(tmp_path / "i2v.safetensors", head_dim=12)
    assert torch.equal(forward(loaded, image=True), forward(source, image=True))


def test_generator_ema_is_preferred_over_generator(source, checkpoints):
    from videogen.models.wan_original import read_checkpoint

    state, entry = read_checkpoint(checkpoints / "self_forcing.pt")
    assert entry == "generator_ema"
    assert torch.equal(state["proj_out.weight"], source.state_dict()["proj_out.weight"])


def test_a_checkpoint_that_pickles_an_object_needs_trust_and_then_loads_after_a_warning(source, tmp_path, monkeypatch):
    import argparse

    torch.save(
        {"generator": original_state(source, "model."), "args": argparse.Namespace(lr=2e-6)}, tmp_path / "args.pt"
    )
    with pytest.raises(ValueError, match="pickles argparse.Namespace.*VIDEOGEN_TRUST_CHECKPOINTS=1"):
        load_wan_original(tmp_path / "args.pt", head_dim=12)
    monkeypatch.setenv("VIDEOGEN_TRUST_CHECKPOINTS", "1")
    with pytest.warns(UserWarning, match="pickles argparse.Namespace"):
        loaded = load_wan_original(tmp_path / "args.pt", head_dim=12)
    assert torch.equal(forward(loaded), forward(source))


def test_low_precision_keeps_the_fp32_modules_in_fp32(checkpoints):
    loaded = load_wan_original(checkpoints / "plain.safetensors", head_dim=12, dtype=torch.bfloat16)
    assert loaded.blocks[0].attn1.to_q.weight.dtype == torch.bfloat16
    assert loaded.blocks[0].norm2.weight.dtype == loaded.blocks[0].scale_shift_table.dtype == torch.float32


def test_an_unknown_key_is_named(source, tmp_path):
    state = original_state(source)
    state["blocks.0.self_attn.q.lora_A.weight"] = torch.zeros(4, 24)
    save_file(state, tmp_path / "lora.safetensors")
    with pytest.raises(
        ValueError,
        match=r"lora\.safetensors: 1 key\(s\) are not Wan transformer parameters in original naming: .*q\.lora_A",
    ):
        load_wan_original(tmp_path / "lora.safetensors", head_dim=12)


def test_a_wrong_shape_is_named(source, tmp_path):
    state = original_state(source)
    state["blocks.1.ffn.0.weight"] = state["blocks.1.ffn.0.weight"][:16]
    save_file(state, tmp_path / "cut.safetensors")
    with pytest.raises(
        ValueError, match=r"cut\.safetensors: .*wrong shape: blocks\.1\.ffn\.net\.0\.proj\.weight is \(16, 24\)"
    ):
        load_wan_original(tmp_path / "cut.safetensors", head_dim=12)


def test_load_model_with_a_checkpoint_renders_with_its_weights(tiny_wan21, source, checkpoints, tmp_path):
    from videogen import RenderSpec, render
    from videogen.io.video import probe

    model = load_model(str(tiny_wan21), device="cpu", dtype="float32", checkpoint=str(checkpoints / "self_forcing.pt"))
    assert all(torch.equal(model.transformer.state_dict()[k], v) for k, v in source.state_dict().items())
    assert model.extras["checkpoint"].endswith("self_forcing.pt (generator_ema)")
    spec = RenderSpec.single("a red cat", 1.0, model=str(tiny_wan21), size=(32, 32), fps=8, steps=2)
    list(render(spec, tmp_path / "out.mp4", model=model))
    assert probe(tmp_path / "out.mp4").num_frames == 8


def test_a_checkpoint_of_another_architecture_is_an_invalid_option(tiny_wan21, tmp_path):
    bigger = tiny_transformer(seed=0, num_layers=3)
    save_file(original_state(bigger), tmp_path / "three.safetensors")
    with pytest.raises(
        InvalidOption, match=r"checkpoint=.*three\.safetensors.*has num_layers=3; the model's has num_layers=2"
    ):
        load_model(str(tiny_wan21), device="cpu", dtype="float32", checkpoint=str(tmp_path / "three.safetensors"))


@pytest.mark.parametrize(
    "name, reason", [("junk.pt", "neither a torch file nor a .safetensors one"), ("missing.pt", "no such file")]
)
def test_the_cli_reports_a_bad_checkpoint_in_one_line_with_exit_2(name, reason, tmp_path, capsys):
    from videogen.cli import main

    (tmp_path / "junk.pt").write_text("not a checkpoint")
    out = tmp_path / "out.mp4"
    assert main(["render", "x", "--checkpoint", str(tmp_path / name), "-o", str(out)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"videogen: error: --checkpoint={tmp_path / name}: {reason}"]
    assert not out.exists()

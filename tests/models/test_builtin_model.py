"""The built-in model's conditioning: `MotionLayout`'s moving coordinate frames and how they reach
the transformer (training, rendering and streaming all give it the same frames)."""

from __future__ import annotations

import pytest
import torch

from videogen.attention.causal import new_cache, plan_chunk
from videogen.config.geometry import builtin_block_count
from videogen.models.builtin import (
    BLANK_GATE,
    LAYOUT_CHANNELS,
    LAYOUT_GAIN,
    LAYOUT_HARMONICS,
    LAYOUT_SLOTS,
    LAYOUT_SUBFRAMES,
    TRANSFORMER_CONFIG,
    WEIGHTS_DIR,  # fmt: skip
    build_fresh,
    grow_layers,
    grow_width,
    load_weights,
    transformer_config,
    weights_size,
)
from videogen.training.train import _named_state, export_weights

PER_SUBFRAME = len(LAYOUT_HARMONICS) * 4  # sin/cos of x and y per harmonic


def _layout_moving_right(cells_per_frame: int, w: int = 8):
    """A fresh encoder whose slot-0 gate picks frame 1, set to move `cells_per_frame` cells right."""
    _, enc = build_fresh(0)
    with torch.no_grad():
        enc.layout.gate.bias.copy_(torch.tensor([-30.0, 30.0, -30.0, -30.0, -30.0]))
        enc.layout.frames[:, 1] = torch.tensor([0.25, 0.5, cells_per_frame / w, 0.0])
    return enc


def test_in_its_frame_a_moving_object_stands_still():
    """Channel values move with the frame: one cell right per latent frame means frame t+1 at
    column x+1 equals frame t at column x (all rows, all channels of the slot)."""
    enc = _layout_moving_right(1)
    latents = torch.zeros(1, 192, 4, 8, 8)
    out = enc.layout(latents, enc.encode(["a red circle moving right on a black background"]))
    assert out.shape == (1, LAYOUT_CHANNELS, 4, 8, 8)
    slot0 = out[:, : LAYOUT_CHANNELS // LAYOUT_SLOTS]
    torch.testing.assert_close(slot0[:, :, 1:, :, 1:], slot0[:, :, :-1, :, :-1])
    assert not torch.allclose(slot0[:, :, 1:], slot0[:, :, :-1])  # it does move


def test_each_video_frame_of_a_latent_frame_has_its_own_phase():
    """A latent frame holds 4 video frames, the last at its index: moving 4 cells per latent frame,
    sub-frame k+1 at column x+1 equals sub-frame k at column x, and the last sub-frame of latent
    frame t equals the first of t+1 one column left, so the object moves every video frame."""
    enc = _layout_moving_right(LAYOUT_SUBFRAMES, w=16)
    latents = torch.zeros(1, 192, 3, 8, 16)
    out = enc.layout(latents, enc.encode(["a red circle moving right on a black background"]))
    sub = out[0, : LAYOUT_CHANNELS // LAYOUT_SLOTS].view(LAYOUT_SUBFRAMES, PER_SUBFRAME, 3, 8, 16)
    for k in range(LAYOUT_SUBFRAMES - 1):
        torch.testing.assert_close(sub[k + 1, ..., 1:], sub[k, ..., :-1])
    torch.testing.assert_close(sub[0, :, 1:, :, 1:], sub[-1, :, :-1, :, :-1])
    assert not torch.allclose(sub[1], sub[0])
    # the last sub-frame is at the latent frame's own index: the frame's origin at t = 0 is x0
    x = (torch.arange(16) + 0.5) / 16 - 0.25
    torch.testing.assert_close(sub[-1, 0, 0, 0], LAYOUT_GAIN * torch.sin(2 * torch.pi * LAYOUT_HARMONICS[0] * x))


def test_phases_are_periodic_so_any_absolute_frame_is_in_range():
    enc = _layout_moving_right(1)  # 1 cell per frame on 8 cells: period 8 frames
    latents = torch.zeros(1, 192, 3, 8, 8)
    embeds = enc.encode(["a red circle moving right on a black background"])
    near = enc.layout(latents, embeds, [0, 1, 2])
    far = enc.layout(latents, embeds, [80_000, 80_001, 80_002])
    torch.testing.assert_close(near, far, atol=1e-5, rtol=0)


def test_gates_are_a_distribution_per_slot_and_an_empty_prompt_uses_the_bias():
    _, enc = build_fresh(0)
    with torch.no_grad():
        enc.layout.gate.weight.normal_()
        enc.layout.gate.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0]))
    g = enc.layout.gates(enc.encode(["a red circle moving right on a black background", ""]))
    assert g.shape == (2, 2, 5)
    torch.testing.assert_close(g.sum(-1), torch.ones(2, 2))
    torch.testing.assert_close(g[1, 0], torch.softmax(enc.layout.gate.bias, -1))
    assert not torch.allclose(g[0, 0], g[1, 0])


def test_a_blank_gate_mixes_no_frame_and_weights_with_it_load_into_a_fresh_model(tmp_path):
    """`add_blank` leaves the old gates' logits as they were and adds one that mixes nothing: a slot
    all on it has zero channels, one half on it has half its frame's. A file saved with it loads
    into a model built without it (the loader adds it); a file without it stays without."""
    from safetensors.torch import save_file

    enc = _layout_moving_right(1)
    latents = torch.zeros(1, 192, 3, 8, 8)
    embeds = enc.encode(["a red circle moving right on a black background"])
    before, logits = enc.layout(latents, embeds), enc.layout.gate_logits(embeds)
    assert not enc.layout.has_blank
    enc.layout.add_blank()
    assert enc.layout.has_blank and enc.layout.gate.out_features == BLANK_GATE + 1
    torch.testing.assert_close(enc.layout.gate_logits(embeds)[..., :BLANK_GATE], logits)
    torch.testing.assert_close(enc.layout(latents, embeds), before)  # its bias of -30 - 4: no weight
    per_slot = LAYOUT_CHANNELS // LAYOUT_SLOTS
    with torch.no_grad():
        enc.layout.gate.bias[BLANK_GATE] = 90.0  # slot gates: all on the blank (the rest e^-60 or less)
        assert enc.layout(latents, embeds).abs().max() < 1e-20
        enc.layout.gate.bias[BLANK_GATE] = 30.0  # even with frame 1's: half on each
    half = enc.layout(latents, embeds)
    torch.testing.assert_close(half[:, :per_slot], before[:, :per_slot] / 2)

    transformer, _ = build_fresh(0)
    path = tmp_path / "blank.safetensors"
    save_file(_named_state(transformer, enc), str(path))
    t2, fresh = build_fresh(1)
    assert not fresh.layout.has_blank
    load_weights(t2, fresh, path)
    assert fresh.layout.has_blank
    torch.testing.assert_close(fresh.layout(latents, embeds), half)
    plain, (t3, enc3) = tmp_path / "plain.safetensors", build_fresh(2)
    save_file(_named_state(t3, enc3), str(plain))
    load_weights(t3, enc3, plain)
    assert not enc3.layout.has_blank


def test_condition_builds_the_whole_transformer_input_and_defaults_absolute_to_frames():
    _, enc = build_fresh(0)
    latents = torch.randn(2, 192, 3, 8, 8)
    embeds = enc.encode(
        ["a red circle moving left on a black background", "a blue square bouncing on a gray background"]
    )
    x = enc.condition(latents, None, embeds)
    assert x.shape == (2, TRANSFORMER_CONFIG["in_channels"], 3, 8, 8)
    torch.testing.assert_close(x[:, :192], latents)
    torch.testing.assert_close(
        enc.condition(latents, [5, 6, 7], embeds), enc.condition(latents, [5, 6, 7], embeds, [5, 6, 7])
    )
    assert not torch.allclose(x, enc.condition(latents, None, embeds, [5, 6, 7]))


def test_the_stream_plan_keeps_absolute_frames_while_positions_are_re_indexed():
    transformer, _ = build_fresh(0)
    cache = new_cache(transformer, batch=1, tokens_per_frame=16, sink=1, window=3, latent_shape=(192, 8, 8),
                      dtype=torch.float32, device="cpu")  # fmt: skip
    for frames in ([0], [1, 2, 3], [4, 5, 6], [7, 8, 9]):
        plan_chunk(cache, transformer, frames, (4, 4))
        cache.commit(frames, None)
    plan = plan_chunk(cache, transformer, [10, 11, 12], (4, 4))
    assert plan.frames == [10, 11, 12]
    assert plan.chunk_positions == [4, 5, 6]  # sink frame 0 at 0, the window (7..9) at 1..3, then this chunk


@pytest.mark.parametrize("weights", ["builtin.safetensors", "builtin_causal.safetensors"])
def test_each_shipped_weights_file_loads_every_key(weights):
    path = WEIGHTS_DIR / weights
    load_weights(*build_fresh(0, *weights_size(path)), path)  # raises on any missing or unexpected key


def _save_weights(transformer, encoder, patch_embedding, path) -> None:
    """A built-in weights file, written as training writes one, with this patch embedding."""
    state = _named_state(transformer, encoder)
    state["transformer.patch_embedding.weight"] = patch_embedding
    export_weights(state, path)


def test_weights_with_an_unknown_input_width_are_refused(tmp_path):
    _save_weights(*build_fresh(0), torch.zeros(128, 200, 1, 2, 2), tmp_path / "odd.safetensors")
    with pytest.raises(RuntimeError, match="200 input channels"):
        load_weights(*build_fresh(0), tmp_path / "odd.safetensors")


def _reloaded_outputs(transformer, state, path):
    """(model, original output, its output): `state` written to `path`, loaded into a model of the
    size its header gives, and both run on one random input."""
    export_weights(state, path)
    big, big_encoder = build_fresh(0, *weights_size(path))
    load_weights(big, big_encoder, path)
    x, t, text = torch.randn(1, 323, 3, 4, 4), torch.tensor([700]), torch.randn(1, 16, 64)
    with torch.no_grad():
        want = transformer.eval()(x, t, text, return_dict=False)[0]
        got = big.eval()(x, t, text, return_dict=False)[0]
    assert want.abs().max() > 0.01
    return big, want, got


def test_grown_weights_compute_what_the_original_did_and_load_by_their_block_count(tmp_path):
    transformer, encoder = build_fresh(3)
    state = _named_state(transformer, encoder)
    grown = grow_layers(state, 6)
    assert builtin_block_count(grown) == 6 and builtin_block_count(state) == 4
    # blocks 1 and 3 are copied after themselves, their outputs into the residual stream zeroed
    assert torch.equal(grown["transformer.blocks.2.attn1.to_q.weight"], state["transformer.blocks.1.attn1.to_q.weight"])
    assert torch.equal(grown["transformer.blocks.4.attn1.to_q.weight"], state["transformer.blocks.3.attn1.to_q.weight"])
    assert not grown["transformer.blocks.5.ffn.net.2.weight"].any()
    assert torch.equal(grown["transformer.blocks.3.ffn.net.2.weight"], state["transformer.blocks.2.ffn.net.2.weight"])
    big, want, got = _reloaded_outputs(transformer, grown, tmp_path / "grown.safetensors")
    assert weights_size(tmp_path / "grown.safetensors") == (6, 4) and len(big.blocks) == 6
    assert torch.equal(got, want)  # the new blocks are exact identities
    with pytest.raises(RuntimeError, match="holds 6 transformer blocks; the model has 4"):
        load_weights(*build_fresh(0), tmp_path / "grown.safetensors")
    with pytest.raises(ValueError, match="cannot grow 6 transformer blocks to 5"):
        grow_layers(grown, 5)


def test_widened_weights_compute_what_the_original_did_and_load_by_their_width(tmp_path):
    transformer, encoder = build_fresh(3)
    state = _named_state(transformer, encoder)
    wide = grow_width(state, 8, seed=1)
    big, want, got = _reloaded_outputs(transformer, wide, tmp_path / "wide.safetensors")
    assert weights_size(tmp_path / "wide.safetensors") == (4, 8)
    assert big.config.num_attention_heads == 8 and big.config.ffn_dim == 2 * TRANSFORMER_CONFIG["ffn_dim"]
    # Each widened weight is the original split into shares that sum to it, so the sums differ
    # from the original's by float32 rounding (~1e-7 of the weights' scale per product) only.
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    # the copies are not copies of each other's weights (their symmetry is broken), yet sum back
    q = wide["transformer.blocks.0.attn1.to_q.weight"]  # (256, 256): [[a, b], [c, d]], a + b == q
    old = state["transformer.blocks.0.attn1.to_q.weight"]
    assert not torch.equal(q[:128, :128], q[128:, :128])
    torch.testing.assert_close(q[:128, :128] + q[:128, 128:], old, rtol=0, atol=1e-6)
    # the same seed widens the same way; layers then grow on top
    assert torch.equal(grow_width(state, 8, seed=1)["transformer.proj_out.weight"], wide["transformer.proj_out.weight"])
    assert builtin_block_count(grow_layers(wide, 6)) == 6
    with pytest.raises(ValueError, match="cannot widen 4 attention heads to 6"):
        grow_width(state, 6)
    with pytest.raises(RuntimeError, match="size mismatch|do not match"):
        load_weights(*build_fresh(0), tmp_path / "wide.safetensors")
    assert transformer_config(None, 8)["num_attention_heads"] == 8

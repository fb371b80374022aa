"""Tiny Wan-family pipelines in diffusers layout, built in code and saved to disk.

They exercise the real loading path (model_index.json, transformer, vae, text_encoder, tokenizer,
scheduler) with no hub access: tests, the API load benchmark and the fleet tests use them as a
fast stand-in for real weights. Sizes follow diffusers' own Wan tests (2 heads x 12 dims, 2
layers). Weights are random but seeded, so two builds are identical.
"""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = [
    "a",
    "an",
    "the",
    "on",
    "of",
    "and",
    "with",
    "in",
    "red",
    "green",
    "blue",
    "yellow",
    "white",
    "orange",
    "purple",
    "cyan",
    "black",
    "gray",
    "circle",
    "square",
    "triangle",
    "cat",
    "dog",
    "car",
    "moving",
    "left",
    "right",
    "up",
    "down",
    "bouncing",
    "still",
    "background",
    "sky",
    "sea",
    "forest",
    "city",
    "night",
    "day",
]


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", model_max_length=512
    )


def tiny_transformer_config(latent_channels: int = 16) -> dict:
    """The tiny pipelines' `WanTransformer3DModel` config: 2 heads x 12 dims, 2 layers, 32-wide text."""
    return dict(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=latent_channels,
        out_channels=latent_channels, text_dim=32, freq_dim=256, ffn_dim=32, num_layers=2, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", rope_max_seq_len=32,
    )  # fmt: skip


VARIANTS = ("wan2.1", "wan2.2-ti2v", "wan2.2-a14b")
A14B_BOUNDARY_RATIO = 0.875  # Wan 2.2 A14B T2V's: the high-noise expert for t >= 875


def save_tiny_wan(path: str | Path, variant: str = "wan2.1", seed: int = 0, flow_shift: float | None = None) -> Path:
    """Write a tiny `WanPipeline` folder. `variant`: "wan2.1" (16-ch VAE, 8x), "wan2.2-ti2v"
    (48-ch residual VAE with 2x2 patching, 16x, per-token timesteps) or "wan2.2-a14b" (Wan 2.1's
    VAE and two transformer experts: `transformer_2` below `boundary_ratio`). `flow_shift`: the
    scheduler config's shift (`flow_shift` of UniPC, `shift` of FlowMatchEuler); None: the variant's."""
    from diffusers import (
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        UniPCMultistepScheduler,
        WanPipeline,
        WanTransformer3DModel,
    )
    from transformers import UMT5Config, UMT5EncoderModel

    path = Path(path)
    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    text_encoder = UMT5EncoderModel(
        UMT5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                   relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    )  # fmt: skip
    if variant in ("wan2.1", "wan2.2-a14b"):
        vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                               temperal_downsample=[False, True, True])  # fmt: skip
        z, expand = 16, False
        scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                            flow_shift=3.0 if flow_shift is None else flow_shift)  # fmt: skip
    elif variant == "wan2.2-ti2v":
        vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=8, z_dim=48, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                               temperal_downsample=[False, True, True], is_residual=True, patch_size=2,
                               in_channels=12, out_channels=12, scale_factor_spatial=16,
                               latents_mean=[0.0] * 48, latents_std=[1.0] * 48)  # fmt: skip
        z, expand = 48, True
        scheduler = FlowMatchEulerDiscreteScheduler(shift=5.0 if flow_shift is None else flow_shift)
    else:
        raise ValueError(f"`variant` must be one of {', '.join(VARIANTS)}, got {variant!r}")
    transformer = WanTransformer3DModel(**tiny_transformer_config(z))
    experts = {}
    if variant == "wan2.2-a14b":  # the low-noise expert: same architecture, its own (seeded) weights
        experts = dict(transformer_2=WanTransformer3DModel(**tiny_transformer_config(z)),
                       boundary_ratio=A14B_BOUNDARY_RATIO)  # fmt: skip
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                       scheduler=scheduler, expand_timesteps=expand, **experts)  # fmt: skip
    pipe.save_pretrained(path, safe_serialization=True)
    return path

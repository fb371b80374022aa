"""How long a render will take, roughly, before it starts: FLOPs from its token grids and the
transformer's shape, seconds from a conservative FLOP/s figure per device type.

Torch-free arithmetic on a `ResolvedRender` and the model folder's `transformer/config.json` (the
built-in model's shape is a constant here), so the API process could use it as well as the CLI.
The count follows the usual transformer accounting (Kaplan et al. 2020, "FLOPs per token"): per
layer and token, 2 FLOPs per weight of the self-attention projections (4 D^2), cross-attention
query/output projections (2 D^2) and feed-forward (2 D F); plus attention itself, 4 N D for
self-attention over N tokens and 4 T D for cross-attention over T text tokens; times the
classifier-free-guidance batch (2 when guidance > 1), steps and segments. Sparse attention is
counted as dense: the estimate is an upper bound on the attention share.

    cost = render_cost(resolved, transformer_shape(preset), geometry_for(preset), "cpu", cores=2)
    cost.seconds, cost.describe()
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from videogen.config import environment
from videogen.config.geometry import (
    ModelGeometry,
    builtin_block_count,
    builtin_width,
    folder_config,
    safetensors_shapes,
)
from videogen.config.presets import Preset
from videogen.errors import ModelLoadError

if TYPE_CHECKING:
    from videogen.config.resolve import ResolvedRender

# Effective FLOP/s of one CPU core on a Wan transformer forward in fp32, measured on the 2-core
# development box with one torch thread (a 1-layer, 1536-wide, ffn 8960 Wan block over 1,170
# tokens): 22-50 GFLOP/s depending on the box's other load; `python benchmarks/cost_estimate.py`.
CPU_FLOPS_PER_CORE = 30e9
# One CUDA GPU, bf16: a conservative figure. Wan 2.1's model card gives about 4 min for 5 s of
# 480p from the 1.3B on one RTX 4090, 2.8e16 FLOPs by this count: ~118 TFLOP/s effective; data-
# centre GPUs run faster. benchmarks/gpu_e2e.py prints measured seconds per step beside the estimate.
CUDA_FLOPS = 100e12
# Renders estimated above this ask for confirmation (`videogen render --yes`).
CONFIRM_SECONDS = 3600.0
WAN_TEXT_TOKENS = 512  # UMT5 sequence length in Wan's pipelines (`max_sequence_length`)


@dataclass(frozen=True)
class TransformerShape:
    """What a denoising forward costs per token: the transformer's depth and widths."""

    layers: int
    width: int  # heads x head dim
    ffn: int  # feed-forward hidden width
    text_tokens: int  # cross-attention keys per prompt

    def flops_per_forward(self, tokens: int, batch: int = 1) -> float:
        """FLOPs of one forward over `tokens` video tokens for `batch` prompts."""
        n, d, f, t = tokens, self.width, self.ffn, self.text_tokens
        weights = 2 * n * (4 * d * d + 2 * d * d + 2 * d * f) + 2 * t * 2 * d * d  # + cross-attn k, v of the text
        attention = 4 * n * n * d + 4 * n * t * d
        return float(batch * self.layers * (weights + attention))


# The built-in model (`videogen.models.builtin.TRANSFORMER_CONFIG`: 4 layers, 4 heads x 32, ffn 512,
# 16-word captions); tests/cli/test_estimate.py checks that the two agree. A weights file trained
# deeper or wider (`videogen train builtin --layers`, `--heads`) has as many layers as it holds
# blocks, its own width, and a feed-forward 4x that width.
BUILTIN_SHAPE = TransformerShape(layers=4, width=128, ffn=512, text_tokens=16)


def transformer_shape(preset: Preset) -> TransformerShape:
    """`preset`'s transformer shape without loading it (a folder's `transformer/config.json`; the
    built-in model's weights file's header)."""
    if preset.kind == "builtin":
        path = environment.builtin_weights(preset.weights, preset.name)
        if not path.is_file():  # the model runs on seeded random weights of the default depth
            return BUILTIN_SHAPE
        return _builtin_shape(str(path), path.stat().st_mtime_ns)
    if preset.path is None:
        raise ModelLoadError(f"preset {preset.name!r} names no model folder")
    return _folder_shape(str(preset.path))


@lru_cache(maxsize=32)
def _builtin_shape(path: str, mtime_ns: int) -> TransformerShape:
    shapes = safetensors_shapes(path)
    width = builtin_width(shapes) or BUILTIN_SHAPE.width
    layers = builtin_block_count(shapes) or BUILTIN_SHAPE.layers
    return replace(BUILTIN_SHAPE, layers=layers, width=width, ffn=BUILTIN_SHAPE.ffn * width // BUILTIN_SHAPE.width)


@lru_cache(maxsize=32)
def _folder_shape(folder: str) -> TransformerShape:
    cfg = folder_config(folder, "transformer")
    index = folder_config(folder, "") if (Path(folder) / "model_index.json").is_file() else {}
    return TransformerShape(
        layers=int(cfg["num_layers"]),
        width=int(cfg["num_attention_heads"]) * int(cfg["attention_head_dim"]),
        ffn=int(cfg["ffn_dim"]),
        text_tokens=int(index.get("max_sequence_length", WAN_TEXT_TOKENS)),
    )


def device_flops(device_type: str, cores: int) -> float:
    """Effective FLOP/s assumed for `device_type` ("cpu" with `cores` threads, or "cuda")."""
    return CUDA_FLOPS if device_type == "cuda" else CPU_FLOPS_PER_CORE * max(1, cores)


@dataclass(frozen=True)
class RenderCost:
    flops: float  # whole render: every step of every segment, guidance batch included
    forwards: int  # transformer forwards (steps x segments)
    seconds: float
    device: str  # "cpu (2 cores)", "cuda"

    @property
    def needs_confirmation(self) -> bool:
        return self.seconds > CONFIRM_SECONDS

    def describe(self) -> str:
        return (f"estimated {format_duration(self.seconds)} on {self.device} "
                f"({self.flops:.2g} FLOPs over {self.forwards} transformer forwards)")  # fmt: skip


def render_cost(resolved: ResolvedRender, shape: TransformerShape, geometry: ModelGeometry, device_type: str,
                cores: int = 1) -> RenderCost:  # fmt: skip
    """The transformer's cost of `resolved` on `device_type` (the VAE and text encoder are small beside it)."""
    s = resolved.settings
    pt, ph, pw = geometry.patch_size
    tokens_per_frame = (s.height // geometry.spatial_factor // ph) * (s.width // geometry.spatial_factor // pw)
    batch = 2 if s.guidance > 1.0 else 1
    per_step = sum(shape.flops_per_forward(-(-seg.latent_frames // pt) * tokens_per_frame, batch)
                   for seg in resolved.plan.segments)  # fmt: skip
    flops = per_step * s.steps
    device = f"cpu ({cores} core{'s' if cores != 1 else ''})" if device_type != "cuda" else "cuda"
    return RenderCost(flops, s.steps * len(resolved.plan), flops / device_flops(device_type, cores), device)


def format_duration(seconds: float) -> str:
    """3 s, 12 min, 3.5 h, 2.1 days."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"

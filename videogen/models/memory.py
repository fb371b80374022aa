"""GPU memory: where a model's components live during a render, and how much memory it needs.

Offload modes (`--offload`, a preset's `offload:`, a worker's `--offload`), after diffusers'
memory guide ("Reduce memory usage": model CPU offloading, group offloading):

* `none`: every component on the device for the model's life.
* `model`: whole components (text encoder, transformer(s), VAE) live on the CPU, and each is moved
  to the device only while it runs, the previous one moved back (`ComponentOffload`, as
  diffusers' `enable_model_cpu_offload`). Peak: the largest component plus its activations.
* `group`: the transformer(s) are offloaded block by block with diffusers' group offloading
  (`ModelMixin.enable_group_offload`, `block_level`, one block per group, the next block copied
  on a side CUDA stream while the current one runs); text encoder and VAE as in `model`. Peak:
  the text encoder (or the VAE and its activations), or two transformer blocks plus activations.
  This is what runs Wan 2.1 14B and Wan 2.2 A14B (28 GiB of bf16 weights per expert) on a 24 GB GPU.

`estimate_memory` adds up parameters x dtype bytes per component and the activations of a
transformer forward (per token) and a VAE decode (per pixel of its last stage), each from constants
that benchmarks/memory.py measures (`MemoryEstimate.describe()`: the line `load_model` logs and
`videogen render` prints). VAE tiling for large frames is the codec's (`WanVAECodec.tiling`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from videogen.config.presets import OFFLOAD_MODES, VAE_TILING_MODES
from videogen.errors import InvalidOption

GIB = 1024**3
# Live activations of one transformer block's forward, in values at the model's dtype per token and
# batch row, at its worst moment: inside the feed-forward 2 F + 4 D (the GELU's input and output,
# the residual, the fp32 norm), inside self-attention 12 D (q, k, v, their fp32 RoPE temporaries,
# the output, the residual). Measured by benchmarks/memory.py on Wan 2.1 1.3B and 14B blocks (CPU,
# resident high-water mark): within 4% of these at both shapes.
FFN_PHASE = (2, 4)  # (x F, x D)
ATTENTION_PHASE_WIDTHS = 12  # x D
# Wan's causal VAE decodes one latent frame (4 frames) at a time; its peak is in the last stage, at
# about this many fp32 tensors of `decoder_base_dim x 4 x H x W` (H x W divided by the patch size
# for a patchifying VAE). Plain (Wan 2.1's VAE): 15, from the H200's peak at 832x480 (8.6 GiB of
# activations; the CPU measures 13.2). Residual (Wan 2.2's): 20.0 measured on the CPU
# (benchmarks/memory.py), scaled by Wan 2.1's GPU/CPU ratio to 23.
VAE_LAST_STAGE_TENSORS = {False: 15.0, True: 23.0}  # by `is_residual`


def check_offload(mode: str, device: torch.device) -> str:
    """`mode` if it is known and `device` can use it; InvalidOption naming `offload` otherwise."""
    if mode not in OFFLOAD_MODES:
        raise InvalidOption("offload", mode, f"must be one of {', '.join(OFFLOAD_MODES)}")
    if mode != "none" and device.type != "cuda":
        raise InvalidOption("offload", mode, f"offloading moves weights to a CUDA device; the model runs on "
                                             f"{device.type}, where every component is in main memory already")  # fmt: skip
    return mode


def check_vae_tiling(mode: str) -> str:
    if mode not in VAE_TILING_MODES:
        raise InvalidOption("vae-tiling", mode, f"must be one of {', '.join(VAE_TILING_MODES)}")
    return mode


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple | list):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


class ComponentOffload:
    """Whole components kept on the CPU, one at a time on `device` while it runs.

    `attach(module)` installs a forward pre-hook that moves the module (and its tensor inputs) to
    `device` and the previously active component back to the CPU; `attach(module, onload=False)`
    only sends the active one back (a group-offloaded transformer, which moves its own blocks).
    `onload(module)` does the same for calls that are not `forward` (the VAE's encode/decode)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.active: nn.Module | None = None
        self.handles: list[Any] = []

    def onload(self, module: nn.Module | None) -> None:
        if module is self.active:
            return
        if self.active is not None:
            self.active.to("cpu")
        if module is not None:
            module.to(self.device)
        self.active = module

    def attach(self, module: nn.Module, *, onload: bool = True) -> None:
        def before_forward(mod: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            self.onload(mod if onload else None)
            return _to_device(args, self.device), _to_device(kwargs, self.device)

        self.handles.append(module.register_forward_pre_hook(before_forward, with_kwargs=True))


def apply_offload(model: Any, mode: str, device: torch.device) -> ComponentOffload | None:
    """Install `mode` on a loaded diffusers-folder `VideoModel` whose components are on the CPU.
    `device`: where they run (CUDA; the CPU in tests, where it exercises the same hooks)."""
    if mode == "none":
        return None
    offload = ComponentOffload(device)
    encoder = model.prompt_encoder.text_encoder
    encoder.eval()
    offload.attach(encoder)
    for transformer in (model.transformer, model.transformer_2):
        if transformer is None:
            continue
        if mode == "model":
            offload.attach(transformer)
        else:  # group: the transformer moves its own blocks; the others make room first
            offload.attach(transformer, onload=False)
            transformer.enable_group_offload(
                onload_device=device, offload_device=torch.device("cpu"), offload_type="block_level",
                num_blocks_per_group=1, use_stream=device.type == "cuda", non_blocking=device.type == "cuda",
            )  # fmt: skip
    codec = model.codec
    codec.execution_device = device
    codec.before_use = lambda: offload.onload(codec.vae)
    return offload


@dataclass(frozen=True)
class ComponentMemory:
    name: str  # "transformer", "transformer_2", "text encoder", "VAE"
    params: int
    bytes: int  # parameters and buffers, at their dtypes
    dtype: str  # "bf16", "fp32", ...
    block_bytes: int = 0  # a transformer's largest block (what group offload keeps on the device)


@dataclass(frozen=True)
class MemoryEstimate:
    components: tuple[ComponentMemory, ...]
    offload: str
    transformer_activations: int  # bytes of one transformer forward's live tensors
    vae_activations: int  # bytes of the VAE decode's live tensors
    peak: int  # bytes on the device at the worst moment of a render

    def describe(self) -> str:
        parts = ", ".join(f"{c.name} {format_bytes(c.bytes)} ({c.dtype})" for c in self.components)
        return (f"model memory: {parts}; activations {format_bytes(self.transformer_activations)} "
                f"(transformer), {format_bytes(self.vae_activations)} (VAE decode); "
                f"peak estimate {format_bytes(self.peak)} with offload={self.offload}")  # fmt: skip


def format_bytes(n: int) -> str:
    """2.6 GiB; below 0.1 GiB in MiB (the tiny test models)."""
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 1024**2:.1f} MiB"


_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def module_memory(name: str, module: nn.Module) -> ComponentMemory:
    """Parameters and buffers of `module`, counted at their dtypes."""
    tensors = list(module.parameters()) + list(module.buffers())
    size = sum(t.numel() * t.element_size() for t in tensors)
    params = sum(p.numel() for p in module.parameters())
    weights = list(module.parameters())  # the dtype of most weights (buffers such as RoPE tables keep fp32)
    dtype = max(weights, key=lambda t: t.numel()).dtype if weights else torch.float32
    blocks = getattr(module, "blocks", None)
    block = max((sum(t.numel() * t.element_size() for t in b.parameters()) for b in blocks), default=0) if blocks else 0
    return ComponentMemory(name, params, size, _DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch.")), block)


def model_components(model: Any) -> tuple[ComponentMemory, ...]:
    """The memory of each of a loaded `VideoModel`'s components that holds weights."""
    found = [module_memory("transformer", model.transformer)]
    if model.transformer_2 is not None:
        found.append(module_memory("transformer_2", model.transformer_2))
    encoder = getattr(model.prompt_encoder, "text_encoder", model.prompt_encoder)
    if isinstance(encoder, nn.Module):
        found.append(module_memory("text encoder", encoder))
    vae = getattr(model.codec, "vae", None)
    if isinstance(vae, nn.Module):
        found.append(module_memory("VAE", vae))
    return tuple(found)


def estimate_memory(model: Any, offload: str, *, width: int, height: int, latent_frames: int, batch: int = 2,
                    vae_tiling: bool = False) -> MemoryEstimate:  # fmt: skip
    """Peak device memory of rendering `latent_frames` x `height` x `width` (pixels) segments with
    `model` under `offload`; `batch` 2: classifier-free guidance's cond + uncond in one forward."""
    components = model_components(model)
    by_name = {c.name: c for c in components}
    cfg = model.transformer.config
    pt, ph, pw = (int(p) for p in cfg.patch_size)
    s = model.codec.spatial_factor
    tokens = -(-latent_frames // pt) * (height // s // ph) * (width // s // pw)
    act_bytes = torch.finfo(model.dtype).bits // 8
    transformer_act = batch * tokens * transformer_token_values(cfg) * act_bytes
    frames = (latent_frames - 1) * model.codec.temporal_factor + 1
    vae_act = vae_decode_bytes(model.codec, width, height, frames, vae_tiling)
    experts = [c for c in components if c.name.startswith("transformer")]
    encoder = by_name.get("text encoder")
    vae = by_name.get("VAE")
    enc_bytes = encoder.bytes if encoder else 0
    vae_bytes = vae.bytes if vae else 0
    if offload == "none":
        peak = sum(c.bytes for c in components) + max(transformer_act, vae_act)
    elif offload == "model":
        peak = max(enc_bytes, max(c.bytes for c in experts) + transformer_act, vae_bytes + vae_act)
    else:  # group: two blocks (the running one, the next one in flight) and the rest of the transformer
        resident = max(c.bytes - len(model.transformer.blocks) * c.block_bytes + 2 * c.block_bytes for c in experts)
        peak = max(enc_bytes, resident + transformer_act, vae_bytes + vae_act)
    return MemoryEstimate(components, offload, transformer_act, vae_act, peak)


def transformer_token_values(cfg: Any) -> int:
    """Live activation values per token and batch row at the worst moment of one block's forward
    (`FFN_PHASE`, `ATTENTION_PHASE_WIDTHS`), for a Wan transformer config."""
    d = int(cfg.num_attention_heads) * int(cfg.attention_head_dim)
    return max(FFN_PHASE[0] * int(cfg.ffn_dim) + FFN_PHASE[1] * d, ATTENTION_PHASE_WIDTHS * d)


def vae_decode_bytes(codec: Any, width: int, height: int, frames: int, tiling: bool) -> int:
    """Device bytes of decoding `frames` frames of `width` x `height` besides the VAE's weights:
    the last stage's activations (`VAE_LAST_STAGE_TENSORS`, at tile size when tiling) and the
    decoded video, held twice at the end (the frames joined, then clamped); tiled, every tile's
    frames are held before they are blended, overlaps included."""
    output = 3 * frames * width * height * 4
    vae = getattr(codec, "vae", None)
    if vae is None:  # the built-in pixel codec: a reshape
        return 2 * output
    cfg = vae.config
    dim = int(getattr(cfg, "decoder_base_dim", None) or cfg.base_dim)
    patch = int(getattr(cfg, "patch_size", None) or 1)
    tiles = 0
    if tiling:
        tile_w, tile_h = vae.tile_sample_min_width, vae.tile_sample_min_height
        stride_w, stride_h = vae.tile_sample_stride_width, vae.tile_sample_stride_height
        if width > tile_w or height > tile_h:
            tiles = -(-width // stride_w) * -(-height // stride_h) * 3 * frames * tile_w * tile_h * 4
            width, height = tile_w, tile_h
    tensors = VAE_LAST_STAGE_TENSORS[bool(getattr(cfg, "is_residual", False))]
    stage = dim * codec.temporal_factor * (width // patch) * (height // patch) * 4
    return int(tensors * stage) + tiles + 2 * output


def vae_tiling_on(mode: str, width: int, height: int) -> bool:
    """Whether a decode of `width` x `height` frames tiles: `on`, `off`, or `auto` from 720p
    (1280x704, Wan 2.2's 720p, and up by area), where an untiled Wan 2.1 VAE decode needs about
    19 GiB (`vae_decode_bytes`; 8.6 GiB measured at 832x480 on an H200)."""
    return mode == "on" or (mode == "auto" and width * height >= 1280 * 704)

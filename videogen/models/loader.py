"""Model loading: a preset name or a local diffusers folder -> a ready `VideoModel`.

Wan-family folders in diffusers layout are loaded component by component (`model_index.json`,
transformer[, transformer_2], vae, text_encoder, tokenizer, scheduler) with `local_files_only`,
so nothing is ever fetched from a hub; a missing folder or component is a clear error. The
attention backend is chosen here, once, and carried on the model (nothing switches it later).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from videogen.config.presets import Preset, resolve_preset
from videogen.errors import InvalidOption, ModelLoadError

REQUIRED_COMPONENTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")


@dataclass
class VideoModel:
    """Everything the denoising pipeline needs, on one device."""

    preset: Preset
    transformer: Any  # diffusers WanTransformer3DModel
    codec: Any  # videogen.models.codec.LatentCodec
    prompt_encoder: Any  # .encode(list[str]) -> (B, L, D)
    scheduler_config: dict[str, Any]
    device: torch.device
    dtype: torch.dtype
    attention: str = "dense"
    transformer_2: Any = None  # Wan 2.2 A14B low-noise expert
    boundary_ratio: float | None = None
    expand_timesteps: bool = False  # Wan 2.2 TI2V: per-token timesteps always
    prediction: str = "flow"  # "flow": the transformer predicts the velocity (Wan); "sample": clean latents (builtin)
    extras: dict[str, Any] = field(default_factory=dict)
    # Conditioning channels concatenated to the noisy latents before every transformer call (Wan
    # I2V-style); the built-in model's are its position channels and its caption's moving frames
    # (`BuiltinPromptEncoder.condition`). None: the latents alone.
    condition: Callable[..., torch.Tensor] | None = None

    def transformer_input(self, latents: torch.Tensor, embeds: torch.Tensor, frames: list[int] | None = None,
                          absolute: list[float] | None = None) -> torch.Tensor:  # fmt: skip
        """`embeds`: the prompt embeddings of this call's batch; `frames`: the latent frames'
        positions (default 0..F-1; streaming: the cache window's); `absolute`: their indices in the
        video (default `frames`)."""
        return latents if self.condition is None else self.condition(latents, frames, embeds, absolute)

    @property
    def patch_size(self) -> tuple[int, int, int]:
        return tuple(self.transformer.config.patch_size)

    @property
    def size_multiple(self) -> tuple[int, int]:
        """(width, height) must be multiples of these: VAE stride x patch size."""
        _, ph, pw = self.patch_size
        s = self.codec.spatial_factor
        return s * pw, s * ph

    def make_scheduler(self, flow_shift: float | None = None):
        """The folder's scheduler with the resolved `flow_shift` (`videogen.config.resolve`: the
        request's, else the preset's, else the folder's own) written over its config; None: the config's own."""
        import diffusers

        cfg = dict(self.scheduler_config)
        cls = getattr(diffusers, cfg.pop("_class_name", "FlowMatchEulerDiscreteScheduler"))
        cfg.pop("_diffusers_version", None)
        if flow_shift is not None:
            if "flow_shift" in cfg or cls.__name__ == "UniPCMultistepScheduler":
                cfg["flow_shift"] = flow_shift
            if "shift" in cfg or cls.__name__ == "FlowMatchEulerDiscreteScheduler":
                cfg["shift"] = flow_shift
        return cls.from_config(cfg)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise InvalidOption("device", device, "must be auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InvalidOption("device", device, "CUDA is not available on this machine")
    if dev.type not in ("cpu", "cuda"):
        raise InvalidOption("device", device, "must be auto, cpu, cuda or cuda:N")
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise InvalidOption("dtype", dtype, f"must be one of auto, {', '.join(table)}")
    return table[dtype]


def check_model_folder(path: Path) -> dict[str, Any]:
    """Return model_index.json's content, or raise naming what is missing."""
    if path is None or not path.is_dir():
        raise ModelLoadError(f"--model: model folder {str(path)!r} does not exist")
    index_file = path / "model_index.json"
    if not index_file.is_file():
        raise ModelLoadError(f"--model: {str(path)!r} is not a diffusers model folder (no model_index.json)")
    index = json.loads(index_file.read_text())
    missing = [c for c in REQUIRED_COMPONENTS if not (path / c).is_dir()]
    if index.get("transformer_2") and index["transformer_2"][0] and not (path / "transformer_2").is_dir():
        missing.append("transformer_2")
    if missing:
        raise ModelLoadError(f"--model: {str(path)!r} is incomplete: missing {', '.join(missing)}")
    return index


def load_model(model: str = "", *, device: str = "auto", dtype: str = "auto", attention: str | None = None,
               checkpoint: str | None = None, offload: str | None = None,
               vae_tiling: str | None = None) -> VideoModel:  # fmt: skip
    """Load a preset or folder. `attention` (None = the preset's default) is fixed for the model's life.
    `checkpoint`: a transformer weights file (original Wan or diffusers naming, e.g. a Self-Forcing
    or CausVid `.pt`) that replaces the transformer's weights; it must fit the transformer's config.
    `offload` ("none", "model", "group"; CUDA only) and `vae_tiling` ("auto", "on", "off"): None =
    $VIDEOGEN_OFFLOAD / $VIDEOGEN_VAE_TILING (a worker's setting), else the preset's
    (`videogen.models.memory`)."""
    from videogen.config import environment
    from videogen.models.memory import check_offload, check_vae_tiling

    preset = resolve_preset(model)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    if offload is None:  # a worker's or preset's default: for the large models on a GPU, else none
        offload = environment.offload() or preset.offload
        offload = offload if dev.type == "cuda" and preset.kind != "builtin" else "none"
    offload = check_offload(offload, dev)
    if preset.kind == "builtin" and offload != "none":
        raise InvalidOption("offload", offload, "the built-in model is small: it has nothing to offload")
    tiling = check_vae_tiling(vae_tiling or environment.vae_tiling() or preset.vae_tiling)
    if preset.kind == "builtin":
        vm = _load_builtin(preset, dev, dt)
    else:
        vm = _load_diffusers(preset, dev, dt, place=dev if offload == "none" else torch.device("cpu"))
        vm.codec.tiling = tiling
    if checkpoint is not None:
        _load_checkpoint(vm, checkpoint)
    from videogen.attention.processor import install_attention

    vm.attention = install_attention(vm, attention or preset.attention)
    if offload != "none":
        from videogen.models.memory import apply_offload

        apply_offload(vm, offload, dev)
    vm.extras["offload"] = offload
    _log_memory(vm, offload, tiling)
    return vm


def _log_memory(vm: VideoModel, offload: str, tiling: str) -> None:
    """Log the peak-memory estimate of a segment at the preset's size (`videogen render` prints its own)."""
    import logging

    from videogen.models.memory import estimate_memory, vae_tiling_on

    width, height = vm.preset.size
    frames = round(vm.preset.segment_seconds * vm.preset.fps)
    latent_frames = (frames - 1) // vm.codec.temporal_factor + 1
    estimate = estimate_memory(vm, offload, width=width, height=height, latent_frames=latent_frames,
                               vae_tiling=vae_tiling_on(tiling, width, height))  # fmt: skip
    logging.getLogger("videogen.models").info("%s (%dx%d, %d latent frames)", estimate.describe(), width, height,
                                              latent_frames)  # fmt: skip


def _load_checkpoint(vm: VideoModel, checkpoint: str) -> None:
    """Replace `vm.transformer`'s weights with `checkpoint`'s; they keep the transformer's dtypes."""
    from videogen.models.wan_original import read_checkpoint, state_dict_mismatch

    if vm.transformer_2 is not None:  # which expert would it replace? Refuse rather than guess.
        raise InvalidOption(
            "checkpoint", checkpoint, "the model has two transformer experts; a checkpoint replaces one"
        )
    try:
        state, entry = read_checkpoint(checkpoint)
    except (OSError, ValueError) as exc:
        raise InvalidOption("checkpoint", checkpoint, str(exc)) from None
    if reason := state_dict_mismatch(state, vm.transformer):
        raise InvalidOption("checkpoint", checkpoint, f"does not fit the model's transformer: {reason}")
    vm.transformer.load_state_dict(state, strict=True)
    vm.extras["checkpoint"] = f"{checkpoint} ({entry})" if entry else str(checkpoint)


def _load_builtin(preset: Preset, device: torch.device, dtype: torch.dtype) -> VideoModel:
    from videogen.models.builtin import build_builtin, cast_transformer

    transformer, codec, encoder = build_builtin(variant=preset.name, weights=preset.weights, decoder=preset.decoder)
    return VideoModel(
        preset=preset,
        transformer=cast_transformer(transformer, device, dtype),
        codec=codec,
        prompt_encoder=encoder.to(device),
        scheduler_config={
            "_class_name": "FlowMatchEulerDiscreteScheduler",
            "num_train_timesteps": 1000,
            "shift": preset.flow_shift,
        },
        device=device,
        dtype=dtype,
        prediction="sample",
        condition=encoder.condition,
    )


def _load_diffusers(preset: Preset, device: torch.device, dtype: torch.dtype,
                    place: torch.device | None = None) -> VideoModel:  # fmt: skip
    """`place`: where the weights go now (default `device`; the CPU when they are offloaded)."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import AutoTokenizer, UMT5EncoderModel

    from videogen.models.codec import WanVAECodec
    from videogen.models.text import T5PromptEncoder

    path = preset.path
    index = check_model_folder(path)
    import diffusers.utils.logging as dlog
    import transformers.utils.logging as tlog

    dlog.disable_progress_bar()
    tlog.disable_progress_bar()
    kw = dict(local_files_only=True)
    try:
        transformer = WanTransformer3DModel.from_pretrained(path, subfolder="transformer", torch_dtype=dtype, **kw)
        transformer_2 = None
        if index.get("transformer_2") and index["transformer_2"][0]:
            transformer_2 = WanTransformer3DModel.from_pretrained(
                path, subfolder="transformer_2", torch_dtype=dtype, **kw
            )
        vae = AutoencoderKLWan.from_pretrained(path, subfolder="vae", torch_dtype=torch.float32, **kw)
        text_encoder = UMT5EncoderModel.from_pretrained(path / "text_encoder", torch_dtype=dtype, **kw)
        tokenizer = AutoTokenizer.from_pretrained(path / "tokenizer", **kw)
        sched_file = path / "scheduler" / "scheduler_config.json"
        scheduler_config = json.loads(sched_file.read_text())
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"--model: cannot load {str(path)!r}: {first_line}") from exc

    place = device if place is None else place
    transformer.to(place).eval()
    if transformer_2 is not None:
        transformer_2.to(place).eval()
    vae.to(place).eval()
    text_encoder.to(place).eval()
    return VideoModel(
        preset=preset,
        transformer=transformer,
        codec=WanVAECodec(vae),
        prompt_encoder=T5PromptEncoder(tokenizer, text_encoder, max_length=int(index.get("max_sequence_length", 512))),
        scheduler_config=scheduler_config,
        device=device,
        dtype=dtype,
        transformer_2=transformer_2,
        boundary_ratio=index.get("boundary_ratio"),
        expand_timesteps=bool(index.get("expand_timesteps", False)),
    )

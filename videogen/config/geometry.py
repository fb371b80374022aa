"""A model's geometry: how its codec and transformer tile a video, read without torch.

`ModelGeometry` holds the numbers the resolution step (`videogen.config.resolve`) checks a request
against: the VAE's spatial and temporal strides, the transformer's patch size and the latent
channels. The API process reads them from a preset (`geometry_for`: the built-in model's constant,
a diffusers folder's `vae/config.json` and `transformer/config.json`); a process that has loaded
the model reads them from it (`geometry_of`). Both agree: the built-in model is built from
`BUILTIN_GEOMETRY` (`videogen.models.builtin`), and a folder's configs are what diffusers loads.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from videogen.config.presets import Preset
from videogen.errors import ModelLoadError

# The position in the clip (the built-in model's t channel reads it / 8: -1, a value no clip
# position takes) of an anchor frame: a frame of the shot's first segment that a continuing segment
# sees in place of its prefix's first latent frame (a preset's `anchor_frame`;
# `videogen.sampling.loop.denoise_segment`, `anchor=`).
SINK_POSITION = -8


@dataclass(frozen=True)
class ModelGeometry:
    spatial_factor: int  # pixels per latent pixel, each side (the VAE's spatial stride)
    temporal_factor: int  # frames per latent frame after the first (Wan's causal VAE: tf*k+1 frames)
    patch_size: tuple[int, int, int]  # (t, h, w) latent cells per transformer token
    latent_channels: int

    @property
    def size_multiple(self) -> tuple[int, int]:
        """(width, height) must be multiples of these: VAE stride x patch size."""
        _, ph, pw = self.patch_size
        return self.spatial_factor * pw, self.spatial_factor * ph


# The built-in model: a pixel codec that folds 4x4x4 pixel blocks (3 colours) into 192 channels,
# and a transformer patching 1x2x2, so one token covers 4 frames x 8x8 pixels.
BUILTIN_GEOMETRY = ModelGeometry(
    spatial_factor=4, temporal_factor=4, patch_size=(1, 2, 2), latent_channels=3 * 4 * 4**2
)


def geometry_for(preset: Preset) -> ModelGeometry:
    """`preset`'s geometry without loading it. ModelLoadError if a folder's configs are unreadable."""
    if preset.kind == "builtin":
        return BUILTIN_GEOMETRY
    if preset.path is None:
        raise ModelLoadError(f"preset {preset.name!r} names no model folder")
    return _folder_geometry(str(preset.path))


def geometry_of(model: Any) -> ModelGeometry:
    """A loaded `videogen.models.loader.VideoModel`'s geometry (its codec and transformer)."""
    codec = model.codec
    pt, ph, pw = (int(p) for p in model.patch_size)
    return ModelGeometry(
        int(codec.spatial_factor), int(codec.temporal_factor), (pt, ph, pw), int(codec.latent_channels)
    )


@lru_cache(maxsize=64)
def folder_config(folder: str, part: str) -> dict[str, Any]:
    """A model folder's `part/config.json` ("transformer", "vae"; "": its `model_index.json`),
    read once per process (the geometry and the work estimate both need the transformer's).
    ModelLoadError naming the folder and the file when it cannot be read."""
    file = Path(folder) / part / "config.json" if part else Path(folder) / "model_index.json"
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"--model: cannot read {folder!r}'s {part or 'model_index'} config: {exc}") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"--model: {file} is not a JSON object")
    return config


def safetensors_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in a .safetensors file by name, from its header alone (no tensor is
    read, no torch). ModelLoadError naming the file when it is not one."""
    try:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > Path(path).stat().st_size - 8:
                raise ValueError(f"its header claims {size} bytes, more than the file holds")
            header = json.loads(f.read(size))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        shapes = {k: tuple(int(n) for n in v["shape"]) for k, v in header.items() if k != "__metadata__"}
    except (OSError, ValueError, TypeError, KeyError, struct.error) as exc:
        raise ModelLoadError(f"cannot read {str(path)!r} as safetensors: {exc}") from None
    return shapes


def builtin_block_count(keys) -> int | None:
    """The transformer blocks that a built-in weights state's keys (`transformer.blocks.N.*`) name;
    None: none."""
    blocks = {int(k.split(".")[2]) for k in keys if k.startswith("transformer.blocks.")}
    return max(blocks) + 1 if blocks else None


def builtin_width(shapes) -> int | None:
    """The residual width of a built-in weights state (`name -> shape`: its output table's last
    axis); None: no such table."""
    shape = shapes.get("transformer.scale_shift_table")
    return int(shape[-1]) if shape is not None else None


@lru_cache(maxsize=32)
def _folder_geometry(folder: str) -> ModelGeometry:
    path = Path(folder)
    missing = [part for part in ("transformer", "vae") if not (path / part / "config.json").is_file()]
    if missing:  # the loader's words for it (`videogen.models.loader.check_model_folder`)
        raise ModelLoadError(f"--model: {folder!r} is incomplete: missing {', '.join(missing)}")
    vae, transformer = folder_config(folder, "vae"), folder_config(folder, "transformer")
    z_dim = int(vae.get("z_dim", 16))
    # Wan 2.2's 48-channel VAE strides 16x; configs that predate `scale_factor_spatial` leave it out.
    spatial = vae.get("scale_factor_spatial") or (16 if z_dim == 48 else 8)
    temporal = vae.get("scale_factor_temporal") or 4
    pt, ph, pw = (int(p) for p in transformer.get("patch_size", (1, 2, 2)))
    return ModelGeometry(int(spatial), int(temporal), (pt, ph, pw), z_dim)

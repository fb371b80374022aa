"""Image-to-video: the start image becomes the first latent frame of the first segment's prefix.

This is Wan 2.2 TI2V's image conditioning (the image's latent as the first latent frame at
timestep 0), done through the same prefix path as segment handoffs, so it follows the render's
continuation mode (`videogen.sampling.loop.denoise_segment`): held clean for models trained on a
clean first frame, re-noised every step for those that were not (Wan 2.1 T2V).

An image of another aspect ratio is fitted to the frame by `fit` (`IMAGE_FITS`): "cover" (the
default) scales it to cover the frame and keeps the centre, so nothing is distorted; "stretch"
scales each side to the frame (diffusers' pipelines do this; circles become ellipses); "contain"
scales it to fit inside and centres it on black bars.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from videogen.config.resolve import ResolvedSettings
from videogen.errors import InvalidOption


def fit_image(img: Any, width: int, height: int, fit: str = "cover") -> np.ndarray:
    """A PIL image -> (height, width, 3) uint8 filling the frame as `fit` says (module docstring)."""
    from PIL import Image

    img = img.convert("RGB")
    lanczos = Image.Resampling.LANCZOS
    if fit == "stretch":
        return np.asarray(img.resize((width, height), lanczos), np.uint8)
    if fit == "contain":
        scale = min(width / img.width, height / img.height)
        size = (min(width, max(1, round(img.width * scale))), min(height, max(1, round(img.height * scale))))
        canvas = Image.new("RGB", (width, height))  # black bars
        canvas.paste(img.resize(size, lanczos), ((width - size[0]) // 2, (height - size[1]) // 2))
        return np.asarray(canvas, np.uint8)
    if fit != "cover":
        raise ValueError(f"`fit` must be cover, stretch or contain, got {fit!r}")
    scale = max(width / img.width, height / img.height)
    img = img.resize((max(width, round(img.width * scale)), max(height, round(img.height * scale))), lanczos)
    left, top = (img.width - width) // 2, (img.height - height) // 2
    return np.asarray(img.crop((left, top, left + width, top + height)), np.uint8)


def encode_start_image(path: str, model: Any, settings: ResolvedSettings, fit: str = "cover") -> torch.Tensor:
    """An image file -> one latent frame (1, C, 1, h, w), fitted to the frame by `fit`."""
    from PIL import Image, UnidentifiedImageError

    from videogen.models.codec import uint8_to_video

    try:
        img = Image.open(path).convert("RGB")
    except (OSError, UnidentifiedImageError):
        raise InvalidOption("image", path, "not a readable image (PNG, JPEG, WebP ...)") from None
    frame = fit_image(img, settings.width, settings.height, fit)[None]  # (1, H, W, 3)
    return model.codec.encode(uint8_to_video(frame).to(model.device)).float().cpu()

"""Image-to-video: the start image becomes the first latent frame, held clean.

This is Wan 2.2 TI2V's image conditioning (the image's latent as the first latent frame at
timestep 0), done through the same clean-prefix path as segment handoffs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from videogen.config.resolve import ResolvedSettings
from videogen.errors import InvalidOption


def encode_start_image(path: str, model: Any, settings: ResolvedSettings) -> torch.Tensor:
    """An image file -> one clean latent frame (1, C, 1, h, w), resized to cover the frame and
    centre-cropped."""
    from PIL import Image, UnidentifiedImageError

    from videogen.models.codec import uint8_to_video

    try:
        img = Image.open(path).convert("RGB")
    except (OSError, UnidentifiedImageError):
        raise InvalidOption("image", path, "not a readable image (PNG, JPEG, WebP ...)") from None
    w, h = settings.width, settings.height
    scale = max(w / img.width, h / img.height)
    img = img.resize((max(w, round(img.width * scale)), max(h, round(img.height * scale))), Image.Resampling.LANCZOS)
    left, top = (img.width - w) // 2, (img.height - h) // 2
    frame = np.asarray(img.crop((left, top, left + w, top + h)), np.uint8)[None]  # (1, H, W, 3)
    return model.codec.encode(uint8_to_video(frame).to(model.device)).float().cpu()

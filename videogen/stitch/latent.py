"""Latent-space drift correction: AdaIN of per-channel latent mean/std toward the shot's first window.

Applied to a segment's latents before decode and before the handoff to the next segment, as
diffusers' LTX long-video pipeline does (factor 0.25), so the next segment starts from corrected
latents instead of inheriting the drift. torch is imported where it is used: the pixel path and
`videogen drift fix` run without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from videogen.stitch.config import DriftConfig

if TYPE_CHECKING:
    import torch


def latent_channel_stats(latents: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample, per-channel mean and std of `(B, C, F, h, w)` latents -> two `(B, C)` arrays."""
    x = latents.detach().float()
    return x.mean(dim=(2, 3, 4)).cpu().numpy().astype(np.float64), x.std(dim=(2, 3, 4)).cpu().numpy().astype(np.float64)


def adain_latents(
    latents: torch.Tensor, anchor_mean: np.ndarray, anchor_std: np.ndarray, config: DriftConfig
) -> torch.Tensor:
    """Move each channel's mean/std toward the anchor's by `latent_factor * strength`.

    Clamped like the pixel path: the std ratio within [1/max_std_ratio, max_std_ratio] and the
    mean shift within one anchor std per channel. With `ramp`, the weight rises linearly over the
    latent frames (0 at the first, full at the last), so the frames continuing the previous
    segment are untouched and the tail handed to the next segment is fully corrected.
    """
    import torch

    k = config.latent_factor * config.strength
    if config.mode == "off" or k == 0:
        return latents
    mean, std = latent_channel_stats(latents)
    r = config.max_std_ratio
    ratio = np.clip(anchor_std / np.maximum(std, 1e-6), 1 / r, r)
    shift = np.clip(anchor_mean - mean, -anchor_std, anchor_std)
    x = latents.float()
    m = torch.as_tensor(mean, dtype=x.dtype)[:, :, None, None, None]  # (B, C, 1, 1, 1)
    ratio_t = torch.as_tensor(ratio, dtype=x.dtype)[:, :, None, None, None]
    target = (x - m) * ratio_t + m + torch.as_tensor(shift, dtype=x.dtype)[:, :, None, None, None]
    F = x.shape[2]
    if config.ramp and F > 1:
        w = torch.linspace(0, 1, F, dtype=x.dtype)[None, None, :, None, None] * k  # (1, 1, F, 1, 1)
    else:
        w = torch.full((1, 1, 1, 1, 1), k, dtype=x.dtype)
    return (x + (target - x) * w).to(latents.dtype)

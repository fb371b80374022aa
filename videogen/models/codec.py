"""Latent codecs: pixels <-> the latent space the transformer denoises.

Two implementations behind one interface:

* `WanVAECodec` wraps diffusers' `AutoencoderKLWan` (Wan 2.1: 4x temporal, 8x spatial, 16
  channels; Wan 2.2 TI2V: 4x16x16, 48 channels), including the per-channel latent normalisation
  the Wan pipelines apply. The VAE runs in fp32: a half-precision VAE is a known drift source.
* `PixelCodec`, the built-in model's codec: it folds `tf x s x s` blocks of pixels into channels
  (space-to-depth in time and space), losslessly. It follows the same frame rule as Wan's causal
  VAE (tf*k+1 frames -> k+1 latent frames; the first latent frame holds one frame, stored `tf`
  times), so the planner, handoff and stitcher treat both alike. With a `TemporalRefiner`
  (`videogen.models.refiner`, the preset's `decoder`) its decode also spreads each latent frame's
  motion over its video frames, as Wan's learned decoder does; encode stays the exact inverse of
  the lossless decode.

Video tensors are (B, 3, T, H, W) in [-1, 1]; latents are (B, C, F, h, w).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch
from einops import rearrange


class LatentCodec(Protocol):
    temporal_factor: int
    spatial_factor: int
    latent_channels: int

    def encode(self, video: torch.Tensor) -> torch.Tensor: ...

    def decode(self, latents: torch.Tensor) -> torch.Tensor: ...

    # A decode good enough to judge a health-gate preview (a blurred clean-frame prediction,
    # `videogen.sampling.health.run_gate`): the cheapest the codec has.
    def glance(self, latents: torch.Tensor) -> torch.Tensor: ...


class PixelCodec:
    """Space-to-depth codec. Channels = 3 * tf * s * s. `refiner`: a `TemporalRefiner` applied on
    decode (None: decode is the exact inverse of encode)."""

    def __init__(self, temporal_factor: int = 4, spatial_factor: int = 4, refiner=None) -> None:
        self.temporal_factor = temporal_factor
        self.spatial_factor = spatial_factor
        self.latent_channels = 3 * temporal_factor * spatial_factor**2
        self.refiner = refiner

    def encode(self, video: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = video.shape
        tf, s = self.temporal_factor, self.spatial_factor
        if (t - 1) % tf or h % s or w % s:
            raise ValueError(f"PixelCodec needs {tf}k+1 frames and sides divisible by {s}, got {t}x{h}x{w}")
        # The first frame alone fills a whole group, repeated tf times (Wan's causal first frame).
        video = torch.cat([video[:, :, :1].expand(b, c, tf, h, w), video[:, :, 1:]], dim=2)
        return rearrange(video, "b c (f pf) (h ph) (w pw) -> b (c pf ph pw) f h w", pf=tf, ph=s, pw=s)

    def decode(self, latents: torch.Tensor, refine: bool = True) -> torch.Tensor:
        """The video; `refine` False: the lossless inverse of `encode`, without the refiner."""
        ch = latents.shape[1]
        tf, s = self.temporal_factor, self.spatial_factor
        if ch != self.latent_channels:
            raise ValueError(f"PixelCodec expects {self.latent_channels} channels, got {ch}")
        video = rearrange(latents, "b (c pf ph pw) f h w -> b c (f pf) (h ph) (w pw)", c=3, pf=tf, ph=s, pw=s)
        if refine and self.refiner is not None:  # each latent frame after the first, from itself and the one before
            video = self.refiner.refine(video)
        # Latent frame 0 decodes to one frame: the last of its group. For a clip's true first frame
        # all tf copies are equal; for a handed-over prefix (a mid-clip latent frame placed first) the
        # last frame is the one that immediately precedes the next latent frame's frames.
        return video[:, :, tf - 1 :].contiguous()

    def glance(self, latents: torch.Tensor) -> torch.Tensor:
        """The lossless decode, without the refiner: a gate preview judges where objects are and
        how many, which the refiner does not change, at a thirtieth of its cost (the refiner is
        most of a decode's time: docs/builtin-model.md, "Previews")."""
        return self.decode(latents, refine=False)


class WanVAECodec:
    """diffusers `AutoencoderKLWan` with Wan's latent normalisation. `tiling` ("auto", "on", "off";
    `videogen.models.memory.vae_tiling_on`) decides per call whether the VAE decodes in spatial
    tiles (diffusers' `tiled_decode`, 256-pixel tiles at a 192 stride). Under CPU offload
    (`videogen.models.memory.apply_offload`) the VAE lives on the CPU: `before_use` moves it to
    `execution_device` before each call."""

    def __init__(self, vae, tiling: str = "auto") -> None:
        self.vae = vae
        self.tiling = tiling
        self.execution_device: torch.device | None = None  # None: where the VAE's weights are
        self.before_use: Callable[[], None] | None = None
        cfg = vae.config
        self.temporal_factor = int(getattr(cfg, "scale_factor_temporal", None) or 4)
        self.spatial_factor = int(getattr(cfg, "scale_factor_spatial", None) or 8)
        self.latent_channels = int(cfg.z_dim)
        self._mean = torch.tensor(cfg.latents_mean, dtype=torch.float32).view(1, -1, 1, 1, 1)
        self._inv_std = 1.0 / torch.tensor(cfg.latents_std, dtype=torch.float32).view(1, -1, 1, 1, 1)

    @property
    def device(self) -> torch.device:
        return self.execution_device or next(self.vae.parameters()).device

    def _prepare(self, width: int, height: int) -> None:
        from videogen.models.memory import vae_tiling_on

        if self.before_use is not None:
            self.before_use()
        self.vae.use_tiling = vae_tiling_on(self.tiling, width, height)

    @torch.no_grad()
    def encode(self, video: torch.Tensor) -> torch.Tensor:
        self._prepare(video.shape[-1], video.shape[-2])
        x = video.to(self.device, self.vae.dtype)
        latents = self.vae.encode(x).latent_dist.mode().float()
        return (latents - self._mean.to(latents.device)) * self._inv_std.to(latents.device)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        self._prepare(latents.shape[-1] * self.spatial_factor, latents.shape[-2] * self.spatial_factor)
        z = latents.to(self.device, torch.float32)
        z = z / self._inv_std.to(z.device) + self._mean.to(z.device)
        video = self.vae.decode(z.to(self.vae.dtype), return_dict=False)[0]
        return video.float().clamp(-1, 1)

    def glance(self, latents: torch.Tensor) -> torch.Tensor:
        """The full decode: the VAE has no cheaper path to pixels."""
        return self.decode(latents)


def video_to_uint8(video: torch.Tensor) -> np.ndarray:
    """(B=1, 3, T, H, W) in [-1, 1] -> numpy uint8 (T, H, W, 3)."""
    x = ((video[0].float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return rearrange(x, "c t h w -> t h w c").cpu().numpy()


def uint8_to_video(frames: np.ndarray) -> torch.Tensor:
    """numpy uint8 (T, H, W, 3) -> (1, 3, T, H, W) float32 in [-1, 1]."""
    x = torch.as_tensor(frames).float()
    return rearrange(x / 127.5 - 1.0, "t h w c -> 1 c t h w")

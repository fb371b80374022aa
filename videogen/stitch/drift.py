"""Colour drift in chained videos: CIELAB conversion, drift metrics, and per-segment correctors.

Chained segments drift (each a little darker or more tinted than the last). The correction
follows the practice collected in `shared/REFERENCES.md` ("Long video: chaining and drift"):

* anchor to the *first* segment of a shot (anchoring to the previous one follows the drift);
* one transform per segment, never per frame (per-frame matching flickers);
* clamp how far statistics may move, scale by `strength`, ramp between segments;
* modes: Reinhard-style mean/std transfer in CIELAB (`lab-meanstd`, as InfiniteTalk does toward
  its input image) and a Monge-Kantorovich linear map of the LAB covariance (`mkl`, Pitie &
  Kokaram 2007, as ComfyUI's ColorMatch offers); optionally an AdaIN of per-channel latent
  mean/std toward the first window before the handoff (diffusers' LTX long pipeline, factor 0.25).

Both pixel modes are an affine map in LAB, `lab' = A @ lab + t`. Such a map is a fixed RGB->RGB
function, so it is baked into a 128^3 lookup table (`ColorLUT`): applying it is one gather per
pixel, which is what makes `videogen drift fix` run at hundreds of frames/s on two cores. The LUT
is indexed by the top 7 bits of each channel and evaluated at the bin centres: measured error vs
the exact per-pixel map is <= 1 level of 8 bits (`tests/test_drift.py`), below H.264's own loss.

Metrics (`frame_lab_stats`, `DriftReport`): per-frame CIELAB mean/std, per-segment dE76/dE2000
of the mean against the anchor, start-end contrast over the first/last 15% of frames, seam jump
(colour step across a seam / p95 of in-segment frame-to-frame steps), flicker index (variance of
per-frame L* around a 5-frame moving average).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

# ----------------------------------------------------------------------------------------------
# sRGB (IEC 61966-2-1) <-> CIELAB, D65 white
# ----------------------------------------------------------------------------------------------

# linear sRGB -> XYZ (D65), IEC 61966-2-1
_RGB2XYZ = np.array(
    [[0.4124564, 0.3575761, 0.1804375],
     [0.2126729, 0.7151522, 0.0721750],
     [0.0193339, 0.1191920, 0.9503041]]
)  # fmt: skip
_XYZ2RGB = np.linalg.inv(_RGB2XYZ)
_WHITE_D65 = np.array([0.95047, 1.0, 1.08883])
_EPS = 216 / 24389  # CIE: (6/29)^3
_KAPPA = 24389 / 27

# LAB from f = (f(X/Xn), f(Y/Yn), f(Z/Zn)):  lab = _F2LAB @ f + (-16, 0, 0)
_F2LAB = np.array([[0.0, 116.0, 0.0], [500.0, -500.0, 0.0], [0.0, 200.0, -200.0]])


def srgb_to_linear(v: np.ndarray) -> np.ndarray:
    """sRGB-encoded values in [0, 1] -> linear light."""
    v = np.asarray(v, np.float64)
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)


def linear_to_srgb(v: np.ndarray) -> np.ndarray:
    """Linear light -> sRGB-encoded values (not clipped)."""
    v = np.asarray(v, np.float64)
    return np.where(v <= 0.0031308, v * 12.92, 1.055 * np.power(np.maximum(v, 0.0031308), 1 / 2.4) - 0.055)


# uint8 -> linear light, exact for every code value (a 256-entry table beats pow per pixel)
_U8_TO_LINEAR = srgb_to_linear(np.arange(256) / 255.0)
_U8_TO_LINEAR32 = _U8_TO_LINEAR.astype(np.float32)
# linear light -> uint8 through a 65536-entry table: step 1/65535 in linear light is < 0.2 of
# an 8-bit code even at black, where sRGB is steepest (slope 12.92).
_LINEAR_TO_U8 = np.clip(np.round(linear_to_srgb(np.arange(65536) / 65535.0) * 255), 0, 255).astype(np.uint8)


def _lab_f(t: np.ndarray) -> np.ndarray:
    return np.where(t > _EPS, np.cbrt(t), (_KAPPA * t + 16) / 116)


def _lab_f_inv(f: np.ndarray) -> np.ndarray:
    f3 = f**3
    return np.where(f3 > _EPS, f3, (116 * f - 16) / _KAPPA)


def linear_to_lab(lin: np.ndarray) -> np.ndarray:
    """Linear sRGB `(..., 3)` -> CIELAB `(..., 3)` (D65)."""
    xyz = np.asarray(lin) @ (_RGB2XYZ / _WHITE_D65[:, None]).T.astype(np.asarray(lin).dtype)
    return _lab_f(xyz) @ _F2LAB.T.astype(xyz.dtype) + np.array([-16.0, 0.0, 0.0], xyz.dtype)


def rgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB `(..., 3)` -> CIELAB `(..., 3)` float64. uint8 input is 0..255, float input 0..1."""
    rgb = np.asarray(rgb)
    lin = _U8_TO_LINEAR[rgb] if rgb.dtype == np.uint8 else srgb_to_linear(rgb)
    return linear_to_lab(lin)


def lab_to_linear(lab: np.ndarray) -> np.ndarray:
    """CIELAB `(..., 3)` -> linear sRGB `(..., 3)`, not clipped (out-of-gamut stays visible)."""
    lab = np.asarray(lab, np.float64)
    fy = (lab[..., 0] + 16) / 116
    f = np.stack([fy + lab[..., 1] / 500, fy, fy - lab[..., 2] / 200], axis=-1)
    xyz = _lab_f_inv(f) * _WHITE_D65
    return xyz @ _XYZ2RGB.T


def lab_to_rgb(lab: np.ndarray) -> np.ndarray:
    """CIELAB -> sRGB-encoded float in [0, 1] (clipped to the gamut)."""
    return np.clip(linear_to_srgb(np.clip(lab_to_linear(lab), 0.0, None)), 0.0, 1.0)


def delta_e76(lab1: np.ndarray, lab2: np.ndarray) -> np.ndarray:
    """CIE 1976 colour difference: Euclidean distance in LAB (just-noticeable ~ 2.3)."""
    return np.linalg.norm(np.asarray(lab1, np.float64) - np.asarray(lab2, np.float64), axis=-1)


def delta_e2000(lab1: np.ndarray, lab2: np.ndarray) -> np.ndarray:
    """CIEDE2000 (kL = kC = kH = 1), following Sharma, Wu & Dalal (2005), incl. their hue notes."""
    lab1, lab2 = np.asarray(lab1, np.float64), np.asarray(lab2, np.float64)
    L1, a1, b1 = lab1[..., 0], lab1[..., 1], lab1[..., 2]
    L2, a2, b2 = lab2[..., 0], lab2[..., 1], lab2[..., 2]
    C1, C2 = np.hypot(a1, b1), np.hypot(a2, b2)
    Cbar7 = ((C1 + C2) / 2) ** 7
    G = 0.5 * (1 - np.sqrt(Cbar7 / (Cbar7 + 25.0**7)))
    a1p, a2p = (1 + G) * a1, (1 + G) * a2
    C1p, C2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p = np.degrees(np.arctan2(b1, a1p)) % 360
    h2p = np.degrees(np.arctan2(b2, a2p)) % 360
    dLp = L2 - L1
    dCp = C2p - C1p
    dh = h2p - h1p
    dh = np.where(dh > 180, dh - 360, np.where(dh < -180, dh + 360, dh))
    dh = np.where(C1p * C2p == 0, 0.0, dh)
    dHp = 2 * np.sqrt(C1p * C2p) * np.sin(np.radians(dh) / 2)
    Lbarp = (L1 + L2) / 2
    Cbarp = (C1p + C2p) / 2
    hsum = h1p + h2p
    hbarp = np.where(
        C1p * C2p == 0,
        hsum,
        np.where(np.abs(h1p - h2p) <= 180, hsum / 2, np.where(hsum < 360, (hsum + 360) / 2, (hsum - 360) / 2)),
    )
    T = (
        1
        - 0.17 * np.cos(np.radians(hbarp - 30))
        + 0.24 * np.cos(np.radians(2 * hbarp))
        + 0.32 * np.cos(np.radians(3 * hbarp + 6))
        - 0.20 * np.cos(np.radians(4 * hbarp - 63))
    )
    dtheta = 30 * np.exp(-(((hbarp - 275) / 25) ** 2))
    Cbarp7 = Cbarp**7
    RC = 2 * np.sqrt(Cbarp7 / (Cbarp7 + 25.0**7))
    SL = 1 + 0.015 * (Lbarp - 50) ** 2 / np.sqrt(20 + (Lbarp - 50) ** 2)
    SC = 1 + 0.045 * Cbarp
    SH = 1 + 0.015 * Cbarp * T
    RT = -np.sin(np.radians(2 * dtheta)) * RC
    return np.sqrt((dLp / SL) ** 2 + (dCp / SC) ** 2 + (dHp / SH) ** 2 + RT * (dCp / SC) * (dHp / SH))


# ----------------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------------

STATS_PIXELS_PER_FRAME = 8192  # subsample target: the mean of 8k pixels is stable to << 0.1 dE


def auto_stride(height: int, width: int, target: int = STATS_PIXELS_PER_FRAME) -> int:
    """Spatial stride that leaves about `target` pixels of an HxW frame for statistics."""
    return max(1, int(round(math.sqrt(height * width / target))))


def _subsample(frames: np.ndarray, stride: int) -> np.ndarray:
    # (T, H, W, 3|4) uint8 -> (T, H/s, W/s, 3); offset by s//2 so a 1-px border never dominates
    o = stride // 2
    return frames[:, o::stride, o::stride, :3]


_RGB2XYZN = _RGB2XYZ / _WHITE_D65[:, None]  # linear RGB -> XYZ / white
# XYZ / white of a pixel = _XYZ_RG[:, r | g << 8] + _XYZ_B[:, b]: two gathers from small
# (L2-resident) tables per channel instead of three gathers and a 3x3 product
_XYZ_RG = (_RGB2XYZN[:, :1, None] * _U8_TO_LINEAR[None, None, :] + _RGB2XYZN[:, 1:2, None] * _U8_TO_LINEAR[None, :, None]).reshape(3, -1).astype(np.float32)
_XYZ_B = (_RGB2XYZN[:, 2:3] * _U8_TO_LINEAR[None, :]).astype(np.float32)
_STATS_BLOCK = 1 << 16  # pixels per step of the statistics (cache-sized)


def _lab_moments(frames: np.ndarray, stride: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame CIELAB mean `(T, 3)` and covariance `(T, 3, 3)` (float64) of the strided
    subsample of `(T, H, W, 3|4)` uint8 frames. Works on packed pixels in cache-sized blocks of
    frames, planar (reductions run along contiguous memory), float32 LAB, float64 moments."""
    s = stride or auto_stride(frames.shape[1], frames.shape[2])
    o = s // 2
    T = len(frames)
    if frames.shape[-1] == 4:
        packed = frames.view(np.uint32)[..., 0][:, o::s, o::s]  # (T, h, w) strided view
    else:
        packed = frames[:, o::s, o::s, 0]
    P = packed.shape[1] * packed.shape[2]
    mean, cov = np.empty((T, 3)), np.empty((T, 3, 3))
    chunk = max(1, _STATS_BLOCK // max(P, 1))
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        if frames.shape[-1] == 4:
            words = np.ascontiguousarray(packed[t0:t1]).reshape(-1)
        else:
            sub = frames[t0:t1, o::s, o::s]
            words = sub[..., 0].astype(np.uint32).reshape(-1)
            words |= sub[..., 1].reshape(-1).astype(np.uint32) << np.uint32(8)
            words |= sub[..., 2].reshape(-1).astype(np.uint32) << np.uint32(16)
        rg = words & np.uint32(0xFFFF)
        bb = words >> np.uint32(16)
        bb &= np.uint32(0xFF)
        n = len(words)
        xyz = np.empty((3, n), np.float32)
        tmp = np.empty(n, np.float32)
        for c in range(3):
            np.take(_XYZ_RG[c], rg, out=xyz[c], mode="wrap")
            xyz[c] += np.take(_XYZ_B[c], bb, out=tmp, mode="wrap")
        f = np.cbrt(xyz)
        dark = xyz <= np.float32(_EPS)
        if dark.any():
            np.copyto(f, xyz * np.float32(_KAPPA / 116) + np.float32(16 / 116), where=dark)
        lab = np.empty((t1 - t0, 3, P), np.float32)  # frame-major: per-frame 3xP blocks
        fx, fy, fz = (v.reshape(t1 - t0, P) for v in f)
        np.multiply(fy, np.float32(116), out=lab[:, 0])
        lab[:, 0] -= np.float32(16)
        np.subtract(fx, fy, out=lab[:, 1])
        lab[:, 1] *= np.float32(500)
        np.subtract(fy, fz, out=lab[:, 2])
        lab[:, 2] *= np.float32(200)
        m = lab.mean(2, dtype=np.float64)  # (t, 3)
        lab -= m.astype(np.float32)[:, :, None]
        mean[t0:t1] = m
        cov[t0:t1] = np.matmul(lab, lab.transpose(0, 2, 1)) / np.float32(P)
    return mean, cov


def frame_lab_stats(frames: np.ndarray, stride: int | None = None) -> np.ndarray:
    """Per-frame CIELAB mean and std: `(T, 6)` = (L, a, b means, L, a, b stds), on a subsample."""
    frames = np.asarray(frames)
    if frames.ndim == 3:
        frames = frames[None]
    if len(frames) == 0:
        return np.zeros((0, 6))
    mean, cov = _lab_moments(frames, stride)
    std = np.sqrt(np.maximum(np.diagonal(cov, axis1=1, axis2=2), 0.0))
    return np.concatenate([mean, std], axis=1)


@dataclass
class LabStats:
    """CIELAB statistics of one segment (or a reference image): mean (3,), std (3,), cov (3, 3)."""

    mean: np.ndarray
    std: np.ndarray
    cov: np.ndarray

    @classmethod
    def of_frames(cls, frames: np.ndarray, stride: int | None = None) -> "LabStats":
        """Statistics over all pixels of all frames `(T, H, W, 3|4)`, on a strided subsample."""
        frames = np.asarray(frames)
        if frames.ndim == 3:
            frames = frames[None]
        return cls.of_moments(*_lab_moments(frames, stride))

    @classmethod
    def of_moments(cls, mean: np.ndarray, cov: np.ndarray) -> "LabStats":
        """Pool per-frame means `(T, 3)` and covariances `(T, 3, 3)` of equal-size frames (the law
        of total covariance: the mean within-frame covariance plus that of the frame means)."""
        m = mean.mean(0)
        d = mean - m
        c = cov.mean(0) + d.T @ d / len(mean)
        return cls(mean=m, std=np.sqrt(np.maximum(np.diag(c), 0.0)), cov=c)

    def to_dict(self) -> dict:
        return {"mean": self.mean.copy(), "std": self.std.copy(), "cov": self.cov.copy()}

    @classmethod
    def from_dict(cls, d: dict) -> "LabStats":
        return cls(np.asarray(d["mean"], np.float64), np.asarray(d["std"], np.float64), np.asarray(d["cov"], np.float64))


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------

MODES = ("off", "lab-meanstd", "mkl")
BLEND_SPACES = ("linear", "lab")


@dataclass
class DriftConfig:
    """How the stitcher corrects drift and blends seams. Validated on construction."""

    mode: str = "lab-meanstd"  # "off" | "lab-meanstd" (Reinhard in CIELAB) | "mkl" (covariance map)
    strength: float = 1.0  # 0 = identity, 1 = full move to the anchor (after clamping)
    max_shift: float = 30.0  # the segment mean may move at most this far (dE76, LAB units)
    max_std_ratio: float = 2.0  # per-axis std may be scaled by at most x2 or /2
    ramp: bool = True  # ramp from the previous segment's transform (start) to this one's (end)
    latent: bool = False  # also AdaIN the latents toward the shot's first window before handoff
    latent_factor: float = 0.25  # fraction of the latent AdaIN applied (LTX long pipeline: 0.25)
    reference_image: str | os.PathLike | np.ndarray | None = None  # anchor to an image instead
    blend_space: str = "linear"  # seam crossfade in "linear" light or "lab" (measured: docs/drift.md)
    stats_stride: int | None = None  # spatial subsample stride for statistics; None = ~8k px/frame

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"`mode` must be one of {', '.join(MODES)}, got {self.mode!r}")
        _check_range("strength", self.strength, 0.0, 1.0)
        _check_range("latent_factor", self.latent_factor, 0.0, 1.0)
        if not _is_number(self.max_shift) or not self.max_shift >= 0:
            raise ValueError(f"`max_shift` must be a number >= 0 (LAB units), got {self.max_shift!r}")
        if not _is_number(self.max_std_ratio) or not self.max_std_ratio >= 1:
            raise ValueError(f"`max_std_ratio` must be a number >= 1, got {self.max_std_ratio!r}")
        if self.blend_space not in BLEND_SPACES:
            raise ValueError(f"`blend_space` must be one of {', '.join(BLEND_SPACES)}, got {self.blend_space!r}")
        if self.stats_stride is not None and (not isinstance(self.stats_stride, int) or self.stats_stride < 1):
            raise ValueError(f"`stats_stride` must be a positive integer or None, got {self.stats_stride!r}")
        for name in ("ramp", "latent"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be a bool, got {getattr(self, name)!r}")
        if isinstance(self.reference_image, (str, os.PathLike)) and not Path(self.reference_image).is_file():
            raise ValueError(f"`reference_image` {str(self.reference_image)!r} does not exist")


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool) and math.isfinite(v)


def _check_range(name: str, v, lo: float, hi: float) -> None:
    if not _is_number(v) or not lo <= v <= hi:
        raise ValueError(f"`{name}` must be a number in [{lo:g}, {hi:g}], got {v!r}")


def load_reference_stats(image: str | os.PathLike | np.ndarray, stride: int | None = None) -> LabStats:
    """LAB statistics of a reference image (path or uint8 `(H, W, 3)` array)."""
    if isinstance(image, np.ndarray):
        arr = image
    else:
        from PIL import Image

        try:
            with Image.open(image) as im:
                arr = np.asarray(im.convert("RGB"))
        except OSError as exc:
            raise ValueError(f"`reference_image` {str(image)!r} is not a readable image: {exc}") from exc
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[-1] not in (3, 4):
        raise ValueError(f"`reference_image` must be uint8 (H, W, 3), got {arr.dtype} {arr.shape}")
    return LabStats.of_frames(arr[None], stride)


# ----------------------------------------------------------------------------------------------
# Transforms: affine maps in LAB, fitted per segment
# ----------------------------------------------------------------------------------------------


@dataclass
class ColorTransform:
    """`lab' = matrix @ lab + offset`, one per segment."""

    matrix: np.ndarray  # (3, 3)
    offset: np.ndarray  # (3,)

    @classmethod
    def identity(cls) -> "ColorTransform":
        return cls(np.eye(3), np.zeros(3))

    @property
    def is_identity(self) -> bool:
        return bool(np.allclose(self.matrix, np.eye(3), atol=1e-9) and np.allclose(self.offset, 0, atol=1e-9))

    def apply_lab(self, lab: np.ndarray) -> np.ndarray:
        return lab @ self.matrix.T + self.offset

    def to_dict(self) -> dict:
        return {"matrix": self.matrix.copy(), "offset": self.offset.copy()}

    @classmethod
    def from_dict(cls, d: dict) -> "ColorTransform":
        return cls(np.asarray(d["matrix"], np.float64), np.asarray(d["offset"], np.float64))


def _sqrtm_psd(m: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh((m + m.T) / 2)
    return (v * np.sqrt(np.maximum(w, 0.0))) @ v.T


def mkl_matrix(cov_src: np.ndarray, cov_dst: np.ndarray) -> np.ndarray:
    """Monge-Kantorovich linear map T with T cov_src T^T = cov_dst (Pitie & Kokaram 2007).

    T = S^-1/2 (S^1/2 D S^1/2)^1/2 S^-1/2 (S = cov_src, D = cov_dst): the symmetric positive
    map that moves the pixel cloud least while matching its covariance.
    """
    reg = 1e-3 * np.eye(3)  # flat (zero-variance) channels would make S singular
    s_half = _sqrtm_psd(cov_src + reg)
    s_ihalf = np.linalg.inv(s_half)
    return s_ihalf @ _sqrtm_psd(s_half @ (cov_dst + reg) @ s_half) @ s_ihalf


def fit_transform(src: LabStats, dst: LabStats, config: DriftConfig) -> ColorTransform:
    """The transform moving `src` statistics toward `dst`, clamped and scaled by `strength`.

    Clamps: the linear part's scale factors (per axis for `lab-meanstd`, eigenvalues of the
    symmetric MKL map) stay within [1/max_std_ratio, max_std_ratio]; the mean moves at most
    `max_shift` (Euclidean, LAB units). Then both are scaled by `strength` toward identity.
    """
    if config.mode == "off" or config.strength == 0:
        return ColorTransform.identity()
    r = float(config.max_std_ratio)
    if config.mode == "lab-meanstd":
        ratio = np.where(src.std > 1e-3, dst.std / np.maximum(src.std, 1e-3), 1.0)
        a = np.diag(np.clip(ratio, 1 / r, r))
    else:  # mkl
        w, v = np.linalg.eigh(mkl_matrix(src.cov, dst.cov))
        a = (v * np.clip(w, 1 / r, r)) @ v.T
    shift = dst.mean - src.mean
    norm = float(np.linalg.norm(shift))
    if norm > config.max_shift:
        shift = shift * (config.max_shift / norm)
    s = float(config.strength)
    a = np.eye(3) + s * (a - np.eye(3))
    target_mean = src.mean + s * shift
    # the map keeps the segment's own mean as the pivot: mean -> target_mean, spread scaled by a
    return ColorTransform(matrix=a, offset=target_mean - a @ src.mean)


# ----------------------------------------------------------------------------------------------
# LUT application: a transform baked into a 7-bit-per-channel table of packed RGB0 words
# ----------------------------------------------------------------------------------------------

_LUT_BITS = 7
_LUT_LEVELS = 1 << _LUT_BITS  # 128 bins per channel, 2 code values each
_LUT_INDEX_MASK = np.uint32(0x7F7F7F)  # (rgb0 word >> 1) & mask = r7 | g7 << 8 | b7 << 16
_LUT_CACHE: dict[str, object] = {}
_LUT_BLOCK = 2 * _LUT_LEVELS * _LUT_LEVELS  # bin centres per build step: two blue planes, cache-sized
_F2LAB_INV = np.linalg.inv(_F2LAB)
_LAB_OFFSET = np.array([-16.0, 0.0, 0.0])
_F_KNEE = np.float32(6 / 29)  # f(t) above this is a cube root; below, linear (t <= _EPS)


def _lut_grid() -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The 128^3 bin centres as CIELAB f-values `(3, 2^21)` float32 (planar: fX, fY, fZ; index
    r | g << 7 | b << 14) and the linear->code tables pre-shifted into the R, G, B bytes; cached."""
    if "f" not in _LUT_CACHE:
        k = np.arange(_LUT_LEVELS)
        centre = (2 * k + 0.5).astype(np.float64)  # codes 2k and 2k+1 share the bin
        lin = srgb_to_linear(centre / 255.0)
        grid = np.empty((3, _LUT_LEVELS**3), np.float32)
        for i in range(3):  # XYZ / white is a sum of one term per channel: broadcast, no gathers
            m = _RGB2XYZ[i] / _WHITE_D65[i]
            t = (m[0] * lin)[None, None, :] + (m[1] * lin)[None, :, None] + (m[2] * lin)[:, None, None]
            grid[i] = _lab_f(t).reshape(-1)  # index r | g << 7 | b << 14
        _LUT_CACHE["f"] = grid
        t = _LINEAR_TO_U8.astype(np.uint32)
        _LUT_CACHE["codes"] = (t, t << 8, t << 16)
    return _LUT_CACHE["f"], _LUT_CACHE["codes"]


class ColorLUT:
    """A `ColorTransform` baked into a packed RGB0 table: one gather per pixel.

    The table has 2^23 uint32 entries (32 MiB) of which the 128^3 reachable ones are filled:
    indexing with `(word >> 1) & 0x7F7F7F` needs no unpacking of the channels.

    Built exactly at every bin centre, in the CIELAB f-space: with `lab = F2LAB f + c`, the LAB
    map `lab' = A lab + t` is `f' = M f + m` (M = F2LAB^-1 A F2LAB), so each centre costs one 3x3
    product, a cube (the inverse of f) and the 3x3 XYZ->RGB product. numpy in cache-sized blocks
    of 32k centres, one thread: ~15 ms for the 2^21 centres (the earlier torch version over whole
    arrays, 2 threads: 80-600 ms, bounded by memory traffic and by contention with ffmpeg).
    """

    def __init__(self, transform: ColorTransform) -> None:
        grid, (code_r, code_g, code_b) = _lut_grid()
        m_f = (_F2LAB_INV @ transform.matrix @ _F2LAB).astype(np.float32)
        t_f = (_F2LAB_INV @ (transform.matrix @ _LAB_OFFSET + transform.offset - _LAB_OFFSET)).astype(np.float32)[:, None]
        # f' -> XYZ / white -> linear RGB, scaled to the 65536-entry code table
        to_lin = ((_XYZ2RGB * _WHITE_D65[None, :]) * 65535).astype(np.float32)
        n = _LUT_BLOCK
        f = np.empty((3, n), np.float32)
        xyz, low, lin = np.empty_like(f), np.empty_like(f), np.empty_like(f)
        dark = np.empty((3, n), bool)
        idx = np.empty((3, n), np.int32)  # int32 + mode="wrap": no index conversion in np.take
        planes = n // (_LUT_LEVELS * _LUT_LEVELS)
        packed, tmp = np.empty((planes, _LUT_LEVELS, _LUT_LEVELS), np.uint32), np.empty(n, np.uint32)
        table = np.zeros((_LUT_LEVELS, 256, 256), np.uint32)  # [b7, g, r]: r7 | g7 << 8 | b7 << 16
        for s in range(0, grid.shape[1], n):
            np.matmul(m_f, grid[:, s : s + n], out=f)
            for i in range(3):
                f[i] += t_f[i, 0]
            np.multiply(f, f, out=xyz)
            xyz *= f  # t = f^3 above the knee ...
            np.less_equal(f, _F_KNEE, out=dark)
            if dark.any():  # only blocks near black
                np.multiply(f, np.float32(116 / _KAPPA), out=low)
                low -= np.float32(16 / _KAPPA)  # ... (116 f - 16) / kappa below it
                np.copyto(xyz, low, where=dark)
            np.matmul(to_lin, xyz, out=lin)
            np.clip(lin, 0, 65535, out=lin)
            np.rint(lin, out=lin)
            idx[...] = lin
            flat = packed.reshape(-1)
            np.take(code_r, idx[0], out=flat, mode="wrap")
            np.take(code_g, idx[1], out=tmp, mode="wrap")
            flat |= tmp
            np.take(code_b, idx[2], out=tmp, mode="wrap")
            b0 = s // (_LUT_LEVELS * _LUT_LEVELS)  # the last OR writes straight into the table
            np.bitwise_or(packed, tmp.reshape(packed.shape), out=table[b0 : b0 + planes, :_LUT_LEVELS, :_LUT_LEVELS])
        self.table = table.reshape(-1)

    def lookup(self, words: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Packed RGB0 words `(...)` uint32 -> transformed packed words."""
        idx = np.right_shift(words, 1)
        np.bitwise_and(idx, _LUT_INDEX_MASK, out=idx)
        return np.take(self.table, idx, out=out)


def to_rgb0(frames: np.ndarray) -> np.ndarray:
    """`(T, H, W, 3)` uint8 -> `(T, H, W, 4)` with a zero 4th byte (packed-word friendly)."""
    if frames.shape[-1] == 4:
        return frames
    out = np.zeros(frames.shape[:-1] + (4,), np.uint8)
    out[..., :3] = frames
    return out


_LANES = np.uint32(0x00FF00FF)  # bytes 0 and 2 of a packed word: two 16-bit lanes


def _mix_words(start: np.ndarray, end: np.ndarray, wq: int, out: np.ndarray, t1: np.ndarray, t2: np.ndarray) -> None:
    """`out = (start * (256 - wq) + end * wq + 128) >> 8` per byte of packed words, in uint32 lanes
    (R, B in one pass, G and the 4th byte in another): 255 * 256 + 128 fits a 16-bit lane."""
    np.bitwise_and(start, _LANES, out=t1)
    t1 *= np.uint32(256 - wq)
    np.bitwise_and(end, _LANES, out=t2)
    t2 *= np.uint32(wq)
    t1 += t2
    t1 += np.uint32(0x00800080)
    t1 >>= np.uint32(8)
    t1 &= _LANES
    np.right_shift(start, np.uint32(8), out=t2)
    t2 &= _LANES
    t2 *= np.uint32(256 - wq)
    np.right_shift(end, np.uint32(8), out=out)
    out &= _LANES
    out *= np.uint32(wq)
    out += t2
    out += np.uint32(0x00800080)
    out &= ~_LANES
    out |= t1


_APPLY_BLOCK = 1 << 16  # pixels per step of apply_ramped


def _look(lut: "ColorLUT | None", words: np.ndarray, idx: np.ndarray, out: np.ndarray) -> np.ndarray:
    if lut is None:
        np.copyto(out, words)
    else:  # indices are in range by construction (masked); "wrap" skips numpy's checking pass
        np.take(lut.table, idx, out=out, mode="wrap")
    return out


def apply_ramped(
    frames: np.ndarray, lut_start: ColorLUT | None, lut_end: ColorLUT | None, ramp: bool, out: np.ndarray | None = None
) -> np.ndarray:
    """Correct a segment `(T, H, W, 3|4)` uint8: frame j mixes `lut_start` and `lut_end` outputs
    with weight j / (T - 1) (a linear ramp), or uses `lut_end` alone when `ramp` is off.
    `None` stands for the identity. Returns an array of the input's shape (the input itself when
    both are the identity); `out`, for RGB0 input, is where to write it (default: a new array).

    Per frame: one index computation, one gather per table, and the 8-bit fixed-point mix
    (`(start * (256 - w) + end * w + 128) >> 8` per byte) on packed words."""
    T = len(frames)
    if lut_end is None and (lut_start is None or not ramp):
        return frames
    channels = frames.shape[-1]
    x = to_rgb0(frames)
    if out is None or channels != 4:
        out = np.empty_like(x)
    # packed words, flattened per frame and cut into cache-sized pieces (~256 KiB per buffer)
    words = x.view(np.uint32).reshape(T, -1)
    out_words = out.view(np.uint32).reshape(T, -1)
    n = words.shape[1]
    step = min(n, _APPLY_BLOCK)
    idx, s, e, t1, t2 = (np.empty(step, np.uint32) for _ in range(5))
    for j in range(T):
        w = j / (T - 1) if (ramp and T > 1) else 1.0
        wq = int(round(w * 256))  # 8-bit fixed-point mix weight
        if wq >= 256 or lut_start is lut_end:
            lut, mix = lut_end, False
        elif wq <= 0:
            lut, mix = lut_start, False
        else:
            mix = True
        for p in range(0, n, step):
            src, dst = words[j, p : p + step], out_words[j, p : p + step]
            k = len(src)
            i = idx[:k]
            np.right_shift(src, np.uint32(1), out=i)
            i &= _LUT_INDEX_MASK
            if not mix:
                _look(lut, src, i, dst)
            else:
                a = _look(lut_start, src, i, s[:k])
                b = _look(lut_end, src, i, e[:k])
                _mix_words(a, b, wq, dst, t1[:k], t2[:k])
    return out if channels == 4 else np.ascontiguousarray(out[..., :3])


# ----------------------------------------------------------------------------------------------
# Seam crossfade
# ----------------------------------------------------------------------------------------------


def smoothstep_weights(n: int) -> np.ndarray:
    """Weights of the incoming segment for an n-frame crossfade, strictly inside (0, 1)."""
    x = np.arange(1, n + 1) / (n + 1)
    return x * x * (3 - 2 * x)


def _linear_mix_table(w: np.float32) -> np.ndarray:
    """`(256 * 256,)` uint8: entry `a << 8 | b` is codes a, b mixed in linear light with weight w
    of b, by exactly the float32 arithmetic of a per-pixel mix (so results are identical)."""
    la, lb = _U8_TO_LINEAR32[:, None], _U8_TO_LINEAR32[None, :]
    mixed = la + (lb - la) * w
    return _LINEAR_TO_U8[np.clip(np.round(mixed * 65535), 0, 65535).astype(np.int32)].reshape(-1)


def crossfade(outgoing: np.ndarray, incoming: np.ndarray, space: str = "linear", out: np.ndarray | None = None) -> np.ndarray:
    """Blend two views of the same O moments `(O, H, W, C)` uint8 with smoothstep weights, in
    linear light or in CIELAB. The 4th byte of RGB0 input passes through as zero. `out` (may be
    `incoming` itself) receives the result; by default a new array."""
    n = len(outgoing)
    if out is None:
        out = np.empty_like(outgoing)
    if n == 0:
        return out
    w = smoothstep_weights(n).astype(np.float32)
    if space == "linear":
        # per frame one 64k-entry table (a << 8 | b -> mixed code) and one gather per byte,
        # instead of float32 linear light per pixel: ~5x less work, identical codes
        idx = np.empty(outgoing.shape[1:], np.uint16)
        for j in range(n):
            np.left_shift(outgoing[j], 8, out=idx, dtype=np.uint16)
            idx |= incoming[j]
            np.take(_linear_mix_table(w[j]), idx, out=out[j])
        if out.shape[-1] == 4:
            out[..., 3] = 0
    elif space == "lab":
        a, b = outgoing[..., :3], incoming[..., :3]
        la, lb = linear_to_lab(_U8_TO_LINEAR32[a]), linear_to_lab(_U8_TO_LINEAR32[b])
        lin = np.clip(lab_to_linear(la + (lb - la) * w[:, None, None, None]), 0.0, 1.0)
        out[..., :3] = _LINEAR_TO_U8[np.round(lin * 65535).astype(np.int32)]
        if out.shape[-1] == 4:
            out[..., 3] = 0
    else:
        raise ValueError(f"`blend_space` must be one of {', '.join(BLEND_SPACES)}, got {space!r}")
    return out


# ----------------------------------------------------------------------------------------------
# Latent-space correction (AdaIN toward the first window, before the handoff)
# ----------------------------------------------------------------------------------------------


def latent_channel_stats(latents) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample, per-channel mean and std of `(B, C, F, h, w)` latents -> two `(B, C)` arrays."""
    x = latents.detach().float()
    return x.mean(dim=(2, 3, 4)).cpu().numpy().astype(np.float64), x.std(dim=(2, 3, 4)).cpu().numpy().astype(np.float64)


def adain_latents(latents, anchor_mean: np.ndarray, anchor_std: np.ndarray, config: DriftConfig):
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


# ----------------------------------------------------------------------------------------------
# Metrics and the report
# ----------------------------------------------------------------------------------------------

START_END_FRACTION = 0.15
MIN_STEP_P95 = 0.1  # dE76 floor for the seam-jump denominator: static content would divide by ~0


def frame_steps(frame_means: np.ndarray) -> np.ndarray:
    """dE76 between consecutive frames' mean LAB: step t is between frames t-1 and t (t >= 1)."""
    return delta_e76(frame_means[1:], frame_means[:-1])


def flicker_index(L: np.ndarray, cuts: Sequence[int] = ()) -> float:
    """Variance of per-frame L* around its centred 5-frame moving average, never across a cut."""
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(L)), len(L)]
    res = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        x = np.asarray(L[a:b], np.float64)
        if len(x) >= 5:
            ma = np.convolve(x, np.ones(5) / 5, mode="valid")  # centred on x[2:-2]
            res.append(x[2:-2] - ma)
    if not res:
        return 0.0
    r = np.concatenate(res)
    return float(np.mean(r * r))


def start_end_contrast(stats: np.ndarray) -> dict:
    """Compare the first and last 15% of frames: mean L*a*b* difference (end - start), dE76,
    dE2000 and the ratio of L* std (contrast) end / start."""
    n = len(stats)
    k = max(1, int(round(n * START_END_FRACTION)))
    s, e = stats[:k], stats[-k:]
    ms, me = s[:, :3].mean(0), e[:, :3].mean(0)
    return {
        "frames": k,
        "dL": float(me[0] - ms[0]),
        "da": float(me[1] - ms[1]),
        "db": float(me[2] - ms[2]),
        "dE76": float(delta_e76(me, ms)),
        "dE2000": float(delta_e2000(me, ms)),
        "contrast_ratio": float(e[:, 3].mean() / max(s[:, 3].mean(), 1e-6)),
    }


@dataclass
class SegmentDrift:
    index: int  # segment number in the video
    shot: int
    start: int  # first output frame (the seam crossfade belongs to the incoming segment)
    end: int  # one past the last output frame
    mean_lab: list[float]
    dE76: float  # of the segment's mean vs the shot's anchor
    dE2000: float


@dataclass
class DriftReport:
    """Drift figures of a video: per-frame LAB stats, per-segment dE vs anchor, seams, flicker."""

    num_frames: int
    frame_mean: np.ndarray  # (N, 3) per-frame mean L*, a*, b*
    frame_std: np.ndarray  # (N, 3) per-frame std L*, a*, b*
    segments: list[SegmentDrift]
    seams: list[tuple[int, int]]  # [start, end) of each seam's crossfade (start == end: hard cut)
    seam_jumps: list[float]
    shot_starts: list[int]
    anchor_means: list[list[float]]  # per shot
    step_p95: float  # p95 of in-segment frame-to-frame dE76 steps (the seam-jump denominator)
    flicker: float
    start_end: dict
    fps: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def dE76_mean(self) -> float:
        return float(np.mean([s.dE76 for s in self.segments])) if self.segments else 0.0

    @property
    def dE2000_mean(self) -> float:
        return float(np.mean([s.dE2000 for s in self.segments])) if self.segments else 0.0

    @property
    def seam_jump_max(self) -> float:
        return float(max(self.seam_jumps)) if self.seam_jumps else 0.0

    def to_dict(self, frames: bool = True) -> dict:
        d = {
            "num_frames": self.num_frames,
            "fps": self.fps,
            "num_segments": len(self.segments),
            "num_shots": len(self.shot_starts),
            "dE76_mean": self.dE76_mean,
            "dE76_max": max((s.dE76 for s in self.segments), default=0.0),
            "dE2000_mean": self.dE2000_mean,
            "dE2000_max": max((s.dE2000 for s in self.segments), default=0.0),
            "seam_jump_max": self.seam_jump_max,
            "seam_jump_p95": float(np.percentile(self.seam_jumps, 95)) if self.seam_jumps else 0.0,
            "step_p95": self.step_p95,
            "flicker": self.flicker,
            "start_end": self.start_end,
            "shot_starts": list(self.shot_starts),
            "anchor_means": self.anchor_means,
            "seams": [list(s) for s in self.seams],
            "seam_jumps": list(self.seam_jumps),
            "segments": [s.__dict__.copy() for s in self.segments],
            **self.extra,
        }
        if frames:
            d["frames"] = {
                "L_mean": self.frame_mean[:, 0].round(3).tolist(),
                "a_mean": self.frame_mean[:, 1].round(3).tolist(),
                "b_mean": self.frame_mean[:, 2].round(3).tolist(),
                "L_std": self.frame_std[:, 0].round(3).tolist(),
                "a_std": self.frame_std[:, 1].round(3).tolist(),
                "b_std": self.frame_std[:, 2].round(3).tolist(),
            }
        return d

    def to_json(self, frames: bool = True, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(frames), indent=indent)

    def plot(self, path: str | os.PathLike) -> Path:
        return plot_drift(self, path)

    def write(self, video_path: str | os.PathLike) -> tuple[Path, Path]:
        """Write `<video>.drift.json` and `<video>.drift.png` next to the video."""
        v = Path(video_path)
        js, png = v.with_name(v.name + ".drift.json"), v.with_name(v.name + ".drift.png")
        js.write_text(self.to_json(indent=1))
        self.plot(png)
        return js, png


def build_report(
    stats: np.ndarray,
    segment_starts: Sequence[int],
    segment_shots: Sequence[int],
    seams: Sequence[tuple[int, int]],
    shot_starts: Sequence[int],
    anchor_means: Sequence[np.ndarray],
    fps: float | None = None,
) -> DriftReport:
    """Figures from per-frame stats `(N, 6)` and the timeline: segment i covers
    [segment_starts[i], segment_starts[i+1]); `seams` are the crossfade windows between segments
    of one shot; shots start at `shot_starts` and each has its anchor mean LAB."""
    n = len(stats)
    means, stds = stats[:, :3], stats[:, 3:]
    starts = list(segment_starts) + [n]
    segs = []
    for i in range(len(segment_starts)):
        a, b = starts[i], starts[i + 1]
        m = means[a:b].mean(0) if b > a else np.full(3, np.nan)
        anchor = np.asarray(anchor_means[segment_shots[i]])
        segs.append(
            SegmentDrift(i, int(segment_shots[i]), int(a), int(b), [float(v) for v in m],
                         float(delta_e76(m, anchor)), float(delta_e2000(m, anchor)))
        )  # fmt: skip
    steps = frame_steps(means) if n > 1 else np.zeros(0)  # steps[t-1]: frame t-1 -> t
    inside = np.ones(len(steps), bool)
    windows = []
    for a, b in seams:
        lo, hi = max(a, 1), min(b, n - 1)  # steps into the window's first frame .. out of its last
        windows.append((lo, hi))
        inside[lo - 1 : hi] = False
    for c in shot_starts:
        if 0 < c < n:
            inside[c - 1] = False
    p95 = float(np.percentile(steps[inside], 95)) if inside.any() else 0.0
    denom = max(p95, MIN_STEP_P95)
    jumps = [float(steps[lo - 1 : hi].max() / denom) if hi >= lo else 0.0 for lo, hi in windows]
    cuts = [c for c in shot_starts if c > 0]
    return DriftReport(
        num_frames=n,
        frame_mean=means.copy(),
        frame_std=stds.copy(),
        segments=segs,
        seams=[(int(a), int(b)) for a, b in seams],
        seam_jumps=jumps,
        shot_starts=[int(s) for s in shot_starts],
        anchor_means=[[float(v) for v in np.asarray(m)] for m in anchor_means],
        step_p95=p95,
        flicker=flicker_index(means[:, 0], cuts),
        start_end=start_end_contrast(stats) if n else {},
        fps=fps,
    )


# ----------------------------------------------------------------------------------------------
# The plot (PIL only: matplotlib is not a dependency)
# ----------------------------------------------------------------------------------------------

_PLOT_COLOURS = {"L*": (20, 20, 20), "a*": (200, 30, 60), "b*": (30, 80, 210)}


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = max(hi - lo, 1e-9)
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def plot_drift(report: DriftReport, path: str | os.PathLike, width: int = 1000) -> Path:
    """Three stacked panels (mean L*, a*, b* per frame) with seams (dashed grey), shot cuts (solid
    orange) and each shot's anchor level (dotted), axes with ticks, and a legend."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default()
    panel_h, left, right, top, gap, bottom = 170, 64, 16, 34, 26, 40
    height = top + 3 * panel_h + 2 * gap + bottom
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    n = max(report.num_frames, 2)
    fps = report.fps or 0.0
    x0, x1 = left, width - right

    def fx(t: float) -> float:
        return x0 + (x1 - x0) * t / (n - 1)

    title = f"drift: {report.num_frames} frames, {len(report.segments)} segments, dE76 mean {report.dE76_mean:.2f}, seam jump max {report.seam_jump_max:.2f}, flicker {report.flicker:.3f}"
    d.text((left, 8), title, fill="black", font=font)
    for p, (name, colour) in enumerate(_PLOT_COLOURS.items()):
        y0 = top + p * (panel_h + gap)
        y1 = y0 + panel_h
        series = report.frame_mean[:, p] if report.num_frames else np.zeros(1)
        anchors = [m[p] for m in report.anchor_means]
        lo, hi = float(min(series.min(), *anchors)), float(max(series.max(), *anchors))
        pad = max((hi - lo) * 0.1, 1.0)
        lo, hi = lo - pad, hi + pad

        def fy(v: float) -> float:
            return y1 - (y1 - y0) * (v - lo) / (hi - lo)

        d.rectangle([x0, y0, x1, y1], outline="black")
        for v in _nice_ticks(lo, hi, 4):
            y = fy(v)
            d.line([x0 - 4, y, x0, y], fill="black")
            d.line([x0 + 1, y, x1 - 1, y], fill=(232, 232, 232))
            d.text((4, y - 6), f"{v:g}", fill="black", font=font)
        d.text((x0 + 6, y0 + 4), f"mean {name}", fill=colour, font=font)
        for a, b in report.seams:
            for x in (fx(a), fx(max(b - 1, a))) if b - a > 1 else (fx(a),):
                for yy in range(int(y0), int(y1), 8):
                    d.line([x, yy, x, min(yy + 4, y1)], fill=(150, 150, 150))
        for c in report.shot_starts:
            if c > 0:
                d.line([fx(c), y0, fx(c), y1], fill=(240, 140, 0), width=2)
        bounds = [*report.shot_starts, report.num_frames]
        for s, m in enumerate(anchors):
            a, b = bounds[s], bounds[s + 1]
            for xx in range(int(fx(a)), int(fx(max(b - 1, a))), 6):
                d.point([(xx, fy(m)), (xx + 1, fy(m))], fill=(0, 160, 0))
        pts = [(fx(t), fy(float(v))) for t, v in enumerate(series)]
        if len(pts) > 1:
            d.line(pts, fill=colour, width=2)
        for t in _nice_ticks(0, n - 1, 8):
            x = fx(t)
            d.line([x, y1, x, y1 + 4], fill="black")
            if p == 2:
                label = f"{int(t)}" + (f" ({t / fps:.1f}s)" if fps else "")
                d.text((x - 10, y1 + 6), label, fill="black", font=font)
    d.text((x0, height - 16), "frame", fill="black", font=font)
    legend = [("per-frame mean", (20, 20, 20)), ("seam crossfade", (150, 150, 150)),
              ("shot cut", (240, 140, 0)), ("shot anchor", (0, 160, 0))]  # fmt: skip
    lx = x1 - 470
    for label, colour in legend:
        d.line([lx, height - 10, lx + 18, height - 10], fill=colour, width=3)
        d.text((lx + 22, height - 16), label, fill="black", font=font)
        lx += 118
    out = Path(path)
    img.save(out)
    return out

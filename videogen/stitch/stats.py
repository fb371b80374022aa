"""CIELAB statistics of frames on a pixel subsample: per-frame mean/std, pooled segment stats.

The stitcher fits one colour transform per segment from these statistics and the drift report
plots them per frame. Frames are subsampled on a strided grid (about 8k pixels per frame) and
converted to LAB through small packed-pixel tables, so measuring a segment costs far less than
correcting it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from videogen.stitch.colour import LAB_EPSILON, LAB_KAPPA, RGB_TO_XYZ, U8_TO_LINEAR, WHITE_D65

STATS_PIXELS_PER_FRAME = 8192  # subsample target: the mean of 8k pixels is stable to << 0.1 dE

_RGB_TO_XYZN = RGB_TO_XYZ / WHITE_D65[:, None]  # linear RGB -> XYZ / white
# XYZ / white of a pixel = _XYZ_RG[:, r | g << 8] + _XYZ_B[:, b]: two gathers from small
# (L2-resident) tables per channel instead of three gathers and a 3x3 product
_XYZ_RG = (
    (_RGB_TO_XYZN[:, :1, None] * U8_TO_LINEAR[None, None, :] + _RGB_TO_XYZN[:, 1:2, None] * U8_TO_LINEAR[None, :, None])
    .reshape(3, -1)
    .astype(np.float32)
)
_XYZ_B = (_RGB_TO_XYZN[:, 2:3] * U8_TO_LINEAR[None, :]).astype(np.float32)
_STATS_BLOCK = 1 << 16  # pixels per step of the statistics (cache-sized)


def auto_stride(height: int, width: int, target: int = STATS_PIXELS_PER_FRAME) -> int:
    """Spatial stride that leaves about `target` pixels of an HxW frame for statistics."""
    return max(1, int(round(math.sqrt(height * width / target))))


def _packed_block(frames: np.ndarray, packed: np.ndarray, t0: int, t1: int, offset: int, stride: int) -> np.ndarray:
    """Frames t0..t1 of the strided subsample as packed words `r | g << 8 | b << 16 (| x << 24)`,
    flattened `(t * h * w,)` uint32. RGB0 input is already packed: `packed` is its strided view."""
    if frames.shape[-1] == 4:
        return np.ascontiguousarray(packed[t0:t1]).reshape(-1)
    sub = frames[t0:t1, offset::stride, offset::stride]
    words = sub[..., 0].astype(np.uint32).reshape(-1)
    words |= sub[..., 1].reshape(-1).astype(np.uint32) << np.uint32(8)
    words |= sub[..., 2].reshape(-1).astype(np.uint32) << np.uint32(16)
    return words


def _lab_f_of_words(words: np.ndarray) -> np.ndarray:
    """Packed words `(n,)` -> CIELAB f-values of XYZ / white, planar `(3, n)` float32."""
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
    dark = xyz <= np.float32(LAB_EPSILON)
    if dark.any():
        np.copyto(f, xyz * np.float32(LAB_KAPPA / 116) + np.float32(16 / 116), where=dark)
    return f


def _lab_planes(f: np.ndarray, num_frames: int, pixels: int) -> np.ndarray:
    """f-values `(3, t * P)` -> LAB frame-major `(t, 3, P)` float32 (per-frame 3xP blocks)."""
    lab = np.empty((num_frames, 3, pixels), np.float32)
    fx, fy, fz = (v.reshape(num_frames, pixels) for v in f)
    np.multiply(fy, np.float32(116), out=lab[:, 0])
    lab[:, 0] -= np.float32(16)
    np.subtract(fx, fy, out=lab[:, 1])
    lab[:, 1] *= np.float32(500)
    np.subtract(fy, fz, out=lab[:, 2])
    lab[:, 2] *= np.float32(200)
    return lab


def lab_moments(frames: np.ndarray, stride: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame CIELAB mean `(T, 3)` and covariance `(T, 3, 3)` (float64) of the strided
    subsample of `(T, H, W, 3|4)` uint8 frames. Works on packed pixels in cache-sized blocks of
    frames, planar (reductions run along contiguous memory), float32 LAB, float64 moments.
    The subsample starts at stride // 2 so a 1-px border never dominates."""
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
        lab = _lab_planes(_lab_f_of_words(_packed_block(frames, packed, t0, t1, o, s)), t1 - t0, P)
        m = lab.mean(2, dtype=np.float64)  # (t, 3)
        lab -= m.astype(np.float32)[:, :, None]
        mean[t0:t1] = m
        cov[t0:t1] = np.matmul(lab, lab.transpose(0, 2, 1)) / np.float32(P)
    return mean, cov


def lab_samples(frames: np.ndarray, stride: int | None, max_frames: int) -> np.ndarray:
    """CIELAB of the strided subsample of at most `max_frames` evenly spaced frames of `(T, H, W,
    3|4)` uint8: planar `(3, N)` float32, for statistics that need the pixels (quantiles, modes)."""
    frames = frames[:: max(1, -(-len(frames) // max_frames))]
    s = stride or auto_stride(frames.shape[1], frames.shape[2])
    o = s // 2
    packed = (frames.view(np.uint32)[..., 0] if frames.shape[-1] == 4 else frames[..., 0])[:, o::s, o::s]
    n, pixels = len(frames), packed.shape[1] * packed.shape[2]
    lab = _lab_planes(_lab_f_of_words(_packed_block(frames, packed, 0, n, o, s)), n, pixels)
    return lab.transpose(1, 0, 2).reshape(3, n * pixels)


def frame_lab_stats(frames: np.ndarray, stride: int | None = None) -> np.ndarray:
    """Per-frame CIELAB mean and std: `(T, 6)` = (L, a, b means, L, a, b stds), on a subsample."""
    frames = np.asarray(frames)
    if frames.ndim == 3:
        frames = frames[None]
    if len(frames) == 0:
        return np.zeros((0, 6))
    mean, cov = lab_moments(frames, stride)
    std = np.sqrt(np.maximum(np.diagonal(cov, axis1=1, axis2=2), 0.0))
    return np.concatenate([mean, std], axis=1)


@dataclass
class LabStats:
    """CIELAB statistics of one segment (or a reference image): mean (3,), std (3,), cov (3, 3)."""

    mean: np.ndarray
    std: np.ndarray
    cov: np.ndarray

    @classmethod
    def of_frames(cls, frames: np.ndarray, stride: int | None = None) -> LabStats:
        """Statistics over all pixels of all frames `(T, H, W, 3|4)`, on a strided subsample."""
        frames = np.asarray(frames)
        if frames.ndim == 3:
            frames = frames[None]
        return cls.of_moments(*lab_moments(frames, stride))

    @classmethod
    def of_moments(cls, mean: np.ndarray, cov: np.ndarray) -> LabStats:
        """Pool per-frame means `(T, 3)` and covariances `(T, 3, 3)` of equal-size frames (the law
        of total covariance: the mean within-frame covariance plus that of the frame means)."""
        m = mean.mean(0)
        d = mean - m
        c = cov.mean(0) + d.T @ d / len(mean)
        return cls(mean=m, std=np.sqrt(np.maximum(np.diag(c), 0.0)), cov=c)

    def to_dict(self) -> dict:
        return {"mean": self.mean.copy(), "std": self.std.copy(), "cov": self.cov.copy()}

    @classmethod
    def from_dict(cls, d: dict) -> LabStats:
        return cls(
            np.asarray(d["mean"], np.float64), np.asarray(d["std"], np.float64), np.asarray(d["cov"], np.float64)
        )


def load_reference_stats(image: str | os.PathLike | np.ndarray, stride: int | None = None) -> LabStats:
    """LAB statistics of a reference image (path or uint8 `(H, W, 3)` array)."""
    return LabStats.of_frames(load_reference_image(image)[None], stride)


def load_reference_image(image: str | os.PathLike | np.ndarray) -> np.ndarray:
    """A reference image (path or uint8 `(H, W, 3)` array) as uint8 `(H, W, 3|4)`, checked."""
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
    return arr

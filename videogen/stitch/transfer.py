"""Colour transfer: the affine map in CIELAB, `lab' = A @ lab + t`, fitted once per segment.

Modes: Reinhard-style mean/std transfer in CIELAB (`lab-meanstd`, as InfiniteTalk does toward
its input image) and a Monge-Kantorovich linear map of the LAB covariance (`mkl`, Pitie &
Kokaram 2007, as ComfyUI's ColorMatch offers). Both are clamped, scaled by `strength` and pivot
on the segment's own mean, so content is moved toward the anchor, never repainted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from videogen.stitch.config import DriftConfig
from videogen.stitch.stats import LabStats


@dataclass
class ColorTransform:
    """`lab' = matrix @ lab + offset`, one per segment."""

    matrix: np.ndarray  # (3, 3)
    offset: np.ndarray  # (3,)

    @classmethod
    def identity(cls) -> ColorTransform:
        return cls(np.eye(3), np.zeros(3))

    @property
    def is_identity(self) -> bool:
        return bool(np.allclose(self.matrix, np.eye(3), atol=1e-9) and np.allclose(self.offset, 0, atol=1e-9))

    def apply_lab(self, lab: np.ndarray) -> np.ndarray:
        return lab @ self.matrix.T + self.offset

    def to_dict(self) -> dict:
        return {"matrix": self.matrix.copy(), "offset": self.offset.copy()}

    @classmethod
    def from_dict(cls, d: dict) -> ColorTransform:
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

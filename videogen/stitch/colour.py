"""sRGB (IEC 61966-2-1) <-> linear light <-> CIELAB (D65 white) and the CIE colour differences.

Conversions follow the IEC sRGB transfer curve and the CIE 1976 L*a*b* definition; dE2000
follows Sharma, Wu & Dalal (2005). The uint8 tables below serve every module that turns 8-bit
codes into linear light and back (statistics, LUT builds, seam crossfades).
"""

from __future__ import annotations

import numpy as np

# linear sRGB -> XYZ (D65), IEC 61966-2-1
RGB_TO_XYZ = np.array(
    [[0.4124564, 0.3575761, 0.1804375],
     [0.2126729, 0.7151522, 0.0721750],
     [0.0193339, 0.1191920, 0.9503041]]
)  # fmt: skip
XYZ_TO_RGB = np.linalg.inv(RGB_TO_XYZ)
WHITE_D65 = np.array([0.95047, 1.0, 1.08883])
LAB_EPSILON = 216 / 24389  # CIE: (6/29)^3, where f(t) switches from linear to cube root
LAB_KAPPA = 24389 / 27

# LAB from f = (f(X/Xn), f(Y/Yn), f(Z/Zn)):  lab = F_TO_LAB @ f + LAB_OFFSET
F_TO_LAB = np.array([[0.0, 116.0, 0.0], [500.0, -500.0, 0.0], [0.0, 200.0, -200.0]])
LAB_OFFSET = np.array([-16.0, 0.0, 0.0])


def srgb_to_linear(v: np.ndarray) -> np.ndarray:
    """sRGB-encoded values in [0, 1] -> linear light."""
    v = np.asarray(v, np.float64)
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)


def linear_to_srgb(v: np.ndarray) -> np.ndarray:
    """Linear light -> sRGB-encoded values (not clipped)."""
    v = np.asarray(v, np.float64)
    return np.where(v <= 0.0031308, v * 12.92, 1.055 * np.power(np.maximum(v, 0.0031308), 1 / 2.4) - 0.055)


# uint8 -> linear light, exact for every code value (a 256-entry table beats pow per pixel)
U8_TO_LINEAR = srgb_to_linear(np.arange(256) / 255.0)
U8_TO_LINEAR32 = U8_TO_LINEAR.astype(np.float32)
# linear light -> uint8 through a 65536-entry table: step 1/65535 in linear light is < 0.2 of
# an 8-bit code even at black, where sRGB is steepest (slope 12.92).
LINEAR_TO_U8 = np.clip(np.round(linear_to_srgb(np.arange(65536) / 65535.0) * 255), 0, 255).astype(np.uint8)


def lab_f(t: np.ndarray) -> np.ndarray:
    """The CIELAB companding function f of XYZ / white: cube root above LAB_EPSILON, linear below."""
    return np.where(t > LAB_EPSILON, np.cbrt(t), (LAB_KAPPA * t + 16) / 116)


def _lab_f_inv(f: np.ndarray) -> np.ndarray:
    f3 = f**3
    return np.where(f3 > LAB_EPSILON, f3, (116 * f - 16) / LAB_KAPPA)


def linear_to_lab(lin: np.ndarray) -> np.ndarray:
    """Linear sRGB `(..., 3)` -> CIELAB `(..., 3)` (D65)."""
    xyz = np.asarray(lin) @ (RGB_TO_XYZ / WHITE_D65[:, None]).T.astype(np.asarray(lin).dtype)
    return lab_f(xyz) @ F_TO_LAB.T.astype(xyz.dtype) + LAB_OFFSET.astype(xyz.dtype)


def rgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB `(..., 3)` -> CIELAB `(..., 3)` float64. uint8 input is 0..255, float input 0..1."""
    rgb = np.asarray(rgb)
    lin = U8_TO_LINEAR[rgb] if rgb.dtype == np.uint8 else srgb_to_linear(rgb)
    return linear_to_lab(lin)


def lab_to_linear(lab: np.ndarray) -> np.ndarray:
    """CIELAB `(..., 3)` -> linear sRGB `(..., 3)`, not clipped (out-of-gamut stays visible)."""
    lab = np.asarray(lab, np.float64)
    fy = (lab[..., 0] + 16) / 116
    f = np.stack([fy + lab[..., 1] / 500, fy, fy - lab[..., 2] / 200], axis=-1)
    xyz = _lab_f_inv(f) * WHITE_D65
    return xyz @ XYZ_TO_RGB.T


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

"""Applying a colour transform fast: a `ColorTransform` baked into a lookup table of packed words.

An affine map in LAB is a fixed RGB->RGB function, so each segment's transform becomes a 128^3
table (`ColorLUT`): applying it is one gather per pixel, which is what makes `videogen drift fix`
run at hundreds of frames/s on two cores. The table is indexed by the top 7 bits of each channel
and evaluated at the bin centres; its error vs the exact per-pixel map is <= 1 level of 8 bits
(`tests/stitch/test_drift.py`), below H.264's own loss. Frames travel as RGB0 uint32 words
(`to_rgb0`), so indexing and the ramp's 8-bit mix need no unpacking of the channels.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from videogen.stitch.colour import (
    F_TO_LAB,
    LAB_KAPPA,
    LAB_OFFSET,
    LINEAR_TO_U8,
    RGB_TO_XYZ,
    WHITE_D65,
    XYZ_TO_RGB,
    lab_f,
    srgb_to_linear,
)
from videogen.stitch.transfer import ColorTransform

_LUT_BITS = 7
_LUT_LEVELS = 1 << _LUT_BITS  # 128 bins per channel, 2 code values each
_LUT_INDEX_MASK = np.uint32(0x7F7F7F)  # (rgb0 word >> 1) & mask = r7 | g7 << 8 | b7 << 16
_LUT_BLOCK = 2 * _LUT_LEVELS * _LUT_LEVELS  # bin centres per build step: two blue planes, cache-sized
_F_TO_LAB_INV = np.linalg.inv(F_TO_LAB)
_F_KNEE = np.float32(6 / 29)  # f(t) above this is a cube root; below, linear (t <= LAB_EPSILON)
_LANES = np.uint32(0x00FF00FF)  # bytes 0 and 2 of a packed word: two 16-bit lanes
_APPLY_BLOCK = 1 << 16  # pixels per step of apply_ramped


@functools.cache
def _lut_grid() -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The 128^3 bin centres as CIELAB f-values `(3, 2^21)` float32 (planar: fX, fY, fZ; index
    r | g << 7 | b << 14) and the linear->code tables pre-shifted into the R, G, B bytes; cached."""
    k = np.arange(_LUT_LEVELS)
    centre = (2 * k + 0.5).astype(np.float64)  # codes 2k and 2k+1 share the bin
    lin = srgb_to_linear(centre / 255.0)
    grid = np.empty((3, _LUT_LEVELS**3), np.float32)
    for i in range(3):  # XYZ / white is a sum of one term per channel: broadcast, no gathers
        m = RGB_TO_XYZ[i] / WHITE_D65[i]
        t = (m[0] * lin)[None, None, :] + (m[1] * lin)[None, :, None] + (m[2] * lin)[:, None, None]
        grid[i] = lab_f(t).reshape(-1)  # index r | g << 7 | b << 14
    codes = LINEAR_TO_U8.astype(np.uint32)
    return grid, (codes, codes << 8, codes << 16)


class ColorLUT:
    """A `ColorTransform` baked into a packed RGB0 table: one gather per pixel.

    The table has 2^23 uint32 entries (32 MiB) of which the 128^3 reachable ones are filled:
    indexing with `(word >> 1) & 0x7F7F7F` needs no unpacking of the channels.

    Built exactly at every bin centre, in the CIELAB f-space: with `lab = F2LAB f + c`, the LAB
    map `lab' = A lab + t` is `f' = M f + m` (M = F2LAB^-1 A F2LAB), so each centre costs one 3x3
    product, a cube (the inverse of f) and the 3x3 XYZ->RGB product. numpy in cache-sized blocks
    of 32k centres on one thread: ~15 ms for the 2^21 centres (figures: docs/drift.md).
    """

    def __init__(self, transform: ColorTransform) -> None:
        m_f = (_F_TO_LAB_INV @ transform.matrix @ F_TO_LAB).astype(np.float32)
        t_f = (_F_TO_LAB_INV @ (transform.matrix @ LAB_OFFSET + transform.offset - LAB_OFFSET)).astype(np.float32)[
            :, None
        ]
        self.table = _build_table(m_f, t_f)

    def lookup(self, words: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Packed RGB0 words `(...)` uint32 -> transformed packed words."""
        idx = np.right_shift(words, 1)
        np.bitwise_and(idx, _LUT_INDEX_MASK, out=idx)
        return np.take(self.table, idx, out=out)


class _BuildBuffers(NamedTuple):
    """Scratch arrays of one LUT build block, reused across blocks."""

    f: np.ndarray  # (3, n) float32 transformed f-values
    xyz: np.ndarray  # (3, n) float32
    low: np.ndarray  # (3, n) float32, the linear branch below the knee
    lin: np.ndarray  # (3, n) float32 linear RGB scaled to 0..65535
    dark: np.ndarray  # (3, n) bool
    idx: np.ndarray  # (3, n) int32: int32 + mode="wrap" needs no index conversion in np.take


def _f_to_linear_codes(buf: _BuildBuffers, to_lin: np.ndarray) -> None:
    """`buf.f` (transformed f-values) -> `buf.idx`: linear RGB as indices of the 65536-entry code table."""
    f, xyz, low, lin, dark = buf.f, buf.xyz, buf.low, buf.lin, buf.dark
    np.multiply(f, f, out=xyz)
    xyz *= f  # t = f^3 above the knee ...
    np.less_equal(f, _F_KNEE, out=dark)
    if dark.any():  # only blocks near black
        np.multiply(f, np.float32(116 / LAB_KAPPA), out=low)
        low -= np.float32(16 / LAB_KAPPA)  # ... (116 f - 16) / kappa below it
        np.copyto(xyz, low, where=dark)
    np.matmul(to_lin, xyz, out=lin)
    np.clip(lin, 0, 65535, out=lin)
    np.rint(lin, out=lin)
    buf.idx[...] = lin


def _build_table(m_f: np.ndarray, t_f: np.ndarray) -> np.ndarray:
    """The packed table `(2^23,)` uint32 of the f-space map `f' = m_f f + t_f` at every bin centre."""
    grid, (code_r, code_g, code_b) = _lut_grid()
    # f' -> XYZ / white -> linear RGB, scaled to the 65536-entry code table
    to_lin = ((XYZ_TO_RGB * WHITE_D65[None, :]) * 65535).astype(np.float32)
    n = _LUT_BLOCK
    f = np.empty((3, n), np.float32)
    buf = _BuildBuffers(
        f, np.empty_like(f), np.empty_like(f), np.empty_like(f), np.empty((3, n), bool), np.empty((3, n), np.int32)
    )
    planes = n // (_LUT_LEVELS * _LUT_LEVELS)
    packed, tmp = np.empty((planes, _LUT_LEVELS, _LUT_LEVELS), np.uint32), np.empty(n, np.uint32)
    table = np.zeros((_LUT_LEVELS, 256, 256), np.uint32)  # [b7, g, r]: r7 | g7 << 8 | b7 << 16
    for s in range(0, grid.shape[1], n):
        np.matmul(m_f, grid[:, s : s + n], out=f)
        for i in range(3):
            f[i] += t_f[i, 0]
        _f_to_linear_codes(buf, to_lin)
        flat = packed.reshape(-1)
        np.take(code_r, buf.idx[0], out=flat, mode="wrap")
        np.take(code_g, buf.idx[1], out=tmp, mode="wrap")
        flat |= tmp
        np.take(code_b, buf.idx[2], out=tmp, mode="wrap")
        b0 = s // (_LUT_LEVELS * _LUT_LEVELS)  # the last OR writes straight into the table
        np.bitwise_or(packed, tmp.reshape(packed.shape), out=table[b0 : b0 + planes, :_LUT_LEVELS, :_LUT_LEVELS])
    return table.reshape(-1)


def to_rgb0(frames: np.ndarray) -> np.ndarray:
    """`(T, H, W, 3)` uint8 -> `(T, H, W, 4)` with a zero 4th byte (packed-word friendly)."""
    if frames.shape[-1] == 4:
        return frames
    out = np.zeros(frames.shape[:-1] + (4,), np.uint8)
    out[..., :3] = frames
    return out


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


def _look(lut: ColorLUT | None, words: np.ndarray, idx: np.ndarray, out: np.ndarray) -> np.ndarray:
    if lut is None:
        np.copyto(out, words)
    else:  # indices are in range by construction (masked); "wrap" skips numpy's checking pass
        np.take(lut.table, idx, out=out, mode="wrap")
    return out


class _ApplyBuffers(NamedTuple):
    """Scratch arrays of one `apply_ramped` block `(step,)` uint32, reused across blocks and frames."""

    idx: np.ndarray
    start: np.ndarray
    end: np.ndarray
    t1: np.ndarray
    t2: np.ndarray


def _correct_frame(
    src: np.ndarray, dst: np.ndarray, lut_start: ColorLUT | None, lut_end: ColorLUT | None, wq: int, buf: _ApplyBuffers
) -> None:
    """One frame's packed words `src` -> `dst`: the mix of both tables' outputs with 8-bit weight
    `wq` of `lut_end`, or a single table where the weight is 0 or 256 (or both tables are one)."""
    single = wq >= 256 or lut_start is lut_end
    mix = not single and wq > 0
    lut = lut_end if single else lut_start
    step = len(buf.idx)
    for p in range(0, len(src), step):
        s, d = src[p : p + step], dst[p : p + step]
        k = len(s)
        i = buf.idx[:k]
        np.right_shift(s, np.uint32(1), out=i)
        i &= _LUT_INDEX_MASK
        if not mix:
            _look(lut, s, i, d)
        else:
            a = _look(lut_start, s, i, buf.start[:k])
            b = _look(lut_end, s, i, buf.end[:k])
            _mix_words(a, b, wq, d, buf.t1[:k], buf.t2[:k])


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
    words = x.view(np.uint32).reshape(T, -1)  # (T, H * W)
    out_words = out.view(np.uint32).reshape(T, -1)
    step = min(words.shape[1], _APPLY_BLOCK)
    buf = _ApplyBuffers(*(np.empty(step, np.uint32) for _ in range(5)))
    for j in range(T):
        w = j / (T - 1) if (ramp and T > 1) else 1.0
        wq = int(round(w * 256))  # 8-bit fixed-point mix weight
        _correct_frame(words[j], out_words[j], lut_start, lut_end, wq, buf)
    return out if channels == 4 else np.ascontiguousarray(out[..., :3])

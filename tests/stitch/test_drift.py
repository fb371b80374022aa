"""Colour science and metrics of `videogen.stitch`: conversions against known values, dE2000
against Sharma's published pairs, transforms (clamp, strength), the LUT, the metrics."""

import numpy as np
import pytest

from videogen.stitch.colour import LINEAR_TO_U8, U8_TO_LINEAR32, delta_e76, delta_e2000, lab_to_rgb, rgb_to_lab
from videogen.stitch.config import DriftConfig
from videogen.stitch.lut import ColorLUT, apply_ramped
from videogen.stitch.metrics import flicker_index, start_end_contrast
from videogen.stitch.report import build_report
from videogen.stitch.seams import crossfade, smoothstep_weights
from videogen.stitch.stats import LabStats, frame_lab_stats
from videogen.stitch.transfer import ColorTransform, fit_transform


@pytest.mark.parametrize(
    "rgb, lab",
    [
        ((255, 255, 255), (100.0, 0.0, 0.0)),
        ((0, 0, 0), (0.0, 0.0, 0.0)),
        ((255, 0, 0), (53.2408, 80.0925, 67.2032)),
        ((0, 255, 0), (87.7347, -86.1827, 83.1793)),
        ((0, 0, 255), (32.2970, 79.1875, -107.8602)),
        ((128, 128, 128), (53.5850, 0.0, 0.0)),
    ],
)
def test_srgb_to_lab_matches_known_d65_values(rgb, lab):
    assert np.allclose(rgb_to_lab(np.array(rgb, np.uint8)), lab, atol=0.01)


def test_lab_to_srgb_round_trips_every_grey_and_random_colours():
    rng = np.random.default_rng(0)
    rgb = np.concatenate([np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, 1),
                          rng.integers(0, 256, (2000, 3), dtype=np.uint8)])  # fmt: skip
    back = np.round(lab_to_rgb(rgb_to_lab(rgb)) * 255)
    assert np.array_equal(back, rgb)


# Sharma, Wu & Dalal (2005), "The CIEDE2000 color-difference formula", Table 1 (pairs 1, 7, 17, 25, 34)
SHARMA = [
    ((50.0000, 2.6772, -79.7751), (50.0000, 0.0000, -82.7485), 2.0425),
    ((50.0000, 0.0000, 0.0000), (50.0000, -1.0000, 2.0000), 2.3669),
    ((50.0000, 2.5000, 0.0000), (73.0000, 25.0000, -18.0000), 27.1492),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((22.7233, 20.0904, -46.6940), (23.0331, 14.9730, -42.5619), 2.0373),
]


@pytest.mark.parametrize("lab1, lab2, expected", SHARMA)
def test_delta_e2000_matches_sharma_test_pairs(lab1, lab2, expected):
    assert delta_e2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert delta_e2000(lab2, lab1) == pytest.approx(expected, abs=1e-4)  # symmetric


def test_delta_e76_is_euclidean_in_lab():
    assert delta_e76([50, 0, 0], [53, 4, 0]) == pytest.approx(5.0)


def _stats(mean, std):
    std = np.asarray(std, float)
    return LabStats(np.asarray(mean, float), std, np.diag(std**2))


def test_meanstd_transform_moves_stats_onto_the_anchor():
    src, dst = _stats([40, 5, 10], [10, 4, 6]), _stats([50, 0, 0], [12, 5, 5])
    t = fit_transform(src, dst, DriftConfig(mode="lab-meanstd"))
    assert np.allclose(t.apply_lab(src.mean), dst.mean)
    assert np.allclose(np.diag(t.matrix) * src.std, dst.std)


def test_mkl_transform_matches_the_anchor_covariance():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    cs, cd = a @ a.T * 20 + np.eye(3), b @ b.T * 20 + np.eye(3)
    src = LabStats(np.array([45.0, 3, 3]), np.sqrt(np.diag(cs)), cs)
    dst = LabStats(np.array([50.0, 0, 0]), np.sqrt(np.diag(cd)), cd)
    t = fit_transform(src, dst, DriftConfig(mode="mkl", max_std_ratio=100.0))
    assert np.allclose(t.matrix @ cs @ t.matrix.T, cd, atol=0.05)
    assert np.allclose(t.apply_lab(src.mean), dst.mean)


def test_clamp_limits_mean_shift_and_std_ratio():
    src, dst = _stats([20, 10, 10], [5, 2, 2]), _stats([60, 0, 0], [20, 8, 1])
    cfg = DriftConfig(max_shift=5.0, max_std_ratio=1.5)
    t = fit_transform(src, dst, cfg)
    assert np.linalg.norm(t.apply_lab(src.mean) - src.mean) == pytest.approx(5.0)
    assert np.allclose(np.diag(t.matrix), [1.5, 1.5, 1 / 1.5])


def test_strength_scales_toward_identity_and_zero_is_identity():
    src, dst = _stats([40, 5, 10], [10, 4, 6]), _stats([50, 0, 0], [12, 5, 5])
    half = fit_transform(src, dst, DriftConfig(strength=0.5))
    assert np.allclose(half.apply_lab(src.mean), (src.mean + dst.mean) / 2)
    assert fit_transform(src, dst, DriftConfig(strength=0.0)).is_identity


def test_lut_matches_the_exact_per_pixel_transform_within_two_levels():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    t = ColorTransform(np.diag([1.1, 0.9, 1.0]), np.array([3.0, 1.0, -2.0]))
    exact = np.round(lab_to_rgb(t.apply_lab(rgb_to_lab(x))) * 255)
    got = apply_ramped(x, None, ColorLUT(t), ramp=False)
    err = np.abs(got - exact)
    assert err.max() <= 2 and err.mean() < 0.5


def test_ramp_mixes_from_start_transform_to_end_transform():
    x = np.full((5, 4, 4, 3), 100, np.uint8)
    end = ColorLUT(ColorTransform(np.eye(3), np.array([10.0, 0, 0])))
    out = apply_ramped(x, None, end, ramp=True)
    assert np.abs(out[0].astype(int) - 100).max() <= 0  # first frame: the start (identity)
    assert np.array_equal(out[-1], apply_ramped(x[-1:], None, end, ramp=False)[0])
    assert np.all(np.diff(out[:, 0, 0, 0].astype(int)) >= 0)  # monotone in between


def test_config_rejects_bad_values_naming_the_field():
    with pytest.raises(ValueError, match="`mode`.*'sepia'"):
        DriftConfig(mode="sepia")
    with pytest.raises(ValueError, match="`strength`.*1.5"):
        DriftConfig(strength=1.5)
    with pytest.raises(ValueError, match="`max_shift`"):
        DriftConfig(max_shift=-1)
    with pytest.raises(ValueError, match="`reference_image`"):
        DriftConfig(reference_image="/nonexistent.png")


def test_crossfade_of_identical_frames_is_identity_in_both_spaces():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    for space in ("linear", "lab"):
        assert np.abs(crossfade(x, x, space).astype(int) - x).max() <= 1


def test_flicker_is_zero_for_a_linear_ramp_and_positive_for_alternation():
    assert flicker_index(np.linspace(40, 60, 50)) == pytest.approx(0.0, abs=1e-12)
    assert flicker_index(50 + np.tile([1.0, -1.0], 25)) > 0.5


def test_flicker_ignores_a_shot_cut():
    L = np.r_[np.full(20, 30.0), np.full(20, 70.0)]
    assert flicker_index(L, cuts=[20]) == 0.0
    assert flicker_index(L) > 10


def test_start_end_contrast_compares_first_and_last_15_percent():
    stats = np.zeros((100, 6))
    stats[:, 0] = np.linspace(50, 40, 100)
    stats[:, 3] = 10
    se = start_end_contrast(stats)
    assert se["frames"] == 15
    assert se["dL"] == pytest.approx(-(50 - 40) * 85 / 99, rel=1e-6)
    assert se["contrast_ratio"] == pytest.approx(1.0)


def test_seam_jump_is_the_seam_step_over_the_in_segment_p95():
    L = np.r_[50 + 0.1 * np.arange(20), 55 + 0.1 * np.arange(20)]  # steps of 0.1, then a 3.1 jump
    stats = np.zeros((40, 6))
    stats[:, 0] = L
    rep = build_report(stats, [0, 20], [0, 0], [(20, 20)], [0], [stats[:20, :3].mean(0)])
    assert rep.seam_jumps[0] == pytest.approx(3.1 / 0.1, rel=1e-3)
    assert rep.segments[1].dE76 == pytest.approx(5.0)
    assert rep.segments[0].dE76 == pytest.approx(0.0, abs=1e-9)


def test_lut_apply_and_mix_equal_the_per_byte_reference():
    """The packed-word lane mix equals `(start * (256 - w) + end * w + 128) >> 8` per byte, any
    4th byte included; 3-channel input gives the same RGB as RGB0 input."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (7, 16, 24, 4), dtype=np.uint8)  # a junk 4th byte
    s = ColorLUT(ColorTransform(np.diag([1.1, 0.95, 1.05]), np.array([3.0, 1.0, -2.0])))
    e = ColorLUT(ColorTransform(np.diag([0.9, 1.05, 1.0]), np.array([-3.0, 2.0, 1.0])))
    words = x.view(np.uint32)[..., 0]
    idx = (words >> 1) & 0x7F7F7F
    for start, end in [(s, e), (None, e), (s, None)]:
        got = apply_ramped(x, start, end, ramp=True)
        a = (start.table[idx] if start else words).view(np.uint8).reshape(x.shape).astype(int)
        b = (end.table[idx] if end else words).view(np.uint8).reshape(x.shape).astype(int)
        wq = np.array([round(j / 6 * 256) for j in range(7)])[:, None, None, None]
        assert np.array_equal(got, ((a * (256 - wq) + b * wq + 128) >> 8).astype(np.uint8))
        assert np.array_equal(apply_ramped(np.ascontiguousarray(x[..., :3]), start, end, ramp=True), got[..., :3])
    buf = x.copy()  # in place (out=frames) gives the same
    assert np.array_equal(apply_ramped(buf, s, e, ramp=True, out=buf), apply_ramped(x, s, e, ramp=True))


def test_linear_crossfade_equals_the_per_pixel_float_mix():
    rng = np.random.default_rng(4)
    a, b = rng.integers(0, 256, (2, 5, 8, 8, 3), dtype=np.uint8)
    w = smoothstep_weights(5).astype(np.float32)[:, None, None, None]
    la, lb = U8_TO_LINEAR32[a], U8_TO_LINEAR32[b]
    ref = LINEAR_TO_U8[np.clip(np.round((la + (lb - la) * w) * 65535), 0, 65535).astype(np.int32)]
    assert np.array_equal(crossfade(a, b, "linear"), ref)
    a4, b4 = (np.concatenate([v, np.full((*v.shape[:3], 1), 77, np.uint8)], -1) for v in (a, b))
    got4 = crossfade(a4, b4, "linear", out=b4)  # in place over the incoming frames
    assert got4 is b4 and np.array_equal(got4[..., :3], ref) and not got4[..., 3].any()


def test_frame_stats_match_lab_of_the_subsampled_pixels():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (3, 40, 56, 3), dtype=np.uint8)
    x[1] //= 16  # dark pixels: the linear branch of f
    lab = rgb_to_lab(x[:, 1::3, 1::3]).reshape(3, -1, 3)
    got = frame_lab_stats(x, stride=3)
    assert np.allclose(got[:, :3], lab.mean(1), atol=1e-3) and np.allclose(got[:, 3:], lab.std(1), atol=1e-3)
    x4 = np.concatenate([x, np.full((*x.shape[:3], 1), 200, np.uint8)], -1)
    assert np.allclose(frame_lab_stats(x4, stride=3), got, atol=1e-9)
    pooled = LabStats.of_frames(x, stride=3)
    flat = lab.reshape(-1, 3)
    assert np.allclose(pooled.mean, flat.mean(0), atol=1e-3)
    assert np.allclose(pooled.cov, np.cov(flat, rowvar=False, bias=True), atol=1e-2)

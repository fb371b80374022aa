"""The Stitcher as the render loop drives it: frame accounting, drift correction within targets,
shots, ramps without pops, strength 0, crash-resume, latents."""

import importlib.util
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from videogen.stitch.config import DriftConfig
from videogen.stitch.stats import frame_lab_stats
from videogen.stitch.stitcher import Stitcher

_spec = importlib.util.spec_from_file_location("drift_bench", Path(__file__).parents[2] / "benchmarks" / "drift.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

H, W = 48, 64


def run(stitcher, segments, shots=None):
    """Drive a stitcher like the render loop; `shots`: segment indices that start a new shot."""
    out = []
    for k, seg in enumerate(segments):
        if k == 0 or (shots and k in shots):
            out.append(stitcher.new_shot())
        out.append(stitcher.push(seg))
    out.append(stitcher.flush())
    return np.concatenate([o for o in out if len(o)])


@pytest.mark.parametrize("lengths, overlap", [([17, 17, 17], 4), ([9, 13, 8], 4), ([5, 5], 0), ([21, 9, 10, 33], 1)])
def test_total_frames_is_f0_plus_later_segments_minus_overlap(lengths, overlap):
    segs = [np.full((n, 8, 8, 3), 100, np.uint8) for n in lengths]
    out = run(Stitcher(overlap, DriftConfig(mode="off")), segs)
    assert len(out) == lengths[0] + sum(n - overlap for n in lengths[1:])


def test_push_holds_back_the_overlap_and_flush_returns_it():
    st = Stitcher(4, DriftConfig(mode="off"))
    assert len(st.new_shot()) == 0
    assert len(st.push(np.zeros((17, 8, 8, 3), np.uint8))) == 13
    assert len(st.push(np.zeros((17, 8, 8, 3), np.uint8))) == 13  # 4 blended + 9
    assert len(st.flush()) == 4


def test_crossfade_goes_from_outgoing_to_incoming_content():
    a, b = np.full((10, 4, 4, 3), 50, np.uint8), np.full((10, 4, 4, 3), 200, np.uint8)
    out = run(Stitcher(4, DriftConfig(mode="off")), [a, b])
    seam = out[6:10, 0, 0, 0].astype(int)
    assert 50 < seam[0] < seam[1] < seam[2] < seam[3] < 200 and out[5, 0, 0, 0] == 50 and out[10, 0, 0, 0] == 200


def test_a_short_last_segment_keeps_exact_frame_accounting():
    """The trimmed last segment of a shot may be shorter than 2*O (O + a few new frames)."""
    st = Stitcher(4, DriftConfig(mode="off"))
    out = [st.push(np.full((9, 8, 8, 3), 10, np.uint8)), st.push(np.full((6, 8, 8, 3), 200, np.uint8)), st.flush()]
    assert sum(len(x) for x in out) == 9 + (6 - 4)


def test_a_shot_shorter_than_the_overlap_is_one_segment_held_whole():
    st = Stitcher(17, DriftConfig(mode="off"))
    assert len(st.push(np.zeros((8, 8, 8, 3), np.uint8))) == 0
    assert len(st.flush()) == 8


def test_a_later_segment_shorter_than_the_overlap_is_rejected():
    st = Stitcher(4, DriftConfig(mode="off"))
    st.push(np.zeros((9, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="`frames`.*at least 4"):
        st.push(np.zeros((3, 8, 8, 3), np.uint8))


def chain(n_seg=8, seg=25, overlap=4, **kw):
    return list(bench.chain_segments(bench.Scene(H, W), n_seg, seg, overlap, **kw))


def measure(out, n_seg, seg, overlap):
    stats = frame_lab_stats(out)
    starts = [k * (seg - overlap) for k in range(n_seg)]
    seg_means = np.array([stats[a:b, :3].mean(0) for a, b in zip(starts, starts[1:] + [len(out)])])
    return stats, seg_means


def test_compounding_drift_is_corrected_within_targets():
    n_seg, seg, o = 8, 25, 4
    segs = chain(n_seg, seg, o)
    plain = run(Stitcher(o, DriftConfig(mode="off")), segs)
    st = Stitcher(o, DriftConfig(mode="lab-meanstd"))
    fixed = run(st, segs)
    _, m_plain = measure(plain, n_seg, seg, o)
    _, m_fixed = measure(fixed, n_seg, seg, o)
    assert m_plain[-1, 0] - m_plain[0, 0] < -3  # the chain darkens visibly uncorrected
    assert abs(m_fixed[-1, 0] - m_fixed[0, 0]) <= 1.0
    rep = st.report()
    assert rep.dE76_mean <= 2.3
    assert rep.seam_jump_max <= 1.5


@pytest.mark.parametrize("mode", ["mkl"])
def test_mkl_mode_also_corrects_the_chain(mode):
    segs = chain(6, 25, 4)
    st = Stitcher(4, DriftConfig(mode=mode))
    run(st, segs)
    assert st.report().dE76_mean <= 2.3


def test_a_deliberate_shot_change_is_kept():
    n_seg, seg, o = 6, 25, 4
    segs = chain(n_seg, seg, o, drift=False, cut_at=3)
    # the second shot is made much darker on purpose: a change the user asked for
    segs[3:] = [(s * 0.4).astype(np.uint8) for s in segs[3:]]
    plain = run(Stitcher(o, DriftConfig(mode="off")), segs, shots=[3])
    st = Stitcher(o, DriftConfig(mode="lab-meanstd"))
    fixed = run(st, segs, shots=[3])
    assert len(fixed) == len(plain)
    cut = st.report().shot_starts[1]
    # the second shot is its own anchor: its first segment passes unchanged
    assert np.array_equal(fixed[cut : cut + seg - o], plain[cut : cut + seg - o])
    L_fixed = frame_lab_stats(fixed)[:, 0]
    assert L_fixed[cut:].mean() < L_fixed[:cut].mean() - 15


def test_without_a_new_shot_the_same_change_would_be_flattened():
    segs = chain(4, 25, 0, drift=False)
    segs[2:] = [(s * 0.6).astype(np.uint8) for s in segs[2:]]
    st = Stitcher(0, DriftConfig(mode="lab-meanstd", max_shift=50))
    fixed = run(st, segs)
    L = frame_lab_stats(fixed)[:, 0]
    assert abs(L[-25:].mean() - L[:25].mean()) < 2  # this is why shots must be marked


def test_ramp_has_no_pop_at_hard_seams():
    n_seg, seg = 6, 25
    segs = chain(n_seg, seg, 0)
    st = Stitcher(0, DriftConfig(mode="lab-meanstd", ramp=True))
    run(st, segs)
    rep = st.report()
    assert rep.seam_jump_max <= 1.5, rep.seam_jumps
    st_noramp = Stitcher(0, DriftConfig(mode="lab-meanstd", ramp=False))
    run(st_noramp, segs)
    assert st_noramp.report().seam_jump_max > rep.seam_jump_max  # what the ramp buys


def test_clamp_bounds_how_far_the_mean_moves():
    segs = chain(4, 17, 0, drift=False)
    segs[1:] = [(s * 0.5).astype(np.uint8) for s in segs[1:]]
    plain = run(Stitcher(0, DriftConfig(mode="off")), segs)
    fixed = run(Stitcher(0, DriftConfig(mode="lab-meanstd", max_shift=3.0, ramp=False)), segs)
    dL = frame_lab_stats(fixed)[17:, 0].mean() - frame_lab_stats(plain)[17:, 0].mean()
    assert 2.0 < dL <= 3.0 + 0.5  # moved, but no more than max_shift (plus LUT rounding)


def test_strength_zero_is_the_identity():
    segs = chain(3, 17, 4)
    a = run(Stitcher(4, DriftConfig(mode="off")), segs)
    b = run(Stitcher(4, DriftConfig(mode="lab-meanstd", strength=0.0)), segs)
    assert np.array_equal(a, b)


def test_state_dict_round_trip_continues_identically():
    segs = chain(5, 17, 4)
    cfg = DriftConfig(mode="lab-meanstd")
    whole = run(Stitcher(4, cfg), segs)
    st = Stitcher(4, cfg)
    part = [st.new_shot(), st.push(segs[0]), st.push(segs[1])]
    state = pickle.loads(pickle.dumps(st.state_dict()))
    st2 = Stitcher(4, cfg)  # a fresh process after a crash
    st2.load_state_dict(state)
    part += [st2.push(s) for s in segs[2:]] + [st2.flush()]
    assert np.array_equal(np.concatenate([p for p in part if len(p)]), whole)
    ref = Stitcher(4, cfg)
    run(ref, segs)
    assert st2.report().to_json() == ref.report().to_json()


@pytest.mark.parametrize("mode, overlap", [("lab-meanstd", 4), ("lab-meanstd", 0), ("off", 4)])
def test_inplace_rgb0_push_equals_the_copying_rgb3_push(mode, overlap):
    """`push(inplace=True)` on RGB0 buffers (drift fix) gives the same frames as the plain push on
    RGB; the plain push never writes into its input."""
    segs = chain(4, 17, overlap)
    before = [s.copy() for s in segs]
    plain = run(Stitcher(overlap, DriftConfig(mode=mode)), segs)
    assert all(np.array_equal(a, b) for a, b in zip(segs, before))
    st, out = Stitcher(overlap, DriftConfig(mode=mode)), []
    for seg in segs:
        buf = np.zeros((*seg.shape[:3], 4), np.uint8)
        buf[..., :3] = seg
        got = st.push(buf, inplace=True)
        assert got.base is buf or got is buf or len(got) == 0 or np.shares_memory(got, buf)
        out.append(got[..., :3].copy())
    out.append(st.flush()[..., :3])
    assert np.array_equal(np.concatenate(out), plain)


def test_reference_image_anchors_the_first_segment_too():
    segs = chain(2, 17, 0, drift=False)
    ref = np.clip(segs[0][0].astype(int) + 40, 0, 255).astype(np.uint8)  # a brighter reference
    fixed = run(Stitcher(0, DriftConfig(reference_image=ref)), segs)
    assert frame_lab_stats(fixed)[:17, 0].mean() > frame_lab_stats(segs[0])[:, 0].mean() + 5


def test_report_has_the_figures_and_a_plot(tmp_path):
    st = Stitcher(4, DriftConfig(), fps=16)
    run(st, chain(3, 17, 4))
    js, png = st.report().write(tmp_path / "v.mp4")
    import json

    d = json.loads(js.read_text())
    for key in ("dE76_mean", "dE2000_mean", "seam_jumps", "flicker", "start_end", "segments", "frames"):
        assert key in d
    assert len(d["frames"]["L_mean"]) == 17 + 2 * 13
    from PIL import Image

    assert Image.open(png).size[0] == 1000


def latents_chain(n, drift=0.1):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(1, 4, 5, 6, 8, generator=g)
    return [base * (1 - drift) ** k + drift * k for k in range(n)]


def test_on_latents_is_a_no_op_unless_enabled():
    st = Stitcher(0, DriftConfig(latent=False))
    lat = latents_chain(2)
    assert st.on_latents(lat[1]) is lat[1]


def test_on_latents_moves_channel_stats_toward_the_first_window():
    st = Stitcher(0, DriftConfig(latent=True, latent_factor=1.0, ramp=False, max_std_ratio=4.0))
    lat = latents_chain(3)
    assert torch.equal(st.on_latents(lat[0]), lat[0])  # the first segment sets the anchor
    out = st.on_latents(lat[2])
    anchor_mean = lat[0].mean(dim=(2, 3, 4))
    assert (out.mean(dim=(2, 3, 4)) - anchor_mean).abs().max() < 1e-4
    assert (out.std(dim=(2, 3, 4)) - lat[0].std(dim=(2, 3, 4))).abs().max() < 1e-4


def test_on_latents_with_ramp_leaves_the_first_latent_frame_and_resets_per_shot():
    st = Stitcher(0, DriftConfig(latent=True))
    lat = latents_chain(3)
    st.on_latents(lat[0])
    out = st.on_latents(lat[2])
    assert torch.equal(out[:, :, 0], lat[2][:, :, 0]) and not torch.equal(out[:, :, -1], lat[2][:, :, -1])
    st.new_shot()
    assert torch.equal(st.on_latents(lat[2]), lat[2])  # the new shot's anchor

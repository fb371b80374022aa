"""`videogen drift report|fix` on real small MP4s written with VideoWriter, and bad input."""

import argparse
import json
from typing import ClassVar

import numpy as np
import pytest

from videogen.cli.drift import add_drift_parser, main
from videogen.io.video import VideoReader, VideoWriter

H, W, SEG = 48, 64, 9


@pytest.fixture(scope="module")
def chained(tmp_path_factory):
    """3 segments of 9 frames, each darker than the last; segments overlap by 2 frames."""
    path = tmp_path_factory.mktemp("v") / "chain.mp4"
    yy, xx = np.mgrid[0:H, 0:W]
    base = np.stack([xx * 3, yy * 4, 255 - xx * 2], -1).astype(np.float64)
    with VideoWriter(path, W, H, 8, crf=10, preset="ultrafast") as w:
        for k in range(3):
            seg = np.stack([np.roll(base, 2 * (k * (SEG - 2) + j), axis=1) for j in range(SEG)])
            w.write(np.clip(seg * 0.9**k, 0, 255).astype(np.uint8))
    return path


def test_report_prints_the_figures_as_json(chained, capsys, tmp_path):
    png = tmp_path / "drift.png"
    assert main(["report", str(chained), "--segment-frames", str(SEG), "--json", "--plot", str(png)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["num_frames"] == 3 * SEG and d["num_segments"] == 3
    for key in ("dE76_mean", "dE2000_mean", "seam_jumps", "flicker", "start_end", "segments", "step_p95"):
        assert key in d
    assert d["start_end"]["dL"] < -3  # the chain darkens
    assert png.stat().st_size > 1000


def test_fix_corrects_the_chain_and_writes_its_report(chained, tmp_path, capsys):
    out = tmp_path / "fixed.mp4"
    rc = main(["fix", str(chained), "--segment-frames", str(SEG), "--overlap", "2", "-o", str(out)])
    assert rc == 0
    assert VideoReader(out).info.num_frames == SEG + 2 * (SEG - 2)
    rep = json.loads((tmp_path / "fixed.mp4.drift.json").read_text())
    assert (tmp_path / "fixed.mp4.drift.png").exists()
    capsys.readouterr()
    main(["report", str(chained), "--segment-frames", str(SEG), "--json"])
    before = json.loads(capsys.readouterr().out)
    assert rep["dE76_mean"] < before["dE76_mean"] / 2


def test_drift_parser_plugs_into_a_main_cli(chained, capsys):
    parser = argparse.ArgumentParser(prog="videogen")
    add_drift_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["drift", "report", str(chained), "--json"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)["num_segments"] == 1


@pytest.mark.parametrize(
    "argv, option",
    [
        (["--segment-frames", "100"], "--segment-frames"),
        (["--segment-frames", "9", "--mode", "sepia"], "--mode"),
        (["--segment-frames", "9", "--strength", "1.5"], "--strength"),
        (["--segment-frames", "9", "--overlap", "5"], "--overlap"),
        (["--segment-frames", "8", "--overlap", "2"], "--segment-frames"),  # 27 = 3x8 + 3: last too short
    ],
)
def test_fix_bad_options_fail_clearly_without_output(chained, tmp_path, capsys, argv, option):
    out = tmp_path / "out.mp4"
    rc = main(["fix", str(chained), *argv, "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("videogen: error: ") and option in err and err[-1] == "\n" and err.count("\n") == 1
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("content", [b"", b"not a video at all" * 100])
def test_unreadable_video_fails_clearly_without_output(tmp_path, capsys, content):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(content)
    out = tmp_path / "out.mp4"
    assert main(["fix", str(bad), "--segment-frames", "9", "-o", str(out)]) == 2
    assert "bad.mp4" in capsys.readouterr().err
    assert main(["report", str(bad), "--json"]) == 2
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.mp4"]


def test_missing_video_fails_clearly(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope.mp4")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_fix_stream_equals_the_in_memory_stitcher_and_reuses_its_buffers(chained, tmp_path, monkeypatch):
    """The streamed path (decoder into cycled RGB0 buffers, in-place stitching, encoder thread)
    writes exactly the frames of pushing the decoded segments through a Stitcher in memory."""
    import videogen.cli.drift as cli
    from videogen.stitch.config import DriftConfig
    from videogen.stitch.stitcher import Stitcher

    reader = VideoReader(chained, decode_count=False)
    assert reader.info.num_frames == 3 * SEG  # packets counted without decoding
    n = SEG - 4  # 6 segments (the last short) through 3 buffers: every buffer is reused
    bufs = []
    segs = [s.copy() for s in reader.iter_into(lambda: bufs.append(np.empty((n, H, W, 4), np.uint8)) or bufs[-1])]
    assert [len(s) for s in segs] == [n] * 5 + [3 * SEG - 5 * n]
    st = Stitcher(1, DriftConfig())
    want = np.concatenate([st.push(s[..., :3].copy()) for s in segs] + [st.flush()])

    class Capture(VideoWriter):  # the real writer, plus a copy of every frame written
        frames: ClassVar[list] = []

        def write(self, frames):
            Capture.frames.append(np.array(frames[..., :3]))
            super().write(frames)

    monkeypatch.setattr(cli, "VideoWriter", Capture)
    counts = {}
    written = cli.fix_stream(
        reader, Stitcher(1, DriftConfig()), tmp_path / "s.mp4", n, preset="ultrafast", counts=counts
    )
    assert cli.SEGMENT_BUFFERS < 6 and counts["frames_in"] == 3 * SEG
    assert written == len(want) and np.array_equal(np.concatenate(Capture.frames), want)

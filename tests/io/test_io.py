"""Video I/O through ffmpeg: real H.264 files, streaming, no partial output."""

import imageio.v3 as iio
import numpy as np
import pytest

from videogen.io import VideoIOError, VideoReader, VideoWriter, check_output_path, probe
from videogen.io.ffmpeg import decode_command, encode_command


def _gradient_frames(n, h=48, w=64):
    t = np.arange(n)[:, None, None]
    y = np.arange(h)[None, :, None]
    x = np.arange(w)[None, None, :]
    shape = (n, h, w)
    r = np.broadcast_to((x * 4 + t * 3) % 256, shape)
    g = np.broadcast_to((y * 5) % 256, shape)
    b = np.full(shape, 128)
    return np.stack([r, g, b], -1).astype(np.uint8)


def test_written_video_reads_back_with_exact_frame_count_size_and_fps(tmp_path):
    frames = _gradient_frames(37)
    path = tmp_path / "v.mp4"
    with VideoWriter(path, 64, 48, 16, thumbnail=tmp_path / "v.png") as w:
        for i in range(0, 37, 10):  # streamed in chunks
            w.write(frames[i : i + 10])
    info = probe(path)
    assert (info.width, info.height, info.fps, info.num_frames) == (64, 48, 16.0, 37)
    assert (info.codec, info.pix_fmt) == ("h264", "yuv420p")
    back = VideoReader(path).read_all()
    assert back.shape == frames.shape
    assert np.abs(back.astype(int) - frames).mean() < 3  # smooth content survives crf 17 + 4:2:0
    assert np.array_equal(iio.imread(tmp_path / "v.png"), frames[0])  # the thumbnail is the first frame, lossless
    assert b"moov" in path.read_bytes()[:4096]  # faststart: index before the media data


def test_an_exception_inside_the_writer_leaves_no_file(tmp_path):
    path = tmp_path / "v.mp4"
    with pytest.raises(RuntimeError), VideoWriter(path, 64, 48, 16) as w:
        w.write(_gradient_frames(5))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_frames_of_the_wrong_shape_are_rejected(tmp_path):
    w = VideoWriter(tmp_path / "v.mp4", 64, 48, 16)
    with pytest.raises(ValueError, match="uint8"):
        w.write(np.zeros((2, 10, 10, 3), np.uint8))
    w.abort()


def test_corrupt_and_missing_videos_give_clear_errors(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all" * 100)
    with pytest.raises(VideoIOError, match="corrupt"):
        probe(bad)
    with pytest.raises(VideoIOError, match="does not exist"):
        probe(tmp_path / "missing.mp4")


def test_unwritable_output_paths_are_caught_before_work(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        check_output_path(tmp_path / "no" / "such" / "dir.mp4")
    with pytest.raises(ValueError, match="is a directory"):
        check_output_path(tmp_path)


def test_packet_count_probe_equals_the_decoded_count_and_iter_into_fills_buffers(tmp_path):
    path = tmp_path / "v.mp4"
    with VideoWriter(path, 64, 48, 16) as w:
        w.write(_gradient_frames(23))
    assert probe(path, decode=False) == probe(path)
    back = VideoReader(path).read_all()
    buf = np.empty((10, 48, 64, 3), np.uint8)
    got = [c.copy() for c in VideoReader(path).iter_into(lambda: buf, "rgb24")]
    assert [len(c) for c in got] == [10, 10, 3] and np.array_equal(np.concatenate(got), back)


def _value(args, flag):
    return args[args.index(flag) + 1]


def test_the_encode_command_pipes_raw_frames_into_h264_yuv420p_with_the_index_first():
    cmd = encode_command("out.mp4", 64, 48, 16.0, pix_fmt="rgb0", crf=17, preset="medium")
    source = cmd.index("-i")
    inputs, outputs = cmd[:source], cmd[source + 2 :]
    assert cmd[source + 1] == "pipe:0"
    assert [_value(inputs, f) for f in ("-f", "-pix_fmt", "-s", "-r")] == ["rawvideo", "rgb0", "64x48", "16"]
    assert [_value(outputs, f) for f in ("-vcodec", "-pix_fmt", "-crf", "-preset", "-movflags")] == [
        "libx264",
        "yuv420p",
        "17",
        "medium",
        "+faststart",
    ]
    assert "-an" in outputs and "out.mp4" in outputs


def test_the_decode_command_reads_the_first_video_stream_to_raw_frames_on_stdout():
    cmd = decode_command("in.mp4", "rgb24")
    assert cmd[cmd.index("-map") + 1] == "0:v:0" and _value(cmd, "-pix_fmt") == "rgb24" and "pipe:1" in cmd

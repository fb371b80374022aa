"""The live channel between a stream's worker and the API (`api.spool`), in one process: what a
reader gets, from where, and how much disk a long stream keeps."""

from __future__ import annotations

import numpy as np

from videogen.api.spool import CHUNK, END, FILES, FRAME, SpoolReader, SpoolWriter


def frames(n: int, value: int = 0) -> np.ndarray:
    return np.full((n, 16, 16, 3), value, np.uint8)


def write_chunks(writer: SpoolWriter, count: int, start: int = 0) -> None:
    """The built-in causal model's chunks: the first frame alone, then 12 frames each."""
    for i in range(start, start + count):
        first = 0 if i == 0 else 1 + 12 * (i - 1)
        writer.write_chunk(i, first, "a red circle", 16.0, frames(1 if i == 0 else 12, i))


def frame_indexes(records) -> list[int]:
    return [r.index for r in records if r.kind == FRAME]


def test_a_reader_from_0_gets_every_chunk_and_frame_in_order_then_the_end(tmp_path):
    reader = SpoolReader(tmp_path / "s", start=0)
    assert reader.read() == []  # nothing written yet: not an error
    writer = SpoolWriter(tmp_path / "s", max_bytes=1 << 20)
    write_chunks(writer, 2)
    first = reader.read()
    write_chunks(writer, 1, start=2)
    writer.end("completed", frames=25)
    rest = reader.read()
    assert [(r.kind, r.index) for r in first[:4]] == [(CHUNK, 0), (FRAME, 0), (CHUNK, 1), (FRAME, 1)]
    assert first[2].info == {"index": 1, "first_frame": 1, "frames": 12, "prompt": "a red circle", "fps": 16.0}
    assert frame_indexes(first + rest) == list(range(25))
    assert rest[-1].kind == END and reader.ended and reader.end_info == {"status": "completed", "frames": 25}
    assert reader.read() == []


def test_a_live_reader_gets_only_what_is_made_after_it_joined(tmp_path):
    writer = SpoolWriter(tmp_path / "s", max_bytes=1 << 20)
    write_chunks(writer, 2)  # frames 0..12
    live = SpoolReader(tmp_path / "s", start=None)
    write_chunks(writer, 1, start=2)  # frames 13..24
    records = live.read()
    assert records[0].kind == CHUNK and records[0].index == 2 and frame_indexes(records) == list(range(13, 25))
    assert frame_indexes(SpoolReader(tmp_path / "s", start=17).read()) == list(range(17, 25))


def test_the_ring_keeps_disk_use_bounded_and_a_late_reader_starts_at_the_oldest_frame_kept(tmp_path):
    writer = SpoolWriter(tmp_path / "s", max_bytes=FILES * 4000)  # about one chunk per file
    write_chunks(writer, 200)  # 2389 frames
    files = sorted((tmp_path / "s").iterdir())
    assert len(files) == FILES and sum(f.stat().st_size for f in files) < 2 * FILES * 4000
    got = frame_indexes(SpoolReader(tmp_path / "s", start=0).read())
    assert got == list(range(got[0], 2389)) and got[0] > 2000


def test_a_restarted_stream_continues_where_the_reader_was(tmp_path):
    """A worker that takes the job over streams again from frame 0 into a fresh spool."""
    writer = SpoolWriter(tmp_path / "s", max_bytes=1 << 20)
    write_chunks(writer, 3)
    reader = SpoolReader(tmp_path / "s", start=0)
    assert frame_indexes(reader.read()) == list(range(25))
    writer = SpoolWriter(tmp_path / "s", max_bytes=1 << 20)  # the new attempt
    write_chunks(writer, 5)
    again = reader.read()
    assert frame_indexes(again) == list(range(25, 49)) and [r.index for r in again if r.kind == CHUNK] == [3, 4]


def test_a_record_still_being_written_is_delivered_once_complete(tmp_path):
    writer = SpoolWriter(tmp_path / "s", max_bytes=1 << 20)
    write_chunks(writer, 2)
    reader = SpoolReader(tmp_path / "s", start=0)
    path = next((tmp_path / "s").iterdir())
    data = path.read_bytes()
    path.write_bytes(data[:-100])  # as if the writer's flush were half done
    assert frame_indexes(reader.read()) == list(range(12))
    with open(path, "ab") as f:
        f.write(data[-100:])
    assert frame_indexes(reader.read()) == [12]


def test_a_writer_whose_spool_was_taken_over_writes_nothing_into_the_new_one(tmp_path):
    old = SpoolWriter(tmp_path / "s", max_bytes=FILES * 4000)
    write_chunks(old, 1)
    new = SpoolWriter(tmp_path / "s", max_bytes=1 << 20)  # the worker that took the job over
    write_chunks(old, 5, start=1)  # the old one has not noticed yet (would rotate into new files)
    old.end("cancelled")
    write_chunks(new, 2)
    reader = SpoolReader(tmp_path / "s", start=0)
    assert frame_indexes(reader.read()) == list(range(13)) and not reader.ended
    assert [p.name for p in sorted((tmp_path / "s").iterdir())] == ["00000000.spool"]

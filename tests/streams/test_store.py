"""StreamStore without a broker: offsets, meta files, retention, restarts,
consumer offsets, and the delivery content with its x-stream-offset header."""
import os
import struct

from pamqp import frame as pframe

from lavinmq._core import codec
from lavinmq._core.stream import py_stream_content
from lavinmq._core.stream_store import META, StreamStore
from tests.unit.records import record

SEG = 4096


def fill(store, n, start=0, ts=1_700_000_000_000, size=100):
    for i in range(start, start + n):
        store.py_append(record(b"%06d" % i + b"x" * (size - 6), ts=ts + i))


def offsets_of(store):
    return [(first, count) for _, first, count, _ in store.segment_offsets()]


def test_offsets_are_dense_across_segments(tmp_path):
    s = StreamStore(str(tmp_path), SEG)
    assert (s.first_offset, s.last_offset, s.count) == (1, 0, 0)
    fill(s, 200)
    assert (s.first_offset, s.last_offset, s.count) == (1, 200, 200)
    segs = offsets_of(s)
    assert len(segs) > 3
    expected = 1
    for first, count in segs:
        assert first == expected
        expected += count
    assert expected == 201
    # every offset is found where it is
    for target in (1, 2, 37, 100, 199, 200):
        seg, pos, offset = s.locate(target)
        assert offset == target
        assert s.read_at(seg.id, pos)[8 + 1 + 10 + 1 + 3 + 2 + 8:][:6] == b"%06d" % (target - 1)


def test_meta_files_hold_first_offset_and_timestamps(tmp_path):
    s = StreamStore(str(tmp_path), SEG)
    fill(s, 100)
    sealed = s.segment_offsets()[:-1]
    for seg_id, first, count, _ in sealed:
        data = open(tmp_path / ("meta.%010d" % seg_id), "rb").read()
        mcount, mfirst, first_ts, last_ts = META.unpack(data)
        assert (mcount, mfirst) == (count, first)
        assert first_ts == 1_700_000_000_000 + first - 1
        assert last_ts == 1_700_000_000_000 + first + count - 2
    # the write segment has one too, with its first offset
    wid, wfirst, _, _ = s.segment_offsets()[-1]
    assert META.unpack(open(tmp_path / ("meta.%010d" % wid), "rb").read())[1] == wfirst


def test_offsets_survive_restart_and_retention(tmp_path):
    s = StreamStore(str(tmp_path), SEG)
    fill(s, 300)
    s.max_length = 100
    s.apply_retention(0)
    kept = offsets_of(s)
    assert s.count >= 100 and s.first_offset > 1
    assert s.last_offset == 300
    first = s.first_offset
    s.close()
    s = StreamStore(str(tmp_path), SEG)
    assert offsets_of(s) == kept
    assert (s.first_offset, s.last_offset) == (first, 300)
    fill(s, 10, start=300)
    assert s.last_offset == 310
    # every sealed segment dropped: only the write segment is left, and its
    # first offset still comes back from its meta file
    s.purge()
    s.close()
    s = StreamStore(str(tmp_path), SEG)
    assert s.last_offset == 310
    assert s.locate(305)[2] == 305 or s.first_offset > 305


def test_retention_by_bytes_and_age_drops_whole_segments(tmp_path):
    s = StreamStore(str(tmp_path), SEG)
    fill(s, 200, ts=1_000_000)
    before = offsets_of(s)
    s.max_length_bytes = 20 * 130
    s.apply_retention(0)
    after = offsets_of(s)
    assert after == before[len(before) - len(after):]        # only whole segments from the front
    assert s.bytes >= 20 * 130
    s.max_length_bytes = 0
    # max-age: segments whose newest message is older than now - age
    s.max_age_ms = 10
    s.apply_retention(1_000_000 + 200 + 10)
    assert len(offsets_of(s)) == 1                            # the write segment is never dropped
    assert not [f for f in os.listdir(tmp_path) if f.startswith("meta.")
                and not os.path.exists(tmp_path / ("msgs." + f[5:]))]


def test_locate_time_and_positions(tmp_path):
    s = StreamStore(str(tmp_path), SEG)
    fill(s, 100, ts=5_000)
    assert s.locate_time(0)[2] == 1
    assert s.locate_time(5_050)[2] == 51
    assert s.locate_time(99_999)[2] == 101              # after the last: "next"
    assert s.first_position()[2] == 1
    assert s.end_position()[2] == 101
    last = s.last_position()[2]
    assert 1 < last <= 100
    assert s.locate(0)[2] == 1 and s.locate(10_000)[2] == 101


def test_torn_tail_after_crash_keeps_offsets(tmp_path):
    s = StreamStore(str(tmp_path), SEG)
    fill(s, 50)
    wid = s.segment_ids()[-1]
    size = s.segment_offsets()[-1][3] + 4
    s.close()
    # half a record at the end of the write segment, as a power cut leaves it
    with open(tmp_path / ("msgs.%010d" % wid), "r+b") as f:
        f.seek(size)
        f.write(record(b"t" * 8000)[:100])
    s = StreamStore(str(tmp_path), SEG)
    assert (s.first_offset, s.last_offset) == (1, 50)
    fill(s, 1, start=50)
    assert s.last_offset == 51 and s.locate(51)[2] == 51


def test_consumer_offsets_file(tmp_path):
    s = StreamStore(str(tmp_path), SEG)
    fill(s, 10)
    s.save_offsets([("a", 3), ("b", 7)])
    s.save_offsets([("a", 5)])
    s.close()
    with open(tmp_path / "consumer_offsets", "ab") as f:
        f.write(b"\x05torn")                 # a torn last entry is ignored
    s = StreamStore(str(tmp_path), SEG)
    assert s.tracked == {"a": 5, "b": 7}


def decode_header_frame(data):
    _, _, header = pframe.unmarshal(data[:struct.unpack_from(">I", data, 3)[0] + 8])
    return header.properties


def test_delivery_header_gets_offset():
    plain = record(b"body")
    props = decode_header_frame(py_stream_content(plain, 42))
    assert props.headers == {"x-stream-offset": 42}
    with_headers = record(b"body", props={"content_type": "text/plain", "headers": {"a": "b", "n": 1},
                                          "message_id": "m1", "delivery_mode": 2})
    props = decode_header_frame(py_stream_content(with_headers, 7))
    assert props.headers == {"a": "b", "n": 1, "x-stream-offset": 7}
    assert (props.content_type, props.message_id, props.delivery_mode) == ("text/plain", "m1", 2)
    # an encoding and a type before and after the table survive too
    r = record(b"x", props={"content_encoding": "gzip", "headers": {}, "type": "t"})
    props = decode_header_frame(py_stream_content(r, 1))
    assert (props.content_encoding, props.message_type, props.headers) == ("gzip", "t", {"x-stream-offset": 1})
    # consumers that ask get the time the broker stored the message too
    props = decode_header_frame(py_stream_content(record(b"x", ts=1_700_000_000_123), 9, with_ts=True))
    assert props.headers == {"x-stream-offset": 9, "x-stream-timestamp": 1_700_000_000_123}
    props = decode_header_frame(py_stream_content(with_headers, 9, with_ts=True))
    assert props.headers == {"a": "b", "n": 1, "x-stream-offset": 9, "x-stream-timestamp": 1_700_000_000_000}


def test_timestamp_argument_round_trips():
    table = codec.decode_table_bytes(b"\x00\x00\x00\x0b\x01tT\x00\x00\x00\x00\x00\x00\x00\x05")
    assert isinstance(table["t"], codec.Timestamp) and table["t"] == 5
    assert codec.encode_table_bytes(table) == b"\x00\x00\x00\x0b\x01tT\x00\x00\x00\x00\x00\x00\x00\x05"

import os
import random
import struct

import pytest

from lavinmq._core.segment import MessageStore
from tests.unit.records import record


def drain(store):
    out = []
    while (m := store.py_shift()) is not None:
        out.append(m)
    return out


def test_append_shift_in_order(tmp_path):
    s = MessageStore(str(tmp_path), 4096)
    recs = [record(b"m%d" % i) for i in range(100)]
    for r in recs:
        s.py_append(r)
    assert s.ready == 100
    got = drain(s)
    assert [g[1] for g in got] == recs
    assert all(not g[2] for g in got)
    assert s.ready == 0


def test_segment_file_layout(tmp_path):
    s = MessageStore(str(tmp_path), 1 << 20)
    r = record(b"hello", b"ex", b"rk", {"delivery_mode": 2})
    seg, pos, size = s.py_append(r)
    s.close()
    data = open(tmp_path / "msgs.0000000001", "rb").read()
    assert struct.unpack_from("<I", data)[0] == 4          # schema version
    assert (seg, pos, size) == (1, 4, len(r))
    assert data[4:4 + len(r)] == r
    assert struct.unpack_from("<q", data, 4 + len(r))[0] == 0   # end-of-data mark


def test_rolls_over_and_deletes_acked_segments(tmp_path):
    s = MessageStore(str(tmp_path), 4096)
    for i in range(500):
        s.py_append(record(b"x" * 100))
    assert s.segment_count > 10
    for m in drain(s):
        s.py_delete(m[0])
    s.py_flush()
    # only the write segment (the newest) is left, and no ack file for a deleted one
    files = sorted(os.listdir(tmp_path))
    assert s.segment_count == 1
    assert [f for f in files if f.startswith("msgs.")] == ["msgs.%010d" % s.segment_ids()[0]]
    assert all(f[5:] == "%010d" % s.segment_ids()[0] for f in files if f.startswith("acks."))


def test_requeue_goes_back_to_original_position(tmp_path):
    s = MessageStore(str(tmp_path), 4096)
    recs = [record(b"%d" % i) for i in range(6)]
    for r in recs:
        s.py_append(r)
    taken = [s.py_shift() for _ in range(4)]
    s.py_requeue(taken[2][0])
    s.py_requeue(taken[0][0])
    rest = drain(s)
    assert [m[1] for m in rest] == [recs[0], recs[2], recs[4], recs[5]]
    assert [m[2] for m in rest] == [True, True, False, False]


def test_reopen_skips_acked(tmp_path):
    s = MessageStore(str(tmp_path), 4096)
    recs = [record(b"%d" % i) for i in range(50)]
    for r in recs:
        s.py_append(r)
    for _ in range(10):
        s.py_shift()
    s.close()
    s2 = MessageStore(str(tmp_path), 4096)
    assert s2.ready == 50   # shifted but never acked: still there
    got = drain(s2)
    for m in got[:20]:
        s2.py_delete(m[0])
    s2.close()
    s3 = MessageStore(str(tmp_path), 4096)
    assert s3.ready == 30
    assert [m[1] for m in drain(s3)] == recs[20:]


def test_torn_tail_is_cut(tmp_path):
    s = MessageStore(str(tmp_path), 1 << 16)
    recs = [record(b"%d" % i * 10) for i in range(5)]
    for r in recs:
        s.py_append(r)
    s.close()
    path = tmp_path / "msgs.0000000001"
    data = bytearray(open(path, "rb").read())
    # a crash mid-append: the body landed, the timestamp (written last) did not
    tail = 4 + sum(len(r) for r in recs)
    torn = record(b"y" * 50)
    data[tail + 8:tail + 40] = torn[8:40]
    open(path, "wb").write(data)
    s2 = MessageStore(str(tmp_path), 1 << 16)
    assert s2.ready == 5
    assert [m[1] for m in drain(s2)] == recs
    s2.py_append(recs[0])      # appends where the torn record was
    assert drain(s2)[0][1] == recs[0]


def test_truncated_segment_is_cut(tmp_path):
    s = MessageStore(str(tmp_path), 4096)
    recs = [record(b"z" * 300) for i in range(30)]
    for r in recs:
        s.py_append(r)
    s.close()
    first = tmp_path / "msgs.0000000001"
    size = os.path.getsize(first)
    os.truncate(first, size - 100)      # the last record of a sealed segment lost its end
    s2 = MessageStore(str(tmp_path), 4096)
    got = drain(s2)
    assert len(got) == 29 and all(m[1] == recs[0] for m in got)


def test_damaged_ack_file_tolerated(tmp_path):
    s = MessageStore(str(tmp_path), 1 << 16)
    for i in range(10):
        s.py_append(record(b"%d" % i))
    first = s.py_shift()
    s.py_delete(first[0])
    s.close()
    with open(tmp_path / "acks.0000000001", "ab") as f:
        f.write(b"\x00" * 9 + b"\x07")     # zero fill plus a torn entry
    s2 = MessageStore(str(tmp_path), 1 << 16)
    assert s2.ready == 9


def test_random_interleaving_keeps_counts(tmp_path):
    """Publish/consume/ack interleaved at random across many segment
    rollovers: every message comes out once, in order, and fully acked
    segments are removed (this once freed a stale pointer)."""
    s = MessageStore(str(tmp_path), 4096)
    rnd = random.Random(1)
    published = consumed = 0
    expect = 0
    for i in range(3000):
        for _ in range(rnd.randint(0, 40)):
            s.py_append(record(b"%08d" % published))
            published += 1
        for _ in range(rnd.randint(0, 40)):
            m = s.py_shift()
            if m is None:
                break
            assert m[1].endswith(b"%08d" % expect)
            expect += 1
            s.py_delete(m[0])
            consumed += 1
        if i % 7 == 0:
            s.py_flush()
    s.py_flush()
    assert s.ready == published - consumed
    assert s.segment_count <= (published - consumed) // 20 + 2


def filled(tmp_path, n=30, size=4096):
    s = MessageStore(str(tmp_path), size)
    recs = [record(b"z" * 300) for i in range(n)]
    for r in recs:
        s.py_append(r)
    s.close()
    return recs


def test_garbage_in_a_sealed_segment_closes_the_store(tmp_path, caplog):
    n = len(filled(tmp_path)[0])
    first = tmp_path / "msgs.0000000001"
    data = bytearray(first.read_bytes())
    third = 4 + 2 * n
    data[third:third + 64] = os.urandom(64)         # the third record's header
    data[third:third + 8] = b"\xff" * 8              # with a timestamp no clock gives
    first.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    s = MessageStore(str(tmp_path), 4096, "vh/q1")
    assert s.closed and "msgs.0000000001" in s.error and "malformed record" in s.error
    assert s.ready == 0
    assert any("queue vh/q1 closed" in r.getMessage() and str(first) in r.getMessage()
               for r in caplog.records)
    # nothing is cut or rewritten: the operator gets the files as they were
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_bad_schema_version_closes_the_store(tmp_path):
    filled(tmp_path)
    second = tmp_path / "msgs.0000000002"
    data = bytearray(second.read_bytes())
    data[0:4] = b"\x09\x00\x00\x00"
    second.write_bytes(bytes(data))
    s = MessageStore(str(tmp_path), 4096)
    assert s.closed and "schema version 9" in s.error


def test_data_after_the_end_mark_of_a_sealed_segment_is_corruption(tmp_path):
    n = len(filled(tmp_path)[0])
    first = tmp_path / "msgs.0000000001"
    data = bytearray(first.read_bytes())
    data[4 + n: 4 + n + 8] = b"\x00" * 8      # the second record's timestamp zeroed
    first.write_bytes(bytes(data))
    s = MessageStore(str(tmp_path), 4096)
    assert s.closed and "after the end mark" in s.error


def test_zero_tail_of_a_sealed_segment_is_fine(tmp_path):
    # a crash between filling a segment and cutting it to its data leaves zeros
    recs = filled(tmp_path)
    first = tmp_path / "msgs.0000000001"
    with open(first, "ab") as f:
        f.write(b"\x00" * 1000)
    s = MessageStore(str(tmp_path), 4096)
    assert not s.closed and s.ready == len(recs)


def test_requeued_messages_come_back_redelivered_after_a_restart(tmp_path):
    """requeued.N: redelivered and the deliveries so far outlive the store
    (issue 40, LavinMQ #1911); acked ones are left out."""
    s = MessageStore(str(tmp_path), 4096)
    recs = [record(b"m%d" % i) for i in range(6)]
    for r in recs:
        s.py_append(r)
    got = [s.py_shift() for _ in range(4)]
    s.py_requeue(got[1][0], 3)
    s.py_requeue(got[2][0])
    s.py_requeue(got[0][0], 2)
    m = s.py_shift()                   # m0 again, then acked: not redelivered after the restart
    assert m[1] == recs[0] and m[2]
    s.py_delete(m[0])
    s.py_delete(got[3][0])
    s.close()
    assert os.path.exists(tmp_path / "requeued.0000000001")
    s2 = MessageStore(str(tmp_path), 4096)
    assert sorted(n for _, n in s2.redelivery_counts()) == [1, 3]
    after = drain(s2)
    assert [(g[1], g[2]) for g in after] == [(recs[1], True), (recs[2], True), (recs[4], False), (recs[5], False)]
    s2.close()


def test_requeued_file_goes_with_its_segment(tmp_path):
    s = MessageStore(str(tmp_path), 256)
    for i in range(40):
        s.py_append(record(b"x%02d" % i))
    first = s.py_shift()
    s.py_requeue(first[0])
    s.py_flush()
    assert os.path.exists(tmp_path / "requeued.0000000001")
    for g in drain(s):
        s.py_delete(g[0])
    s.py_flush()
    assert not os.path.exists(tmp_path / "requeued.0000000001")
    assert not os.path.exists(tmp_path / "msgs.0000000001")
    s.close()


def test_requeued_file_written_once_per_message_without_counts(tmp_path):
    """A consumer that rejects with requeue in a loop writes one pair, not one a reject."""
    s = MessageStore(str(tmp_path), 4096)
    s.py_append(record(b"poison"))
    for _ in range(1000):
        sp = s.py_shift()[0]
        s.py_requeue(sp)
        s.py_flush()
    assert os.path.getsize(tmp_path / "requeued.0000000001") == 8
    s.close()

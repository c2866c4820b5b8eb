"""The zeros a write segment gets ahead of its writer come from the prefill
thread (lavinmq/_core/_prefill.pxi), not from the append that needs them."""
import threading
import time

from lavinmq._core.segment import MessageStore, prefill_hold
from tests.unit.records import record


def wait_until(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.001)
    return pred()


def test_the_next_stretch_is_written_by_the_thread_before_the_writer_needs_it(tmp_path):
    s = MessageStore(str(tmp_path), 8 << 20)
    rec = record(b"x" * 200)
    handed_out = None
    for _ in range(20_000):
        s.py_append(rec)
        size, prepared, on_its_way, _ = s.prefill_state()
        assert prepared >= size + 8        # the writer never writes where no zeros are
        if on_its_way:
            handed_out = (size, prepared)
            break
    assert handed_out is not None, "no stretch was ever handed to the thread"
    # nothing more is appended: only the thread can finish it
    assert wait_until(lambda: s.prefill_state()[3])
    size, prepared = handed_out
    # the writer takes the stretch when it gets to the end of the zeros it
    # has, without writing any itself: they reach further than one record
    while s.prefill_state()[1] == prepared:
        s.py_append(rec)
    new_size, new_prepared, _, _ = s.prefill_state()
    assert new_prepared - prepared >= 16384
    with open(tmp_path / "msgs.0000000001", "rb") as f:
        f.seek(new_size + 8)
        assert f.read(new_prepared - new_size - 8).count(0) == new_prepared - new_size - 8
    s.close()


def test_sealed_segments_end_at_their_data_with_stretches_on_their_way(tmp_path):
    s = MessageStore(str(tmp_path), 1 << 20)
    recs = [record(b"%06d" % i + b"y" * 250) for i in range(20_000)]
    for r in recs:
        s.py_append(r)
    ids = s.segment_ids()
    assert len(ids) > 3
    s.close()
    for seg_id in ids[:-1]:
        with open(tmp_path / ("msgs.%010d" % seg_id), "rb") as f:
            data = f.read()
        # cut to its data: it ends with a record's body, not with zeros a
        # late stretch wrote past the cut
        assert data.endswith(b"y" * 250), seg_id
        assert len(data) < (1 << 20) + 512
    s = MessageStore(str(tmp_path), 1 << 20)
    got = []
    while (m := s.py_shift()) is not None:
        got.append(m[1])
    assert got == recs
    s.close()


def test_a_stretch_the_thread_has_not_started_is_written_by_the_writer_not_waited_for(tmp_path):
    s = MessageStore(str(tmp_path), 8 << 20)
    rec = record(b"x" * 200)
    s.py_append(rec)
    prefill_hold(True)      # the thread busy elsewhere: jobs wait in its queue
    t = None
    try:
        while not s.prefill_state()[2]:
            s.py_append(rec)
        _, handed_out_at, _, _ = s.prefill_state()
        done = threading.Event()

        def write_past_it():
            while s.prefill_state()[1] == handed_out_at:
                s.py_append(rec)
            done.set()

        t = threading.Thread(target=write_past_it)
        t.start()
        # waiting for the queued stretch would wait for the thread (held)
        assert done.wait(5), "the writer waited for a stretch the thread had not started"
        size, prepared, _, _ = s.prefill_state()
        assert prepared >= size + 8
    finally:
        prefill_hold(False)
        if t is not None:
            t.join()
    with open(tmp_path / "msgs.0000000001", "rb") as f:
        f.seek(size + 8)
        assert f.read(prepared - size - 8).count(0) == prepared - size - 8
    s.close()


def _bytes_dirtied():
    """This process's write_bytes: the kernel adds a folio's size when one of
    its pages goes dirty, which is what the next fdatasync writes back."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise AssertionError("no write_bytes in /proc/self/io")


def test_a_record_in_the_zeros_dirties_its_pages_not_the_stretch(tmp_path):
    # a store whose commits come often (confirms: a flush takes its commit
    # each round) gets its zeros in 16 KiB writes: one 256 KiB write made a
    # 256 KiB folio (Linux >= 6.16 on ext4), and a record copied into any of
    # its pages had the next fdatasync write all of it back. On a kernel
    # without large folios this holds either way.
    import os
    s = MessageStore(str(tmp_path), 8 << 20)
    rec = record(b"x" * 200)
    n = 0
    while True:     # past the first stretches, which are small (16 KiB up)
        s.py_append(rec)
        n += 1
        if n % 50 == 0:
            s.take_sync()       # what each flush does
        size, prepared, on_its_way, done = s.prefill_state()
        if on_its_way and size > 600_000:
            break
    assert wait_until(lambda: s.prefill_state()[3])
    fd = os.open(tmp_path / "msgs.0000000001", os.O_RDONLY)
    try:
        os.fdatasync(fd)            # every page clean: the next write dirties anew
        before = _bytes_dirtied()
        s.py_append(rec)
        dirtied = _bytes_dirtied() - before
    finally:
        os.close(fd)
    most = 2 * max(16384, os.sysconf("SC_PAGESIZE"))   # a record across two folios
    assert dirtied <= most, f"one {len(rec)}-byte record dirtied {dirtied} bytes"
    s.close()

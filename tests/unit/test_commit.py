"""Commit records (lavinmq/commit.py) with real stores: after a machine
restart recovery keeps exactly what group commits vouch for, and never a
record whose bytes did not all reach the disk; after a crash (same boot)
everything written loads, as before. A power cut is simulated by damaging
the files the way a disk may leave them (a page never written) and by
changing the boot id."""
import os
import shutil

import pytest

from lavinmq import commit as commits, sync
from lavinmq._core.segment import MessageStore
from tests.unit.records import record

PAGE = 4096


def flush(store):
    """One group commit of this store, as the syncer's worker runs it."""
    files, directory, job = store.take_sync()
    dirs = [directory, os.path.dirname(directory)] if directory else []
    sync.flush_round(files, dirs, [job] if job else [], os.path.dirname(store.dir))
    if job:
        store.commit_done(job)
    return job


def bodies(store):
    out = []
    while (m := store.py_shift()) is not None:
        out.append(m[1])
    return out


@pytest.fixture
def syncer(tmp_path):
    return sync.Syncer(str(tmp_path))      # no event loop: marks only


@pytest.fixture
def reboot(monkeypatch):
    """The machine restarted: another boot id."""
    def go():
        monkeypatch.setattr(commits, "BOOT_ID", os.urandom(16))
    return go


def lose_page(path, offset):
    """The page holding `offset` never reached the disk: it reads as zeros."""
    start = offset - offset % PAGE
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(bytes(PAGE))


def committed(tmp_path, syncer):
    """A store with five records whose flush completed. -> (dir, store, records)."""
    q = str(tmp_path / "q")
    s = MessageStore(q, 1 << 20, None, syncer)
    first = [record(b"one%d" % i) for i in range(5)]
    for r in first:
        s.py_append(r)
    flush(s)
    return q, s, first


def overlapped(s, tmp_path, between):
    """Flush A taken, `between()` appends more, flush B taken before A is
    done (lavinmq/sync.py's MAX_IN_FLIGHT), then both run. -> (job A, what
    `between` returned)."""
    files_a, _, job_a = s.take_sync()
    got = between()
    files_b, _, job_b = s.take_sync()
    assert (job_b[2], job_b[3]) == (job_a[2], job_a[3])     # B vouches from where A does
    for files, job in ((files_a, job_a), (files_b, job_b)):
        sync.flush_round(files, [], [job], str(tmp_path))
    return job_a, got


def test_a_torn_record_past_the_last_commit_is_cut_not_delivered(tmp_path, syncer, reboot):
    q = str(tmp_path / "q")
    s = MessageStore(q, 1 << 20, None, syncer)
    committed = [record(b"c%d" % i) for i in range(10)]
    for r in committed:
        s.py_append(r)
    assert flush(s) is not None
    big = record(b"B" * (3 * PAGE))
    _, pos, _ = s.py_append(big)         # written, never committed...
    s.py_append(record(b"after"))
    s.close()
    lose_page(os.path.join(q, "msgs.0000000001"), pos + PAGE + 100)   # ...and half lost

    # without commit records (as before), the torn record loads as a valid
    # message whose body is partly zeros: garbage delivered
    legacy = str(tmp_path / "legacy")
    shutil.copytree(q, legacy)
    os.unlink(os.path.join(legacy, "commit"))
    old = MessageStore(legacy, 1 << 20)
    got = bodies(old)
    assert len(got) == 12 and got[10] != big and len(got[10]) == len(big)
    old.close()

    reboot()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert s.error is None
    assert bodies(s) == committed
    s.py_append(record(b"new"))
    flush(s)
    s.close()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert bodies(s) == committed + [record(b"new")]
    s.close()


def test_after_a_crash_on_the_same_boot_everything_written_loads(tmp_path, syncer):
    q = str(tmp_path / "q")
    s = MessageStore(q, 4096, None, syncer)
    recs = [record(b"r%d" % i * 30) for i in range(100)]   # several segments
    for r in recs[:10]:
        s.py_append(r)
    flush(s)
    for r in recs[10:]:
        s.py_append(r)                   # not committed: the page cache has it
    s.close()
    s = MessageStore(q, 4096, None, syncer)
    assert bodies(s) == recs
    # and the next commit covers everything since the last one that may not
    # have completed
    job = flush(s)
    assert job[2] == 1 and job[3] == 4 and len(job[4]) == s.segment_count
    s.close()


def test_an_incomplete_commit_falls_back_to_the_one_before(tmp_path, syncer, reboot):
    q, s, first = committed(tmp_path, syncer)
    _, pos, _ = s.py_append(record(b"x" * (2 * PAGE)))
    s.py_append(record(b"two"))
    flush(s)                             # its record is on disk...
    s.close()
    seg = os.path.join(q, "msgs.0000000001")
    lose_page(seg, pos + PAGE + 10)      # ...but not every byte it covers
    reboot()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert bodies(s) == first
    s.close()


def test_overlapping_flushes_a_later_one_never_keeps_an_earlier_ones_lost_bytes(tmp_path, syncer, reboot):
    """Two flushes on their way at once (lavinmq/sync.py's MAX_IN_FLIGHT):
    the second's record made it to the disk, a page of the first's bytes did
    not. The second vouches from the last completed commit, so its crc
    fails and recovery cuts back to what was confirmed, never keeping the
    zeroed page as a message."""
    q, s, first = committed(tmp_path, syncer)      # complete: confirmed
    _, pos, _ = s.py_append(record(b"x" * (2 * PAGE)))
    overlapped(s, tmp_path, lambda: s.py_append(record(b"two")))
    s.close()
    seg = os.path.join(q, "msgs.0000000001")
    lose_page(seg, pos + PAGE + 10)                 # A's bytes, partly
    reboot()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert bodies(s) == first
    s.close()


def test_overlapping_flushes_an_earlier_one_done_keeps_its_bytes_when_a_later_one_fails(
        tmp_path, syncer, reboot):
    """Flush B is taken while A is on its way, so B vouches from where the
    commit before A ended. A completes (its confirms go out); the power goes
    while B's record is on the disk and a page of B's own bytes is not. B's
    crc fails; recovery must fall back to A, whose bytes all made it, not
    cut back to where B began: that dropped A's confirmed messages (the
    power-loss harness saw one such, tests/powerloss)."""
    q, s, first = committed(tmp_path, syncer)
    second = [record(b"two%d" % i) for i in range(5)]
    for r in second:
        s.py_append(r)
    job_a, (_, pos, _) = overlapped(s, tmp_path, lambda: s.py_append(record(b"x" * (2 * PAGE))))
    s.commit_done(job_a)                            # A done: `second` confirmed
    s.close()
    lose_page(os.path.join(q, "msgs.0000000001"), pos + PAGE + 10)     # B's bytes, partly
    reboot()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert bodies(s) == first + second
    s.close()


def test_a_torn_commit_record_leaves_the_previous_one(tmp_path, syncer, reboot):
    q, s, first = committed(tmp_path, syncer)
    s.py_append(record(b"two"))
    job = flush(s)
    s.close()
    with open(os.path.join(q, "commit"), "r+b") as f:
        f.seek(commits.slot_offset(job[1]) + 20)
        f.write(b"\xff\xff")             # the newest slot is torn
    reboot()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert bodies(s) == first
    s.close()


def test_segments_the_commit_never_covered_are_removed(tmp_path, syncer, reboot):
    q = str(tmp_path / "q")
    s = MessageStore(q, 4096, None, syncer)
    recs = [record(b"%03d" % i + b"-" * 200) for i in range(60)]
    for r in recs[:5]:
        s.py_append(r)
    flush(s)
    for r in recs[5:]:
        s.py_append(r)
    assert s.segment_count > 2
    s.close()
    reboot()
    s = MessageStore(q, 4096, None, syncer)
    assert bodies(s) == recs[:5]
    assert s.segment_count == 1
    s.close()


def test_a_commit_covers_every_segment_written_since_the_last(tmp_path, syncer, reboot):
    q = str(tmp_path / "q")
    s = MessageStore(q, 4096, None, syncer)
    recs = [record(b"%03d" % i + b"-" * 200) for i in range(60)]
    for r in recs:
        s.py_append(r)
    job = flush(s)
    assert [seg for seg, _ in job[4]] == s.segment_ids()
    s.close()
    reboot()
    s = MessageStore(q, 4096, None, syncer)
    assert bodies(s) == recs
    s.close()


def test_acks_and_their_files_go_with_the_next_flush(tmp_path, syncer):
    q = str(tmp_path / "q")
    s = MessageStore(q, 1 << 20, None, syncer)
    for i in range(3):
        s.py_append(record(b"m%d" % i))
    flush(s)
    m = s.py_shift()
    s.py_delete(m[0])                    # not flushed to acks.N yet
    files, directory, job = s.take_sync()
    assert files == [os.path.join(q, "acks.0000000001")] and job is None
    assert directory == q                # the ack file is new: its name too
    s.close()


def test_a_store_written_without_commits_is_adopted(tmp_path, syncer, reboot):
    q = str(tmp_path / "q")
    s = MessageStore(q, 1 << 20)         # sync off, or an older version
    recs = [record(b"old%d" % i) for i in range(5)]
    for r in recs:
        s.py_append(r)
    s.close()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert os.path.exists(os.path.join(q, "commit"))
    s.close()
    reboot()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert bodies(s) == recs
    s.close()


def test_sync_off_removes_the_commit_file(tmp_path, syncer):
    q = str(tmp_path / "q")
    s = MessageStore(q, 1 << 20, None, syncer)
    s.py_append(record(b"a"))
    flush(s)
    s.close()
    s = MessageStore(q, 1 << 20)
    s.py_append(record(b"b"))            # never committed: no stale record may judge it
    s.close()
    assert not os.path.exists(os.path.join(q, "commit"))
    s = MessageStore(q, 1 << 20)
    assert bodies(s) == [record(b"a"), record(b"b")]
    s.close()


def test_a_new_queue_has_its_record_before_its_first_segment(tmp_path, syncer, reboot):
    q = str(tmp_path / "q")
    s = MessageStore(q, 1 << 20, None, syncer)
    exists, slots = commits.read_slots(q)
    slot = slots[0]
    assert exists and len(slots) == 1 and slot.seq == 0 and (slot.first, slot.start, slot.entries) == (1, 4, [])
    s.py_append(record(b"never committed"))
    s.close()
    reboot()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert s.error is None and bodies(s) == []
    assert s.segment_ids() == []         # the uncommitted segment is gone (a new one comes with a message)
    assert s.py_append(record(b"next"))[0] == 2      # ids never go back
    s.close()


def test_records_that_do_not_end_where_the_commit_says_close_the_queue(tmp_path, syncer, reboot):
    q = str(tmp_path / "q")
    s = MessageStore(q, 1 << 20, None, syncer)
    s.py_append(record(b"a"))
    job = flush(s)
    s.close()
    # a record that vouches for a range whose crc matches but whose records
    # do not end at its end can only come from someone else's hands
    slot = commits.Slot(job[1] + 1, os.urandom(16), 1, 4, [(10, commits.range_crc(
        os.path.join(q, "msgs.0000000001"), 0, 10))])
    commits.write_slot(q, slot)
    reboot()
    s = MessageStore(q, 1 << 20, None, syncer)
    assert s.closed and "commit record" in s.error
    with open(os.path.join(q, "msgs.0000000001"), "rb") as f:
        assert f.read(4 + len(record(b"a")))[4:] == record(b"a")    # left as found

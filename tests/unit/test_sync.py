"""Group commit (lavinmq.sync) with real stores and files: what waits for a
flush runs only after the flush that covers it, and everything written
while one flush runs is covered by a single next one."""
import asyncio
import os

import pytest

from lavinmq import commit, sync
from lavinmq._core import flusher
from lavinmq._core.segment import MessageStore
from tests.unit.records import record


@pytest.fixture
def flushes(monkeypatch):
    """Record each flush's files (with its commit records); a flush waits
    until the test lets it go (the flusher's gate)."""
    calls = []
    gates = []
    real = sync.Syncer._submit

    class Gate:
        def set(self):
            flusher.open_gate(1)

    def recorded(self, files, dirs, jobs, waiters, rnd, taken=()):
        calls.append((sorted(list(files) + [commit.commit_path(job[0]) for job in jobs]), list(dirs), jobs))
        gates.append(Gate())
        real(self, files, dirs, jobs, waiters, rnd, taken)

    flusher.gate(0)
    monkeypatch.setattr(sync.Syncer, "_submit", recorded)
    yield calls, gates
    flusher.gate(-1)


async def until(cond, timeout=5):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.005)


async def test_waiters_run_after_the_flush_that_covers_them(tmp_path, flushes, monkeypatch):
    # one flush at a time (a cluster's leader; the overlap is the next test)
    monkeypatch.setattr(sync, "MAX_IN_FLIGHT", 1)
    calls, gates = flushes
    syncer = sync.Syncer(str(tmp_path))
    a = MessageStore(str(tmp_path / "a"), 4096, None, syncer)
    b = MessageStore(str(tmp_path / "b"), 4096, None, syncer)
    done = []

    a.py_append(record(b"one"))
    assert not syncer.idle
    syncer.after_flush(lambda: done.append(1))
    await until(lambda: len(calls) == 1)
    # the first flush covers store a's segment, its commit record and its
    # new directory entry
    assert calls[0][0] == [str(tmp_path / "a" / "commit"), str(tmp_path / "a" / "msgs.0000000001")]
    assert str(tmp_path / "a") in calls[0][1]

    # written while the first flush runs: three waiters, two stores
    for i in range(50):
        a.py_append(record(b"x" * 200))
        b.py_append(record(b"y%d" % i))
    for n in (2, 3, 4):
        syncer.after_flush(lambda n=n: done.append(n))
    await asyncio.sleep(0.05)
    assert done == []             # nothing confirmed before the disk said so
    gates[0].set()
    await until(lambda: done == [1] and len(calls) == 2)
    # one flush for all of them, with every segment written meanwhile (a rolled over)
    files = calls[1][0]
    assert str(tmp_path / "b" / "msgs.0000000001") in files
    assert str(tmp_path / "a" / "commit") in files and str(tmp_path / "b" / "commit") in files
    assert sum(1 for f in files if f.startswith(str(tmp_path / "a" / "msgs."))) >= 2
    assert done == [1]
    gates[1].set()
    await until(lambda: done == [1, 2, 3, 4])
    assert syncer.idle and syncer.flushes == 2
    # idle: a waiter with nothing to flush runs at once
    syncer.after_flush(lambda: done.append(5))
    assert done[-1] == 5 and len(calls) == 2
    a.close()
    b.close()


async def test_flushes_overlap_and_each_vouches_from_the_newest_completed(tmp_path, flushes, monkeypatch):
    """A publisher's confirms wait for the disk's latency: the next flush
    starts while one is on its way (up to MAX_IN_FLIGHT), each one's commit
    starts where the newest completed commit ended, and waiters still run
    in order, after the flush that covers them."""
    monkeypatch.setattr(sync, "OVERLAP_MIN_BYTES", 1)     # these records are small
    calls, gates = flushes
    syncer = sync.Syncer(str(tmp_path))
    s = MessageStore(str(tmp_path / "q"), 1 << 20, None, syncer)
    done = []
    ends = []
    for n in range(1, sync.MAX_IN_FLIGHT + 2):
        _, pos, size = s.py_append(record(b"m%d" % n))
        ends.append(pos + size)
        syncer.after_flush(lambda n=n: done.append(n))
    # MAX_IN_FLIGHT flushes started, none done: the last waiter waits for a slot
    await until(lambda: len(calls) == sync.MAX_IN_FLIGHT)
    await asyncio.sleep(0.05)
    assert len(calls) == sync.MAX_IN_FLIGHT and done == []
    jobs = [c[2][0] for c in calls]
    first_start = jobs[0][3]
    # all start where the last completed commit (the queue's creation) ended,
    # so a power cut tearing a later one never keeps an earlier one's bytes
    assert [(j[2], j[3]) for j in jobs] == [(1, first_start)] * len(jobs)
    assert [j[4][-1][1] for j in jobs] == ends[:sync.MAX_IN_FLIGHT]
    assert len({j[1] % commit.SLOTS for j in jobs}) == len(jobs)    # a slot each
    gates[0].set()
    await until(lambda: done == [1] and len(calls) == sync.MAX_IN_FLIGHT + 1)
    # the next one starts where the first, now complete, ended
    nxt = calls[-1][2][0]
    assert (nxt[2], nxt[3]) == (1, ends[0])
    for g in gates[1:]:
        g.set()
    await until(lambda: done == list(range(1, sync.MAX_IN_FLIGHT + 2)) and syncer.idle)
    # recovery reads the newest slot of the four
    slot = commit.read_slots(str(tmp_path / "q"))[1][0]
    assert slot.seq == nxt[1] and slot.entries[-1][0] == ends[-1]
    s.close()


async def test_a_small_flush_waits_for_the_one_on_its_way(tmp_path, flushes):
    """A few records (a slow publisher's read) do not get a flush of their
    own next to one on its way: one confirm frame per read costs such a
    client more than the wait. OVERLAP_MIN_BYTES of them do."""
    calls, gates = flushes
    syncer = sync.Syncer(str(tmp_path))
    s = MessageStore(str(tmp_path / "q"), 1 << 20, None, syncer)
    done = []
    s.py_append(record(b"first"))
    syncer.after_flush(lambda: done.append(1))
    await until(lambda: len(calls) == 1)
    s.py_append(record(b"small"))
    syncer.after_flush(lambda: done.append(2))
    await asyncio.sleep(0.05)
    assert len(calls) == 1                          # waits for the first
    big = record(b"x" * sync.OVERLAP_MIN_BYTES)
    s.py_append(big)
    syncer.after_flush(lambda: done.append(3))
    await until(lambda: len(calls) == 2)            # enough to go alongside
    for g in gates[:2]:
        g.set()
    await until(lambda: done == [1, 2, 3])
    s.close()


async def test_ack_files_wait_for_a_waiter_that_vouches_for_them(tmp_path, flushes, monkeypatch):
    """A confirm on a connection that did not ack does not wait for another
    connection's ack files; one that acked (or any other waiter) gets them
    in its flush; and acks nobody vouches for still go within LAZY_FLUSH."""
    monkeypatch.setattr(sync, "LAZY_FLUSH", 0.2)
    calls, gates = flushes
    syncer = sync.Syncer(str(tmp_path))
    s = MessageStore(str(tmp_path / "q"), 1 << 20, None, syncer)
    ack_file = str(tmp_path / "q" / "acks.0000000001")
    done = []
    for i in range(3):
        s.py_append(record(b"m%d" % i))
    syncer.after_flush(lambda: done.append("first"))
    await until(lambda: len(calls) == 1)
    gates[0].set()
    await until(lambda: done == ["first"])

    m = s.py_shift()
    s.py_delete(m[0])                       # a consumer's ack
    s.py_append(record(b"a publisher's"))
    syncer.after_flush(lambda: done.append("no acks"), acks=False)
    await until(lambda: len(calls) == 2)
    assert ack_file not in calls[1][0] and str(tmp_path / "q" / "msgs.0000000001") in calls[1][0]
    gates[1].set()
    await until(lambda: done[-1] == "no acks")
    assert os.path.getsize(ack_file) == 4   # written, not yet made durable
    assert syncer.idle and not syncer.idle_for(True) and syncer.idle_for(False)

    # a waiter that vouches for acks: its flush carries the ack file
    syncer.after_flush(lambda: done.append("acks"))
    await until(lambda: len(calls) == 3)
    assert calls[2][0] == [ack_file]
    gates[2].set()
    await until(lambda: done[-1] == "acks" and syncer.idle_for(True))

    # nobody vouches: the lazy flush takes them
    m = s.py_shift()
    s.py_delete(m[0])
    s.py_append(record(b"another publisher's"))
    syncer.after_flush(lambda: done.append("no acks 2"), acks=False)
    await until(lambda: len(calls) == 4)
    assert ack_file not in calls[3][0]
    gates[3].set()
    await until(lambda: len(calls) == 5)    # LAZY_FLUSH later
    assert calls[4][0] == [ack_file]
    gates[4].set()
    await until(lambda: syncer.idle_for(True))
    s.close()


def test_whether_to_overlap_looks_at_a_bounded_number_of_stores(tmp_path):
    """Each confirming channel's batch asks whether a flush may join the one
    on its way: thousands of dirty stores (acks only) cost OVERLAP_SCAN
    looks, not thousands."""
    looked = []

    class AcksOnly:
        def pending_sync_bytes(self):
            looked.append(1)
            return 0

    syncer = sync.Syncer(str(tmp_path))
    syncer.in_flight = 1
    syncer.dirty = [AcksOnly() for _ in range(10_000)]
    assert not syncer._may_start()
    assert len(looked) == sync.OVERLAP_SCAN


async def test_flush_makes_files_durable_without_error(tmp_path):
    # the real fdatasync/fsync path, including a file dropped meanwhile
    syncer = sync.Syncer(str(tmp_path))
    s = MessageStore(str(tmp_path / "q"), 4096, None, syncer)
    for i in range(200):
        s.py_append(record(b"m%d" % i))
    fut = asyncio.get_running_loop().create_future()
    syncer.after_flush(lambda: fut.set_result(True))
    assert await asyncio.wait_for(fut, 5)
    sync.flush_files([str(tmp_path / "q" / "gone")], [str(tmp_path / "q")], str(tmp_path))
    dirs = [str(tmp_path / f"d{i}") for i in range(sync.SYNCFS_ABOVE + 1)]
    for d in dirs:
        os.mkdir(d)
    sync.flush_files([], dirs, str(tmp_path))    # the syncfs(2) branch
    s.close()


async def test_transient_store_is_not_tracked(tmp_path):
    syncer = sync.Syncer(str(tmp_path))
    s = MessageStore(str(tmp_path / "t"), 4096)    # no syncer: a transient queue
    s.py_append(record(b"m"))
    assert syncer.idle
    s.close()


async def test_writes_nobody_waits_for_are_flushed_soon(tmp_path, monkeypatch):
    # acks, and publishes without confirms, still reach the disk (and the
    # commit record) within LAZY_FLUSH
    monkeypatch.setattr(sync, "LAZY_FLUSH", 0.05)
    syncer = sync.Syncer(str(tmp_path))
    s = MessageStore(str(tmp_path / "q"), 4096, None, syncer)
    s.py_append(record(b"no confirm"))
    await until(lambda: syncer.flushes == 1 and syncer.idle)
    m = s.py_shift()
    s.py_delete(m[0])
    await until(lambda: syncer.flushes == 2 and syncer.idle)
    assert os.path.getsize(tmp_path / "q" / "acks.0000000001") == 4
    s.close()


async def test_close_flushes_what_is_left(tmp_path):
    from lavinmq import commit
    syncer = sync.Syncer(str(tmp_path))
    s = MessageStore(str(tmp_path / "q"), 4096, None, syncer)
    s.py_append(record(b"at shutdown"))
    await syncer.close()
    assert syncer.idle and syncer.flushes == 1
    slot = commit.read_slots(str(tmp_path / "q"))[1][0]
    assert slot.seq == 1 and slot.first == 1 and slot.entries[0][0] == 4 + len(record(b"at shutdown"))
    s.close()

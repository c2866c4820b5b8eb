"""The flusher (lavinmq/_core/flusher.pyx): the group commit's disk work in
threads without the GIL. Its checksum is zlib's, the commit slot it writes
is byte for byte the one lavinmq/commit.py writes, and rounds come back in
the order they were submitted, with the errno of what failed."""
import os
import select
import shutil
import subprocess
import time
import zlib

import pytest

from lavinmq import commit, sync
from lavinmq._core import flusher
from lavinmq._core.segment import MessageStore
from tests.unit.records import record


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 63, 4096, 100_003])
def test_crc32_is_zlibs(n):
    data = os.urandom(n + 3)
    for start in (0, 1, 3):        # unaligned starts take the byte-wise head
        view = memoryview(data)[start:start + n]
        assert flusher.crc32(view) == zlib.crc32(view)
        assert flusher.crc32(view, 0xDEADBEEF) == zlib.crc32(view, 0xDEADBEEF)


def test_slot_is_the_one_commit_py_writes(tmp_path):
    store = MessageStore(str(tmp_path / "q"), 4096, None, sync.Syncer(str(tmp_path)))
    for i in range(300):                        # several segments of 4 KiB
        store.py_append(record(b"m%d" % i))
    files, directory, job = store.take_sync()
    assert job is not None and len(job[4]) > 2
    commit.commit(job, sync=False)
    with open(commit.commit_path(job[0]), "rb") as f:
        by_python = f.read()
    with open(commit.commit_path(job[0]), "r+b") as f:     # the slot wiped, the rest kept
        f.seek(commit.slot_offset(job[1]))
        f.write(bytes(len(by_python) - commit.slot_offset(job[1])))
    flusher.flush_now(files, [directory], [job], str(tmp_path), commit.BOOT_ID)
    with open(commit.commit_path(job[0]), "rb") as f:
        by_flusher = f.read()
    assert by_flusher == by_python
    exists, slots = commit.read_slots(job[0])
    slot = slots[0]
    assert exists and slot.seq == job[1] and all(end for end, _ in slot.entries)
    store.close()


def test_a_gone_segment_gets_an_empty_entry(tmp_path):
    store = MessageStore(str(tmp_path / "q"), 4096, None, sync.Syncer(str(tmp_path)))
    store.py_append(record(b"only"))
    files, directory, job = store.take_sync()
    ends = [(seg_id, end) for seg_id, end in job[4]] + [(job[4][-1][0] + 1, 999)]     # never written
    flusher.flush_now(files, [], [(job[0], job[1], job[2], job[3], ends)], str(tmp_path), commit.BOOT_ID)
    slot = commit.read_slots(job[0])[1][0]
    assert slot.entries[-1] == (0, 0) and slot.entries[0][0] > 0
    store.close()


def wait_done(fl, n, timeout=10):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, out
        select.select([fl.fileno()], [], [], 0.1)
        out.extend(fl.take_done())
    return out


def test_rounds_come_back_in_order_with_their_errors(tmp_path):
    fl = flusher.Flusher()
    paths = []
    for i in range(20):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x" * i)
        paths.append(str(p))
    blocker = tmp_path / "plain-file"
    blocker.write_bytes(b"")
    ids = [fl.submit(paths[:i + 1], [str(tmp_path)], [], str(tmp_path), commit.BOOT_ID) for i in range(10)]
    bad = fl.submit([str(blocker / "under-a-file")], [], [], str(tmp_path), commit.BOOT_ID)
    gone = fl.submit([str(tmp_path / "never-existed")], [], [], str(tmp_path), commit.BOOT_ID)
    many = fl.submit(paths, [], [], str(tmp_path), commit.BOOT_ID)      # past syncfs_above? no: 20 files
    done = wait_done(fl, 13)
    assert [rid for rid, _ in done] == ids + [bad, gone, many]
    errs = dict(done)
    assert all(errs[i] == 0 for i in ids)
    assert errs[bad] == 20              # ENOTDIR: a real failure is reported, not swallowed
    assert errs[gone] == 0              # a file gone meanwhile has nothing to keep
    assert errs[many] == 0 and fl.inflight == 0


def test_many_files_take_one_syncfs(tmp_path):
    fl = flusher.Flusher(syncfs_above=4)
    paths = []
    for i in range(6):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"y")
        paths.append(str(p))
    rid = fl.submit(paths, [], [], str(tmp_path), commit.BOOT_ID)
    assert wait_done(fl, 1) == [(rid, 0)]
    with pytest.raises(OSError):
        flusher.flush_now(paths, [], [], str(tmp_path / "no-such-anchor"), commit.BOOT_ID, 4)


def test_a_flusher_dropped_with_rounds_running_frees_them(tmp_path):
    fl = flusher.Flusher()
    flusher.gate(0)
    try:
        fl.submit([str(tmp_path)], [], [], str(tmp_path), commit.BOOT_ID)
        assert fl.inflight == 1
        del fl                          # the round still queued: it frees itself when done
    finally:
        flusher.gate(-1)
    other = flusher.Flusher()           # the workers still serve everyone
    rid = other.submit([], [str(tmp_path)], [], str(tmp_path), commit.BOOT_ID)
    assert wait_done(other, 1) == [(rid, 0)]


def test_a_commit_goes_without_its_own_fdatasync_once_its_slot_was_synced(tmp_path):
    """Settled commits (the flusher's doc): the slot a new queue's first
    commits write is fdatasynced with them; once a flush that did so
    completed, later commits into that slot ride on the segments' cache
    flush. Every slot written either way is the one commit.py reads back."""
    store = MessageStore(str(tmp_path / "q"), 4096, None, sync.Syncer(str(tmp_path)))
    settled = []
    written, alone = flusher.settled_stats()
    for i in range(2 * commit.SLOTS + 2):
        store.py_append(record(b"m%d" % i))
        files, directory, job = store.take_sync()
        settled.append(job[5])
        flusher.flush_now(files, [directory] if directory else [], [job], str(tmp_path), commit.BOOT_ID,
                          settle=True)
        store.commit_done(job)
        exists, slots = commit.read_slots(job[0])
        assert exists and slots[0].seq == job[1] and all(end for end, _ in slots[0].entries)
    # seq 0 (the queue's creation) was never fdatasynced alone: slots 1-3
    # and 0 go the long way once (seqs 1-4), after that none does
    assert settled == [False] * commit.SLOTS + [True] * (commit.SLOTS + 2)
    # the settled ones were written and waited for, none fdatasynced alone
    assert flusher.settled_stats() == (written + commit.SLOTS + 2, alone)
    store.close()


def test_a_settled_commit_is_synced_itself_when_its_segments_are_gone(tmp_path):
    """Nothing else in the round flushes the disk's cache: the commit file
    gets its own fdatasync (flush_now, and the workers when every file
    they were to sync is gone)."""
    store = MessageStore(str(tmp_path / "q"), 4096, None, sync.Syncer(str(tmp_path)))
    for seq in range(1, commit.SLOTS + 1):          # slots fdatasynced once
        store.py_append(record(b"x"))
        files, directory, job = store.take_sync()
        flusher.flush_now(files, [directory] if directory else [], [job], str(tmp_path), commit.BOOT_ID)
        store.commit_done(job)
    store.py_append(record(b"y"))
    files, _, job = store.take_sync()
    assert job[5]
    written, alone = flusher.settled_stats()
    flusher.flush_now([], [], [job], str(tmp_path), commit.BOOT_ID, settle=True)
    assert commit.read_slots(job[0])[1][0].seq == job[1]
    assert flusher.settled_stats() == (written, alone + 1)
    store.py_append(record(b"z"))
    files, _, job = store.take_sync()
    fl = flusher.Flusher(settle=True)
    rid = fl.submit([str(tmp_path / "gone")], [], [job], str(tmp_path), commit.BOOT_ID)
    assert wait_done(fl, 1) == [(rid, 0)]
    assert commit.read_slots(job[0])[1][0].seq == job[1]
    # written and waited for, then (the segment gone) fdatasynced itself
    assert flusher.settled_stats() == (written + 1, alone + 2)
    store.close()


def test_only_ext4_is_trusted_to_flush_for_other_files(tmp_path):
    assert flusher.fdatasync_flushes_all("/proc") is False
    assert flusher.fdatasync_flushes_all(str(tmp_path / "no-such-dir")) is False
    if os.path.isdir("/dev/shm"):
        assert flusher.fdatasync_flushes_all("/dev/shm") is False       # tmpfs
    # and ext4 is: the kernel's word for the test directory's filesystem
    # (an always-False check would turn settled commits off unnoticed)
    # (ext2 and ext3 share the magic and are mounted by the ext4 driver)
    assert flusher.fdatasync_flushes_all(str(tmp_path)) is (fs_type(tmp_path) in ("ext2", "ext3", "ext4", "ext2/ext3"))


def fs_type(path):
    """The type of the filesystem path is on, from /proc/self/mountinfo.
    In a chroot (the arm64 tests run in one) the kernel leaves out the
    mounts above the root, so when no mount point holds the path, coreutils'
    stat(1) names the type from the superblock's magic ("ext2/ext3" for the
    whole ext family: one magic)."""
    path, best, kind = os.path.realpath(path), "", None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mount_point = fields[4]
            fstype = fields[fields.index("-") + 1]
            inside = path == mount_point or path.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) >= len(best):
                best, kind = mount_point, fstype
    if kind is None:
        kind = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True,
                              check=True).stdout.strip()
    return kind


def test_a_round_of_a_deleted_queue_leaves_its_successor_alone(tmp_path):
    """A queue deleted and declared again gets a directory of the same
    name. A flush of the old store still queued must not write its slot
    into the new queue's commit file: that slot, newer than the new
    queue's own, would judge the new queue's segments after a power cut."""
    directory = str(tmp_path / "q")
    old = MessageStore(directory, 4096, None, sync.Syncer(str(tmp_path)))
    for i in range(3 * commit.SLOTS):
        old.py_append(record(b"old %d" % i))
        files, _, job = old.take_sync()
        if i < 3 * commit.SLOTS - 1:
            flusher.flush_now(files, [], [job], str(tmp_path), commit.BOOT_ID)
            old.commit_done(job)
    fl = flusher.Flusher()
    flusher.gate(0)                         # the round is built, not started
    try:
        rid = fl.submit(files, [], [job], str(tmp_path), commit.BOOT_ID)
        old.close()
        shutil.rmtree(directory)            # deleted, and declared again
        new = MessageStore(directory, 4096, None, sync.Syncer(str(tmp_path)))
        new.py_append(record(b"new"))
    finally:
        flusher.gate(-1)
    assert wait_done(fl, 1) == [(rid, 0)]
    exists, slots = commit.read_slots(directory)
    assert exists and [slot.seq for slot in slots] == [0]      # the new store's creation only
    files, _, job = new.take_sync()
    flusher.flush_now(files, [], [job], str(tmp_path), commit.BOOT_ID)
    assert [slot.seq for slot in commit.read_slots(directory)[1]] == [1, 0]
    new.close()


def test_a_commit_whose_directory_cannot_be_opened_is_not_skipped(tmp_path):
    """Only a directory that is gone (ENOENT) means a deleted queue with
    nothing to write. Any other failure to open it (out of descriptors,
    here: not a directory) goes the old way, by path, and what fails there
    fails the round: a confirm must not go out without its commit."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_bytes(b"")
    # settled: no fdatasync of the commit file by path would catch it either
    job = (str(not_a_dir), 5, 1, commit.SEGMENT_HEADER, [(1, 100)], True)
    with pytest.raises(OSError) as err:
        flusher.flush_now([], [], [job], str(tmp_path), commit.BOOT_ID, settle=True)
    assert err.value.errno == 20        # ENOTDIR, from the commit file's open by path


def test_a_round_of_many_queues_holds_a_bounded_number_of_descriptors(tmp_path):
    """Directory descriptors (the deleted-queue test above) up to a budget
    across the rounds in flight; past it a commit goes by path. Every slot
    is written either way, and the descriptors go with the round."""
    dirs = []
    for i in range(300):
        d = tmp_path / f"q{i}"
        d.mkdir()
        dirs.append(str(d))
    jobs = [(d, 1, 1, commit.SEGMENT_HEADER, [(1, 0)]) for d in dirs]
    fl = flusher.Flusher()
    before = flusher.dir_fds()
    flusher.gate(0)
    try:
        rid = fl.submit([], [], jobs, str(tmp_path), commit.BOOT_ID)
        assert flusher.dir_fds() == 256
    finally:
        flusher.gate(-1)
    assert wait_done(fl, 1) == [(rid, 0)]
    assert flusher.dir_fds() == before == 0
    assert all(commit.read_slots(d)[1][0].seq == 1 for d in dirs)

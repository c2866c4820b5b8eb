"""Commit records: what a queue's group commits made durable, so that
recovery after a power cut keeps exactly that and never reads garbage.

Why. A segment is written through a shared mmap and made durable by the
group commit's fdatasync (lavinmq/sync.py). After a process crash the page
cache still holds every byte written, so all complete records are good.
After a power cut it does not: pages written after the last fdatasync may
or may not have reached the disk, in any order, so the tail of a segment
can hold a record whose header made it and whose body did not (it reads
back as a valid record with a zeroed body) or stale bytes past a hole.
LavinMQ's record format has no checksum and we keep the format, so the
evidence has to live next to it.

What. Each durable queue directory has a file `commit` with SLOTS slots
(at k * SLOT_SPACING). Every group commit that flushes new records of the
queue writes the next slot (seq % SLOTS) before its fdatasync:

    magic "LMQC" | version u16 | count u16 | seq u64 | boot id (16 bytes) |
    first segment u32 | start position u32 |
    count x (end u32, crc32 u32) | crc32 of the slot

Entry k covers segment `first + k` up to `end`, from the start position in
the first segment (where the previous commit ended) or from byte 0 in the
others, with the crc32 of those bytes; end 0 means the segment was gone
(all acked) when the commit ran.
The slot is fdatasync'ed in the same flush as the segments, so when the
confirm goes out both are on disk; when the power goes mid-flush, either
the new slot or the bytes it describes may be missing, and the crc tells.
Up to SLOTS - 1 flushes are on their way at once (lavinmq/sync.py), each
vouching for everything since the newest commit known complete, so a torn
slot write (or several) always leaves a completed commit readable: the one
the torn ones started from. Files written when there were two slots read
the same (the slots past them are empty).

Recovery. The slot also records the boot id (/proc/sys/kernel/random/boot_id)
of the run that wrote it. Same boot id: the machine did not go down, the
page cache is intact, and every complete record is kept, as after any
crash. Another boot id: the newest valid slot whose bytes all match its
crcs decides (recovery_plan: an overlapped, earlier flush may have completed
when a later one did not). Segments before its first segment were covered
by earlier, completed commits and are kept whole; each segment of its range
is kept up to `end`; segments after the range were never committed and are
removed. When no slot verifies, the newest one's segments are cut back to
where it started (the commit it started from was complete there). A `commit` file with no valid slot belongs to a queue whose
first commit never completed: nothing in it was confirmed.

Cost. One small pwrite per queue per flush, and an fdatasync of its own
only until each slot was synced once (on ext4; elsewhere every flush): after
that the segments' fdatasync flushes the disk's cache for the slot too
(lavinmq/_core/flusher.pyx, settled commits); plus a crc32 over the bytes the flush covers,
read back from the page cache in the syncer's worker thread. Nothing per
message, nothing on the event loop."""
import os
import struct
import zlib

MAGIC = b"LMQC"
VERSION = 1
SLOT_SPACING = 64 * 1024
SLOTS = 4           # flushes in flight at once (sync.MAX_IN_FLIGHT) + 1
HEADER = struct.Struct("<4sHHQ16sII")
ENTRY = struct.Struct("<II")
MAX_ENTRIES = (SLOT_SPACING - HEADER.size - 4) // ENTRY.size
SEGMENT_HEADER = 4
FILE_NAME = "commit"
UNKNOWN_BOOT = bytes(16)


def read_boot_id():
    """This boot's id (16 bytes), or UNKNOWN_BOOT, which matches nothing."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return bytes.fromhex(f.read().strip().replace("-", ""))[:16].ljust(16, b"\0")
    except (OSError, ValueError):
        return UNKNOWN_BOOT


BOOT_ID = read_boot_id()


class Slot:
    __slots__ = ("seq", "boot", "first", "start", "entries")

    def __init__(self, seq, boot, first, start, entries):
        self.seq = seq
        self.boot = boot
        self.first = first           # segment id
        self.start = start           # position in the first segment where this commit began
        self.entries = entries       # [(end, crc)] for segments first, first + 1, ...

    def encode(self):
        out = bytearray(HEADER.pack(MAGIC, VERSION, len(self.entries), self.seq, self.boot,
                                    self.first, self.start))
        for end, crc in self.entries:
            out += ENTRY.pack(end, crc)
        out += struct.pack("<I", zlib.crc32(out))
        return bytes(out)

    @classmethod
    def decode(cls, data):
        if len(data) < HEADER.size + 4:
            return None
        magic, version, count, seq, boot, first, start = HEADER.unpack_from(data)
        end = HEADER.size + count * ENTRY.size
        if magic != MAGIC or version != VERSION or count > MAX_ENTRIES or end + 4 > len(data):
            return None
        if struct.unpack_from("<I", data, end)[0] != zlib.crc32(data[:end]):
            return None
        entries = [ENTRY.unpack_from(data, HEADER.size + k * ENTRY.size) for k in range(count)]
        return cls(seq, boot, first, start, entries)

    @property
    def intact(self):
        """Written during this boot: the page cache holds what it covers."""
        return self.boot == BOOT_ID and self.boot != UNKNOWN_BOOT


def commit_path(directory):
    return os.path.join(directory, FILE_NAME)


def segment_path(directory, seg_id):
    return os.path.join(directory, "msgs.%010d" % seg_id)


def read_slots(directory):
    """-> (exists, the valid slots, newest first)."""
    try:
        with open(commit_path(directory), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False, []
    slots = [slot for off in range(0, SLOTS * SLOT_SPACING, SLOT_SPACING)
             if (slot := Slot.decode(data[off:off + SLOT_SPACING])) is not None]
    return True, sorted(slots, key=lambda slot: slot.seq, reverse=True)


def slot_offset(seq):
    return (seq % SLOTS) * SLOT_SPACING


def write_slot(directory, slot, sync=True):
    fd = os.open(commit_path(directory), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, slot.encode(), slot_offset(slot.seq))
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def range_crc(path, start, end):
    """crc32 of bytes [start, end) of a file, None if it is gone or short."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        crc, pos = 0, start
        while pos < end:
            chunk = os.pread(fd, min(end - pos, 1 << 20), pos)
            if not chunk:
                return None
            crc = zlib.crc32(chunk, crc)
            pos += len(chunk)
        return crc
    finally:
        os.close(fd)


def crc_from(cut_back):
    """Where an entry's checksum starts: at its commit's start position in a
    segment already partly committed, else at byte 0 (the header too)."""
    return 0 if cut_back == SEGMENT_HEADER else cut_back


def commit(job, sync=True):
    """Runs in the syncer's worker thread, in the flush that fdatasyncs the
    segments: checksum the ranges this commit covers (read back from the page
    cache) and write the store's next slot (fdatasync'ed here, or by the
    caller with sync=False). -> False if the queue is gone.
    job = (directory, seq, first segment, start, [(segment id, end)][, settled])."""
    directory, seq, first, start, ends = job[:5]
    if len(ends) > MAX_ENTRIES:
        raise OSError(f"{directory}: {len(ends)} segments in one commit, at most {MAX_ENTRIES}")
    entries = []
    for seg_id, end in ends:
        cut_back = start if seg_id == first else SEGMENT_HEADER
        crc = range_crc(segment_path(directory, seg_id), crc_from(cut_back), end) if end else None
        entries.append((0, 0) if crc is None else (end, crc))
    try:
        write_slot(directory, Slot(seq, BOOT_ID, first, start, entries), sync)
    except FileNotFoundError:
        return False    # the queue was deleted meanwhile
    return True


def recovery_plan(directory, seg_ids, slots):
    """What to keep after a possible power cut, from the commit file's valid
    slots, newest first. -> (keep, remove): keep maps segment id -> verified
    end, or None for a segment earlier commits covered whole; remove lists
    the segments with nothing committed in them (or that were already gone
    when the commit ran).

    The newest slot decides when every byte it covers made it to the disk.
    When some did not, its flush did not complete, but one it overlapped may
    have: flushes on their way at once (lavinmq/sync.py) each vouch from the
    newest commit complete when they were taken, so a later one's range
    holds an earlier one's, and that earlier one may have completed (and
    its confirms gone out) before the power went. So the newest slot whose
    bytes all verify decides. The newest completed commit is always among
    them: a slot is written over only once a later flush has completed.
    None verifies: cut back to where the newest slot began."""
    if not slots:
        return {}, list(seg_ids)
    newest = None
    for slot in slots:
        keep, remove, complete = _plan(directory, seg_ids, slot)
        if complete:
            return keep, remove
        newest = newest or (keep, remove)
    return newest


def _plan(directory, seg_ids, slot):
    """recovery_plan as one slot sees it. -> (keep, remove, whether every
    segment of its range that is on disk matched its crc)."""
    keep, remove, complete = {}, [], True
    last = slot.first + len(slot.entries) - 1
    for seg_id in seg_ids:
        cut_back = slot.start if seg_id == slot.first else SEGMENT_HEADER
        if seg_id < slot.first:
            keep[seg_id] = None
        elif seg_id <= last:
            end, crc = slot.entries[seg_id - slot.first]
            if end == 0:
                remove.append(seg_id)       # it was gone: a resurrected file
            elif range_crc(segment_path(directory, seg_id), crc_from(cut_back), end) == crc:
                keep[seg_id] = end
            else:
                keep[seg_id] = cut_back     # the commit did not complete here
                complete = False
        elif seg_id == slot.first:
            keep[seg_id] = cut_back         # a commit with no entries yet
        else:
            remove.append(seg_id)
    for seg_id, end in list(keep.items()):
        if end == SEGMENT_HEADER:
            del keep[seg_id]                # nothing committed in it
            remove.append(seg_id)
    return keep, sorted(remove), complete

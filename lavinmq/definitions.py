"""definitions.amqp: a vhost's durable exchanges, queues and bindings, kept
as the AMQP method frames they were declared with (LavinMQ's format): a u32
version, then frames. Replayed on boot; rewritten from the live state when
deletions pile up."""
import logging
import os
import struct

from lavinmq._core.codec import decode_method, encode_method_frame
from lavinmq.clustering import changes

log = logging.getLogger("lavinmq.definitions")

VERSION = 1
COMPACT_AFTER = 8192   # delete/unbind frames before the file is rewritten: [main] max_deleted_definitions

EXCHANGE_DECLARE = (40, 10)
EXCHANGE_DELETE = (40, 20)
EXCHANGE_BIND = (40, 30)
EXCHANGE_UNBIND = (40, 40)
QUEUE_DECLARE = (50, 10)
QUEUE_BIND = (50, 20)
QUEUE_DELETE = (50, 40)
QUEUE_UNBIND = (50, 50)
KNOWN = {EXCHANGE_DECLARE, EXCHANGE_DELETE, EXCHANGE_BIND, EXCHANGE_UNBIND,
         QUEUE_DECLARE, QUEUE_BIND, QUEUE_DELETE, QUEUE_UNBIND}


def _frozen(value):
    """A hashable, order-independent form of a field table (binding arguments)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def live_frames(frames):
    """The ordinals (in `frames`) of the declarations and bindings that the
    whole log leaves standing. Replay takes only these, in file order, and
    never replays a removal: a queue declared, deleted and declared again
    is opened once, over the directory that belongs to its last
    declaration. Replaying the delete would remove that directory, and with
    it the confirmed messages of the live queue.

    A removal takes what it took at runtime without frames of its own:
    a deleted queue its bindings, a deleted exchange the bindings from it
    and those to it. Cascades that did write frames (auto-delete exchanges)
    come as their own deletes. Only names and binding keys are held, never
    the decoded arguments of every declaration at once."""
    exchanges, queues, bindings = {}, {}, {}
    attached = {}           # ("x"|"q", name) -> binding keys that go with it
    for i, (key, args) in enumerate(frames):
        if key == EXCHANGE_DECLARE:
            exchanges.setdefault(args[1], i)
        elif key == QUEUE_DECLARE:
            queues.setdefault(args[1], i)
        elif key in (EXCHANGE_DELETE, QUEUE_DELETE):
            kind = "x" if key == EXCHANGE_DELETE else "q"
            (exchanges if kind == "x" else queues).pop(args[1], None)
            for k in attached.pop((kind, args[1]), ()):
                bindings.pop(k, None)
        elif key in (QUEUE_BIND, EXCHANGE_BIND, QUEUE_UNBIND, EXCHANGE_UNBIND):
            kind = "q" if key in (QUEUE_BIND, QUEUE_UNBIND) else "x"
            dest, source, rk = args[1], args[2], args[3]
            k = (kind, dest, source, rk, _frozen(args[-1] or {}))
            if key in (QUEUE_BIND, EXCHANGE_BIND):
                if k not in bindings:
                    bindings[k] = i
                    attached.setdefault((kind, dest), set()).add(k)
                    attached.setdefault(("x", source), set()).add(k)
            else:
                bindings.pop(k, None)
    live = set(exchanges.values())
    live.update(queues.values())
    live.update(bindings.values())
    return live


class DefinitionsFile:
    def __init__(self, path, syncer=None):
        self.path = path
        self.removals = 0
        self.compact_after = COMPACT_AFTER
        self.f = None
        self.syncer = syncer    # declarations reach the disk with the next confirmed messages

    def frames(self, repair=True):
        """Yield ((class_id, method_id), args). A damaged tail is cut at
        the last whole frame; a whole frame whose arguments do not decode is
        logged and skipped, so one bad definition never takes the ones after
        it along. One at a time: a boot with 100,000 queues must not hold
        every decoded declaration at once (their remains would be scattered
        between the queues for the life of the process). repair=False only
        reads (lavinmqctl definitions, on a live broker's files)."""
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as f:
            data = f.read()
        if len(data) < 4 or struct.unpack_from("<I", data)[0] != VERSION:
            log.error("%s: unknown version, ignoring the file", self.path)
            return
        pos = 4
        good = pos
        while pos + 7 <= len(data):
            ftype, ch, size = struct.unpack_from(">BHI", data, pos)
            end = pos + 7 + size
            if ftype != 1 or end + 1 > len(data) or data[end] != 0xCE or size < 4:
                break
            cid, mid = struct.unpack_from(">HH", data, pos + 7)
            if (cid, mid) in KNOWN:
                try:
                    frame = ((cid, mid), decode_method(cid, mid, data[pos + 11:end]))
                except Exception as exc:
                    log.error("%s: definition frame %d/%d at byte %d does not decode, skipped: %s",
                              self.path, cid, mid, pos, exc)
                else:
                    yield frame
            pos = end + 1
            good = pos
        if good != len(data) and repair:
            log.warning("%s: damaged tail of %d bytes cut", self.path, len(data) - good)
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def open(self):
        new = not os.path.exists(self.path) or os.path.getsize(self.path) < 4
        # unbuffered: a failed write must not stay in a buffer and land later
        self.f = open(self.path, "ab", buffering=0)
        if new:
            self.f.truncate(0)
            self._write_all(struct.pack("<I", VERSION))
            changes.changed(self.path)

    def _write_all(self, data):
        """Append data whole or not at all (a full disk leaves no half frame)."""
        start = os.fstat(self.f.fileno()).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[self.f.write(view):]
        except OSError:
            self.f.truncate(start)
            raise

    def append(self, key, args):
        """Raises (and writes nothing) if the frame cannot be written."""
        self._write_all(encode_method_frame(0, key[0], key[1], tuple(args)))
        if self.syncer is not None:
            self.syncer.add_file(self.path)
        if key in (EXCHANGE_DELETE, EXCHANGE_UNBIND, QUEUE_DELETE, QUEUE_UNBIND):
            self.removals += 1

    def needs_compaction(self):
        return self.removals >= self.compact_after

    def rewrite(self, frames):
        """Atomically replace the file with just these frames."""
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(struct.pack("<I", VERSION))
            for key, args in frames:
                f.write(encode_method_frame(0, key[0], key[1], tuple(args)))
            f.flush()
            os.fsync(f.fileno())
        if self.f:
            self.f.close()
        os.replace(tmp, self.path)
        fd = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)        # the rename itself, or frames appended from here could vanish with it
        finally:
            os.close(fd)
        self.removals = 0
        self.open()
        changes.changed(self.path)

    def close(self):
        if self.f:
            self.f.close()
            self.f = None

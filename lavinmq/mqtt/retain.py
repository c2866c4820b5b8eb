"""Retained messages of one vhost, in LavinMQ's layout: the directory
`mqtt_retained_store` in the vhost's directory holds `index` (the retained
topics, one per line) and one `<md5 of the topic>.msg` per topic with the
message body.

A retained publish costs a dict update here; the files are written in the
background (at most FLUSH_DELAY seconds later, and at shutdown), so that a
publisher with the retain flag on every message is not held up by a file
per message. A topic's body stays in memory only until it is written.
An empty body clears the topic (MQTT 3.3.1.3). Retained messages are
delivered on subscribe at the subscription's QoS, as LavinMQ does (the
files keep the body only), by lavinmq.mqtt.retain_delivery: read (or
mapped) in a reader thread, never on the event loop; and written there."""
import asyncio
import concurrent.futures
import hashlib
import logging
import mmap
import os

from lavinmq import sync

from lavinmq.mqtt import topics

log = logging.getLogger("lavinmq.mqtt.retain")

DIR_NAME = "mqtt_retained_store"
INDEX = "index"
SUFFIX = ".msg"
FLUSH_DELAY = 0.5
SLICE = 2000            # topics matched against a filter at a time
MAP_FROM = 1 << 20      # retained bodies from this size on are mapped, not read
READERS = 2             # threads reading and writing retained messages, for the whole broker
_CLEARED = object()
_readers = None


def readers():
    global _readers
    if _readers is None:
        _readers = concurrent.futures.ThreadPoolExecutor(READERS, thread_name_prefix="mqtt-retained")
    return _readers


def file_name(topic):
    return hashlib.md5(topic).hexdigest() + SUFFIX


def _read_body(path):
    """A retained body from its file: mapped when large (no copy, and an
    unmap costs nothing where freeing 100 MB took the loop 20-70 ms), read
    when small; None when the file is gone (cleared meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size >= MAP_FROM:
            # a memoryview: asyncio's transports take no mmap object itself
            return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ))
        return os.pread(fd, size, 0) if size else None
    finally:
        os.close(fd)


MAX_REMAINING = 268435455       # what an MQTT packet's four length bytes hold


def publish_head(topic, body_len, qos):
    """The bytes of a retained PUBLISH before its body -> (bytearray, the
    offset of its packet id, zero until one is taken, or -1 for QoS 0), or
    None when no packet can carry the body."""
    remaining = 2 + len(topic) + (2 if qos else 0) + body_len
    if remaining > MAX_REMAINING:
        return None
    head = bytearray(((3 << 4) | (qos << 1) | 1,))      # PUBLISH, retain
    while True:
        byte, remaining = remaining & 0x7f, remaining >> 7
        head.append(byte | (0x80 if remaining else 0))
        if not remaining:
            break
    head += len(topic).to_bytes(2, "big") + topic
    pid_at = len(head) if qos else -1
    if qos:
        head += b"\0\0"
    return head, pid_at


class RetainStore:
    def __init__(self, vhost_dir):
        self.dir = os.path.join(vhost_dir, DIR_NAME)
        os.makedirs(self.dir, exist_ok=True)
        self.topics = {}            # topic bytes -> body bytes not yet written, or None (on disk)
        self.dirty = set()          # topics whose file must be written or removed
        self.index_dirty = False
        self.unsynced = set()       # files written since the last fdatasync
        self._timer = None
        self._writing = None        # the reader thread's write (concurrent.futures.Future)
        self._load()

    def _load(self):
        path = os.path.join(self.dir, INDEX)
        try:
            with open(path, "rb") as f:
                lines = f.read().split(b"\n")
        except FileNotFoundError:
            lines = []
        files = {n for n in os.listdir(self.dir) if n.endswith(SUFFIX)}
        for topic in lines:
            if not topic:
                continue
            name = file_name(topic)
            if name not in files:
                log.warning("retained message file for topic %r is missing: dropped from the index", topic)
                self.index_dirty = True
                continue
            files.discard(name)
            self.topics[topic] = None
        for name in files:
            log.warning("retained message file %s is in no index entry: removed", name)
            os.unlink(os.path.join(self.dir, name))
        if self.index_dirty:
            self._write_index()

    def __len__(self):
        return len(self.topics)

    def retain(self, topic, body):
        if b"\n" in topic:
            # the index is a topic per line (LavinMQ's format)
            log.warning("a retained message for a topic with a newline is not kept: %r", topic[:100])
            return
        if not body:
            if self.topics.pop(topic, 0) != 0:
                self.dirty.add(topic)
                self.index_dirty = True
        else:
            if topic not in self.topics:
                self.index_dirty = True
            self.topics[topic] = body
            self.dirty.add(topic)
        self._arm()

    def packet(self, topic, qos):
        """In a reader thread (lavinmq.mqtt.retain_delivery): the PUBLISH of
        a retained message as (its head, the offset of its packet id in the
        head or -1, its body), None when it was cleared or no packet can
        carry it. The body is not copied: bytes still in memory, a file's
        read-only map when it is large (never written in place: a new file
        is renamed over it), its bytes when small."""
        body = self.topics.get(topic, _CLEARED)
        if body is _CLEARED:
            return None
        if body is None:
            body = _read_body(os.path.join(self.dir, file_name(topic)))
            if not body:
                return None
        head = publish_head(topic, len(body), qos)
        return None if head is None else (*head, body)

    def matching_topics(self, filter_levels):
        """The retained topics the filter matches, in slices of SLICE topics
        (a generator: a subscriber's `#` over 50,000 topics is matched a
        slice of the event loop at a time, lavinmq.mqtt.retain_delivery).
        What is retained or cleared meanwhile may be in it or not."""
        if b"+" not in filter_levels and b"#" not in filter_levels:
            topic = b"/".join(filter_levels)
            yield [topic] if topic in self.topics else []
            return
        names = list(self.topics)
        for i in range(0, len(names), SLICE):
            yield [t for t in names[i:i + SLICE] if topics.matches(filter_levels, t)]

    # -- writing ------------------------------------------------------------------

    def _arm(self):
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._timer = loop.call_later(FLUSH_DELAY, self._flush_timer)

    def _flush_timer(self):
        """Write what changed in a reader thread: a 100 MB retained message
        (or 50,000 small ones) written on the loop held every client up."""
        self._timer = None
        if self._writing is not None:
            self._arm()         # one write at a time: after this one
            return
        job = self._take_job()
        if job is None:
            return
        self._writing = readers().submit(self._write_job, *job)
        asyncio.wrap_future(self._writing).add_done_callback(lambda fut: self._written(job))

    def _written(self, job):
        fut, self._writing = self._writing, None
        try:
            fut.result()
        except OSError as exc:
            log.error("writing retained messages failed: %s; retrying", exc)
            self._give_back(job)
            self._arm()
            return
        self._settle(job)

    def flush(self):
        """Write what changed, in the calling thread (at start, at close)."""
        if self._writing is not None:       # close(): the thread's write first
            fut, self._writing = self._writing, None
            try:
                fut.result()
            except OSError:
                pass                        # what it had stays dirty
        job = self._take_job()
        if job is not None:
            try:
                self._write_job(*job)
            except OSError:
                self._give_back(job)
                raise
            self._settle(job)

    def _take_job(self):
        """On the loop: what must be written -> ([(topic, path, body or
        _CLEARED)], the index's topics or None), or None."""
        if not self.dirty and not self.index_dirty:
            return None
        files = []
        for topic in self.dirty:
            body = self.topics.get(topic, _CLEARED)
            if body is not None:
                files.append((topic, os.path.join(self.dir, file_name(topic)), body))
        self.dirty = set()
        index = list(self.topics) if self.index_dirty else None
        self.index_dirty = False
        return files, index

    def _write_job(self, files, index):
        """In a reader thread (or the caller's): the files, then the index."""
        for _, path, body in files:
            if body is _CLEARED:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            else:
                tmp = path + ".tmp"
                with open(tmp, "wb") as f:
                    f.write(body)
                os.replace(tmp, path)
        if index is not None:
            self._write_index(index)

    def _settle(self, job):
        """On the loop, once written: bodies written and not changed since
        are on disk now (their memory is let go)."""
        for topic, path, body in job[0]:
            if body is not _CLEARED:
                self.unsynced.add(path)
                if self.topics.get(topic) is body:
                    self.topics[topic] = None

    def _give_back(self, job):
        for topic, _, _ in job[0]:
            self.dirty.add(topic)
        if job[1] is not None:
            self.index_dirty = True

    def _write_index(self, names=None):
        path = os.path.join(self.dir, INDEX)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(topic + b"\n" for topic in (self.topics if names is None else names)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        if names is None:
            self.index_dirty = False

    def close(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        # the bodies' data reaches the disk before the broker says it stopped:
        # one syncfs for many files (50,000 fdatasyncs took minutes)
        paths = [p for p in self.unsynced if os.path.exists(p)]
        if paths:
            sync.flush_files(paths, [self.dir], self.dir)
        self.unsynced.clear()

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
files keep the body only)."""
import asyncio
import hashlib
import logging
import os

from lavinmq.mqtt import topics

log = logging.getLogger("lavinmq.mqtt.retain")

DIR_NAME = "mqtt_retained_store"
INDEX = "index"
SUFFIX = ".msg"
FLUSH_DELAY = 0.5


def file_name(topic):
    return hashlib.md5(topic).hexdigest() + SUFFIX


class RetainStore:
    def __init__(self, vhost_dir):
        self.dir = os.path.join(vhost_dir, DIR_NAME)
        os.makedirs(self.dir, exist_ok=True)
        self.topics = {}            # topic bytes -> body bytes not yet written, or None (on disk)
        self.dirty = set()          # topics whose file must be written or removed
        self.index_dirty = False
        self.unsynced = set()       # files written since the last fdatasync
        self._timer = None
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

    def body(self, topic):
        body = self.topics.get(topic)
        if body is not None:
            return body
        try:
            with open(os.path.join(self.dir, file_name(topic)), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def matching(self, filter_levels):
        """[(topic, body)] of the retained messages the filter matches."""
        out = []
        if b"+" not in filter_levels and b"#" not in filter_levels:
            topic = b"/".join(filter_levels)
            if topic in self.topics:
                body = self.body(topic)
                if body:
                    out.append((topic, body))
            return out
        for topic in list(self.topics):
            if topics.matches(filter_levels, topic):
                body = self.body(topic)
                if body:
                    out.append((topic, body))
        return out

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
        self._timer = None
        try:
            self.flush()
        except OSError as exc:
            log.error("writing retained messages failed: %s; retrying", exc)
            self._arm()

    def flush(self):
        for topic in list(self.dirty):
            path = os.path.join(self.dir, file_name(topic))
            body = self.topics.get(topic, 0)
            if body == 0:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            elif body is not None:
                tmp = path + ".tmp"
                with open(tmp, "wb") as f:
                    f.write(body)
                os.replace(tmp, path)
                self.topics[topic] = None
                self.unsynced.add(path)
            self.dirty.discard(topic)
        if self.index_dirty:
            self._write_index()

    def _write_index(self):
        path = os.path.join(self.dir, INDEX)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            for topic in self.topics:
                f.write(topic + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self.index_dirty = False

    def close(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        # the bodies' data reaches the disk before the broker says it stopped
        for path in self.unsynced:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        self.unsynced.clear()

"""The follower's side of replication, in two threads of its own (the event
loop only proxies clients): one reads the leader's frames and applies them
to the data directory, the other makes what was applied durable and then
acknowledges it. While the second fsyncs, the first goes on applying, so a
follower batches its fsyncs as the leader's group commit does.

A full sync (lavinmq/clustering/server.py) compares the leader's listing
with the files here: a file is kept when its first bytes, as many as the
leader has, have the same checksum (it is cut to the leader's size: a
segment this node preallocated when it led, or a tail the leader never
confirmed); other files are fetched; files the leader does not have are
deleted. While that runs the data directory is neither the old copy nor
the new one, so the marker file .clustering_syncing says so from the first
change until the sync is complete and on disk, and a node with the marker
does not campaign: an interrupted sync never leads.
"""
import logging
import os
import shutil
import socket
import struct
import threading
import time

from lavinmq import commit as commits
from lavinmq import sockopts
from lavinmq.clustering import files, protocol
from lavinmq.sync import flush_files, fsync_dir

log = logging.getLogger("lavinmq.clustering.follower")

RECONNECT = 1.0         # s between attempts to reach the leader, at most
RECONNECT_FIRST = 0.05  # ... but the first comes at once (was the leader's process gone, or the
                        # link? a new leader opens its port soon), then twice as late each time
NEW_LEADER_GRACE = 5.0  # s a new leader's replication port may refuse before that is a warning
RECV = 1024 * 1024
MAX_OPEN = 256          # files kept open for writing
SEGMENT_HEADER = 4


class Closed(Exception):
    pass


def marker_path(data_dir):
    return os.path.join(data_dir, files.SYNCING_MARKER)


def is_syncing(data_dir):
    """An interrupted sync left the data directory half old, half new."""
    return os.path.exists(marker_path(data_dir))


class ReplicationClient:
    def __init__(self, data_dir, node_id, secret, host, port, local_addr=None, on_synced=None, on_refused=None,
                 uri="", keepalive=None, cache=None, on_accepted=None):
        self.data_dir = os.path.abspath(data_dir)
        self.node_id = node_id
        self.secret = secret
        self.host, self.port = host, port
        self.uri = uri.encode()[:255]
        self.local_addr = local_addr
        self.keepalive = keepalive          # [main] tcp_keepalive: (idle, interval, count) or None
        self.on_synced = on_synced          # called (from this thread) once a full sync is done
        self.on_refused = on_refused        # ... when the leader's port, reached before, refuses
        self.on_accepted = on_accepted      # ... when the leader took this node (its first frame)
        self.stopped = threading.Event()
        self.sock = None
        self.thread = None
        self.send_lock = threading.Lock()
        self.connected = False
        self.synced = False
        self.received = 0                   # bytes of frames applied, this connection
        self.acked = 0
        self.syncs = 0
        self.files_fetched = 0
        self.last_error = None
        self.refused = False                # the last attempt found nothing listening
        self.sessions = 0
        self._fds = {}                      # rel -> fd open for writing
        self._touched = set()               # files written since the last ack
        self._dirs = set()                  # directories whose entries changed since then
        self._work = threading.Condition()
        self._pending = None                # (position, files, dirs) to make durable and ack
        self._acker = None
        self._listing = None                # a full sync's listing as it comes
        self._alive_at = 0.0
        self.cache = cache if cache is not None else files.ChecksumCache()     # the node's

    # -- life ------------------------------------------------------------------------------

    def start(self):
        self.thread = threading.Thread(target=self._run, name="lavinmq-follower", daemon=True)
        self.thread.start()

    def stop(self):
        """Close the connection and wait for the threads: what was applied
        stays applied (a record cut short is cut on load, as after a crash)."""
        self.stopped.set()
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._work:
            self._work.notify_all()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(10)

    def _run(self):
        delay = RECONNECT_FIRST
        began = time.monotonic()
        while not self.stopped.is_set():
            was = self.sessions
            try:
                self._session()
            except Closed:
                pass
            except (OSError, protocol.ProtocolError, ValueError) as exc:
                if not self.stopped.is_set():
                    self.last_error = str(exc)
                    # a leader just elected writes its key before its port opens:
                    # refused at first is expected, refused later (or after a
                    # session) is news
                    news = not (isinstance(exc, ConnectionRefusedError) and not self.sessions
                                and time.monotonic() - began < NEW_LEADER_GRACE)
                    log.log(logging.WARNING if news else logging.INFO, "replication from %s:%d: %s%s",
                            self.host, self.port, exc, "" if news else " (a new leader's port opens; retrying)")
            except Exception as exc:
                self.last_error = repr(exc)
                log.exception("replication from %s:%d failed", self.host, self.port)
            finally:
                self._end_session()
            delay = RECONNECT_FIRST if self.sessions > was else min(RECONNECT, delay * 2)
            self.stopped.wait(delay)

    def _end_session(self):
        self.connected = False
        self.synced = False
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
        with self._work:
            self._pending = None
            self._work.notify_all()
        if self._acker is not None:
            self._acker.join(10)
            self._acker = None
        self._close_fds()

    # -- one connection ------------------------------------------------------------------

    def _session(self):
        try:
            sock = socket.create_connection((self.host, self.port), timeout=5,
                                            source_address=(self.local_addr, 0) if self.local_addr else None)
        except ConnectionRefusedError:
            self.refused = True
            if self.sessions and self.on_refused is not None:
                # it answered before, and now nothing listens there: its process is gone
                self.on_refused()
            raise
        self.refused = False
        self.sock = sock
        if self.stopped.is_set():
            raise Closed()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sockopts.set_keepalive(sock, self.keepalive)
        sock.sendall(protocol.MAGIC + bytes((len(self.secret),)) + self.secret)
        status = self._recv_exact(sock, 1)
        if status != b"\x00":
            raise protocol.ProtocolError("the leader refused this node (wrong secret?)")
        sock.sendall(struct.pack("<i", self.node_id) + bytes((len(self.uri),)) + self.uri)
        sock.settimeout(None)
        self.connected = True
        self.sessions += 1
        self.received = self.acked = 0
        self._listing = []
        self._acker = threading.Thread(target=self._ack_loop, name="lavinmq-follower-ack", daemon=True)
        self._acker.start()
        buf = bytearray()
        accepted = self.on_accepted
        while True:
            data = sock.recv(RECV)
            if not data:
                raise Closed() if self.stopped.is_set() else ConnectionError("the leader closed the connection")
            if accepted is not None:
                # the leader sends only once it has taken this node as a follower
                accepted, _ = None, accepted()
            buf += data
            pos = 0
            n = len(buf)
            while n - pos >= protocol.HEADER.size:
                kind, length = protocol.HEADER.unpack_from(buf, pos)
                if length > protocol.MAX_FRAME + 64:
                    raise protocol.ProtocolError(f"frame of {length} bytes")
                end = pos + protocol.HEADER.size + length
                if end > n:
                    break
                self._apply(kind, memoryview(buf)[pos + protocol.HEADER.size:end])
                self.received += end - pos
                pos = end
            del buf[:pos]
            self._hand_over()

    def _recv_exact(self, sock, n):
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the leader closed the connection")
            out += chunk
        return out

    def _send(self, data):
        with self.send_lock:
            sock = self.sock
            if sock is None:
                raise Closed()
            sock.sendall(data)

    # -- acknowledging what is on disk ---------------------------------------------------------

    def _hand_over(self):
        """Everything received so far is applied: the acker makes it durable."""
        if self.received == self.acked and not self._touched and not self._dirs:
            return
        with self._work:
            if self._pending is None:
                self._pending = (self.received, set(), set())
            pos, fs, ds = self._pending
            fs |= self._touched
            ds |= self._dirs
            self._pending = (self.received, fs, ds)
            self._touched, self._dirs = set(), set()
            self._work.notify()

    def _ack_loop(self):
        while True:
            with self._work:
                while self._pending is None and self.connected and not self.stopped.is_set():
                    self._work.wait()
                if self._pending is None:
                    return
                pos, fs, ds = self._pending
                self._pending = None
            try:
                flush_files([os.path.join(self.data_dir, rel) for rel in fs],
                            sorted(os.path.join(self.data_dir, d) if d else self.data_dir for d in ds),
                            self.data_dir)
            except OSError as exc:
                # the disk may have dropped what it was given: acknowledging would be a lie
                log.critical("replication: fsync failed: %s; stopping", exc)
                os.kill(os.getpid(), 15)
                return
            try:
                self._send(protocol.frame(protocol.ACK, protocol.U64.pack(pos)))
            except (OSError, Closed):
                return
            self.acked = pos

    # -- applying frames ---------------------------------------------------------------------

    def _path(self, rel):
        return os.path.join(self.data_dir, files.safe_rel(rel))

    def _parent(self, rel):
        return rel.rsplit("/", 1)[0] if "/" in rel else ""

    def _fd(self, rel):
        fd = self._fds.pop(rel, None)
        if fd is None:
            path = self._path(rel)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                self._dirs.add(self._parent(self._parent(rel)))
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            self._dirs.add(self._parent(rel))
            if len(self._fds) >= MAX_OPEN:
                old = next(iter(self._fds))
                os.close(self._fds.pop(old))
        self._fds[rel] = fd         # most recently used last
        return fd

    def _forget_fds(self, rel):
        for k in [k for k in self._fds if k == rel or k.startswith(rel + "/")]:
            os.close(self._fds.pop(k))

    def _close_fds(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _apply(self, kind, body):
        if kind == protocol.WRITE:
            rel, offset, data = protocol.parse_write(body)
            self._write(rel, offset, data)
        elif kind == protocol.SYNC_FILE:
            rel, offset, last, data = protocol.parse_sync_file(body)
            self._sync_file(rel, offset, last, data)
        elif kind == protocol.DELETE:
            rel, _ = protocol.read_path(body, 0)
            self._delete(rel)
        elif kind == protocol.COMMIT:
            rel, seq, first, start, ends = protocol.parse_commit(body)
            directory = self._path(rel)
            if commits.commit((directory, seq, first, start, ends), sync=False):
                self._touched.add(f"{rel}/{commits.FILE_NAME}")
        elif kind == protocol.LIST:
            self._listing.extend(protocol.parse_list(body))
        elif kind == protocol.LIST_END:
            self._compare(body[0])
        elif kind == protocol.SYNC_END:
            self._sync_end(body[0])
        else:
            raise protocol.ProtocolError(f"unexpected frame type {kind}")

    def _write(self, rel, offset, data):
        name = rel.rsplit("/", 1)[-1]
        if name.startswith("msgs.") and offset == 0:
            self._commit_file_first(rel)
        fd = self._fd(rel)
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:], offset + done)
        self._touched.add(rel)

    def _commit_file_first(self, rel):
        """A queue's commit file comes before its first segment, as on the
        leader (segment.pyx): a segment is never without the record that
        judges it after a power cut."""
        directory = self._path(self._parent(rel))
        if not os.path.exists(commits.commit_path(directory)):
            os.makedirs(directory, exist_ok=True)
            seg_id = int(rel.rsplit(".", 1)[-1])
            commits.write_slot(directory, commits.Slot(0, commits.BOOT_ID, seg_id, SEGMENT_HEADER, []),
                               sync=False)
            self._touched.add(f"{self._parent(rel)}/{commits.FILE_NAME}")
            self._dirs.add(self._parent(rel))

    def _sync_file(self, rel, offset, last, data):
        """A whole file, written aside and renamed into place with its last chunk."""
        path = self._path(rel)
        tmp = path + ".tmp"
        self._forget_fds(rel)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if offset == 0 else 0)
        mode = 0o600 if rel in files.PRIVATE else 0o644
        try:
            fd = os.open(tmp, flags, mode)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self._dirs.add(self._parent(self._parent(rel)))
            fd = os.open(tmp, flags, mode)
        try:
            done = 0
            while done < len(data):
                done += os.pwrite(fd, data[done:], offset + done)
            if last and not self.syncing:
                # between syncs a file replaced must not turn up empty after a
                # power cut: its data is on disk before its name points at it
                os.fdatasync(fd)
        finally:
            os.close(fd)
        if last:
            os.replace(tmp, path)
            self._touched.add(rel)
            self._dirs.add(self._parent(rel))
            self.files_fetched += 1

    def _delete(self, rel):
        path = self._path(rel)
        self._forget_fds(rel)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass
        self._touched = {t for t in self._touched if t != rel and not t.startswith(rel + "/")}
        self._dirs = {d for d in self._dirs if d != rel and not d.startswith(rel + "/")}
        self._dirs.add(self._parent(rel))

    # -- a full sync --------------------------------------------------------------------------

    @property
    def syncing(self):
        return self._listing is not None and not self.synced

    def _compare(self, pass_no):
        """The leader's listing is complete: keep what matches, drop what the
        leader does not have, ask for the rest."""
        listing, self._listing = self._listing, []
        if not os.path.exists(marker_path(self.data_dir)):
            with open(marker_path(self.data_dir), "wb") as f:
                os.fsync(f.fileno())
            fsync_dir(self.data_dir)
        self._close_fds()
        wanted = {rel: (size, digest) for rel, size, digest in listing}
        for rel in wanted:
            files.safe_rel(rel)
        requests = []
        hashed = self.cache.hashed_files, self.cache.hashed_bytes
        local = {rel: (path, st) for rel, path, st in files.walk(self.data_dir)}
        self.cache.forget_missing(local)        # the node's cache holds only files that are there
        for rel, (path, st) in local.items():
            if rel not in wanted:
                os.unlink(path)
                self._dirs.add(self._parent(rel))
        for rel, (size, digest) in wanted.items():
            self._alive()
            have = local.get(rel)
            if have is not None and have[1].st_size >= size and \
                    self.cache.digest(rel, have[0], have[1], size) == digest:
                if have[1].st_size > size:
                    os.truncate(have[0], size)
                    self.cache.cut(rel, have[0], size)
                    self._touched.add(rel)
                continue
            requests.append(rel)
        files.remove_empty_dirs(self.data_dir)
        for f in protocol.request_frames(requests):
            self._send(f)
        self._send(protocol.frame(protocol.REQUEST_END, b""))
        log.info("sync pass %d from %s:%d: %d files listed, %d to fetch, %d hashed (%d bytes)", pass_no,
                 self.host, self.port, len(wanted), len(requests), self.cache.hashed_files - hashed[0],
                 self.cache.hashed_bytes - hashed[1])

    def _alive(self):
        """Hashing a large directory takes a while: tell the leader this node is still there."""
        now = time.monotonic()
        if now - self._alive_at > 1.0:
            self._alive_at = now
            self._send(protocol.frame(protocol.ACK, protocol.U64.pack(self.acked)))

    def _sync_end(self, pass_no):
        if pass_no != 2:
            return
        # everything of the sync on disk, then the marker goes: from here
        # on this copy is whole (the leader counts it in once it has acked)
        files.syncfs(self.data_dir)
        try:
            os.unlink(marker_path(self.data_dir))
        except FileNotFoundError:
            pass
        fsync_dir(self.data_dir)
        self.synced = True
        self._listing = None
        self.syncs += 1
        log.info("synced with the leader at %s:%d", self.host, self.port)
        if self.on_synced is not None:
            self.on_synced()

    # -- status -----------------------------------------------------------------------------

    def status(self):
        return {"leader": f"{self.host}:{self.port}", "connected": self.connected, "synced": self.synced,
                "received_bytes": self.received, "acked_bytes": self.acked, "syncs": self.syncs,
                "last_error": self.last_error, "since": time.time()}

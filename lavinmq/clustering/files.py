"""The data directory as replication sees it: which files are replicated,
their checksums, and the paths a follower accepts.

Not replicated: the node's own files (.lock, .clustering_id, the marker of
an unfinished sync), files being written aside (*.tmp), transient queues
(vhost/transient/), and anything that is not a regular file (the control
socket). Everything else a leader has, a follower gets; what a follower has
that the leader does not, a full sync deletes.

A write segment is longer on disk than its data (it is preallocated for
the mmap): its size here is the end of its last record, which the leader
asks its stores for, so a follower holds just the records, and a follower
that led before (its segment still preallocated) keeps its file when the
records match, cut to the leader's size."""
import ctypes
import ctypes.util
import hashlib
import logging
import os
import stat
import threading

from lavinmq.sync import fsync_dir, replace_file

log = logging.getLogger("lavinmq.clustering.files")

CHECKSUMS = ".clustering_checksums"
OWN_FILES = {".lock", ".clustering_id", ".clustering_syncing", "lavinmqctl.sock", CHECKSUMS}
PRIVATE = {"users.json"}        # password hashes: the owner only, as the leader writes it
SYNCING_MARKER = ".clustering_syncing"
HASH_CHUNK = 1024 * 1024


def keep_own(data_dir, paths):
    """The node's own files that live in the data directory (a log file, a
    pidfile, a control socket put there): never replicated, never deleted."""
    base = os.path.abspath(data_dir)
    for path in paths:
        if path and os.path.dirname(os.path.abspath(path)) == base:
            OWN_FILES.add(os.path.basename(path))


def replicated(rel):
    """Is this path (relative, '/'-separated) part of the replicated data?"""
    parts = rel.split("/")
    if parts[0] in OWN_FILES and len(parts) == 1:
        return False
    if rel.endswith(".tmp") or "transient" in parts[1:2]:
        return False
    return True


def safe_rel(rel):
    """A path from the leader, checked: relative, inside the data directory,
    no '..', no NUL, replicated. -> the path, or raise ValueError."""
    if not rel or "\0" in rel or rel.startswith("/") or "\\" in rel:
        raise ValueError(f"bad path {rel!r}")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"bad path {rel!r}")
    if not replicated(rel) and not rel.endswith(".tmp"):
        raise ValueError(f"{rel!r} is not replicated")
    return rel


def walk(data_dir):
    """Yield (rel, absolute path, os.stat_result) of every replicated regular file."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        base = os.path.join(data_dir, rel_dir) if rel_dir else data_dir
        try:
            entries = list(os.scandir(base))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if replicated(rel):
                    stack.append(rel)
            elif stat.S_ISREG(st.st_mode) and replicated(rel):
                yield rel, entry.path, st


def sha1_of(path, size):
    """sha1 of the first size bytes of the file, or None if it is shorter or gone."""
    h = hashlib.sha1()
    try:
        with open(path, "rb") as f:
            left = size
            while left:
                chunk = f.read(min(left, HASH_CHUNK))
                if not chunk:
                    return None
                h.update(chunk)
                left -= len(chunk)
    except FileNotFoundError:
        return None
    return h.digest()


class ChecksumCache:
    """sha1s of files that have not changed since they were hashed, by
    (inode, size, mtime). A commit file is rewritten in place at its size,
    so it is always hashed again (it is small).

    One per node, for as long as the process lives, whatever its role: a
    follower's hashes serve it as a leader after a failover and the other
    way round. A clean stop (and a fenced leader's restart) saves it in the
    data directory; the next start takes it in and deletes the file, so a
    start after a crash hashes everything again. Without it every node of
    a cluster hashed its whole data directory after each failover, as
    LavinMQ's nodes do not (they keep checksums.sha1)."""

    HEADER = b"lavinmq-checksums 1\n"

    def __init__(self):
        self.entries = {}
        self.lock = threading.Lock()     # a save against a sync's listing in another thread
        self.hashed_files = 0            # counters, for the syncs' log lines
        self.hashed_bytes = 0

    def digest(self, rel, path, st, size):
        key = (st.st_ino, size, st.st_mtime_ns, st.st_size)
        hit = self.entries.get(rel)
        if hit is not None and hit[0] == key and not rel.endswith("/commit"):
            return hit[1]
        digest = sha1_of(path, size)
        self.hashed_files += 1
        self.hashed_bytes += size
        if digest is not None:
            with self.lock:
                self.entries[rel] = (key, digest)
        return digest

    def cut(self, rel, path, size):
        """The file was just cut to size, which leaves its first size bytes
        as they were hashed: the digest stays valid under the new stat."""
        hit = self.entries.get(rel)
        if hit is None or hit[0][1] != size:
            return
        st = os.stat(path)
        with self.lock:
            self.entries[rel] = ((st.st_ino, size, st.st_mtime_ns, st.st_size), hit[1])

    def forget_missing(self, seen):
        with self.lock:
            for rel in [rel for rel in self.entries if rel not in seen]:
                del self.entries[rel]

    def save(self, data_dir):
        """Write the cache into the data directory, after the files it
        vouches for are on disk (syncfs): a power cut after the save must
        not leave a file whose key matches and whose bytes went back."""
        with self.lock:
            entries = list(self.entries.items())
        # a line per file; a name with a newline in it is left out (hashed again)
        lines = [b"%s %d %d %d %d %s\n" % (digest.hex().encode(), ino, size, mtime_ns, st_size, os.fsencode(rel))
                 for rel, ((ino, size, mtime_ns, st_size), digest) in entries if "\n" not in rel]
        try:
            syncfs(data_dir)
            replace_file(os.path.join(data_dir, CHECKSUMS), self.HEADER + b"".join(lines))
        except OSError as exc:
            log.warning("cannot save the checksums of the data directory: %s", exc)
            return
        log.info("saved %d checksums of the data directory", len(lines))

    @classmethod
    def restore(cls, data_dir):
        """-> the cache a clean stop saved, or an empty one. The file is
        deleted: it vouches only for the stop that wrote it."""
        cache = cls()
        path = os.path.join(data_dir, CHECKSUMS)
        try:
            with open(path, "rb") as f:
                data = f.read()
            os.unlink(path)
            fsync_dir(data_dir)
        except FileNotFoundError:
            return cache
        except OSError as exc:
            log.warning("cannot take in the saved checksums: %s", exc)
            return cache
        try:
            if not data.startswith(cls.HEADER):
                raise ValueError("not a checksums file")
            for line in data[len(cls.HEADER):].splitlines():
                digest, ino, size, mtime_ns, st_size, rel = line.split(b" ", 5)
                if len(digest) != 40:
                    raise ValueError("bad digest")
                cache.entries[os.fsdecode(rel)] = ((int(ino), int(size), int(mtime_ns), int(st_size)),
                                                   bytes.fromhex(digest.decode()))
        except ValueError as exc:
            log.warning("%s: %s; every file is hashed again", path, exc)
            cache.entries.clear()
            return cache
        log.info("took in %d checksums saved by the last stop", len(cache.entries))
        return cache


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def syncfs(path):
    """Everything written to path's filesystem, on disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _libc.syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs failed")
    finally:
        os.close(fd)


def listing(data_dir, logical_sizes, cache):
    """Runs in a worker thread: [(rel, size, sha1)] of every replicated file.
    logical_sizes: rel -> data size of the write segments."""
    out, seen = [], set()
    for rel, path, st in walk(data_dir):
        size = logical_sizes.get(rel, st.st_size)
        if size > st.st_size:
            size = st.st_size
        digest = cache.digest(rel, path, st, size)
        if digest is None:
            continue            # gone meanwhile
        seen.add(rel)
        out.append((rel, size, digest))
    cache.forget_missing(seen)
    return out


def remove_empty_dirs(data_dir):
    """Bottom-up, directories with nothing in them (what a sync deleted)."""
    for root, dirs, files in os.walk(data_dir, topdown=False):
        if root == data_dir:
            continue
        rel = os.path.relpath(root, data_dir).replace(os.sep, "/")
        if not replicated(rel):
            continue
        try:
            os.rmdir(root)
        except OSError:
            pass

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
import hashlib
import os
import stat

OWN_FILES = {".lock", ".clustering_id", ".clustering_syncing", "lavinmqctl.sock"}
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
    so it is always hashed again (it is small)."""

    def __init__(self):
        self.entries = {}

    def digest(self, rel, path, st, size):
        key = (st.st_ino, size, st.st_mtime_ns, st.st_size)
        hit = self.entries.get(rel)
        if hit is not None and hit[0] == key and not rel.endswith("/commit"):
            return hit[1]
        digest = sha1_of(path, size)
        if digest is not None:
            self.entries[rel] = (key, digest)
        return digest

    def forget_missing(self, seen):
        for rel in list(self.entries):
            if rel not in seen:
                del self.entries[rel]


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

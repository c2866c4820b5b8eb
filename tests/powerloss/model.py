"""The storage model of ForgetFS: what a disk keeps when the power goes.

Every file's content lives in two layers. The durable layer is a real file
in the backing directory (`inodes/<ino>`); the volatile layer is a set of
dirty 4 KiB pages, a volatile size and a truncation mark kept in this
process's memory. Writes only touch the volatile layer; fsync/fdatasync of
a file copies its volatile layer down. Names are handled the same way:
create, unlink, rename and mkdir go into a log of pending operations, and
only fsync of a directory makes the operations on that directory durable
(`namespace.json` in the backing directory holds the durable tree). That is
the strict POSIX contract: fsync of a file does not make its name durable,
its directory's fsync does.

A power cut is the process dying: whatever is only in memory is gone. On
command the model first keeps part of the volatile state, as real disks do:
the last unsynced write torn at a page boundary, or a random subset of the
dirty pages together with a random prefix of the pending name operations
(a journal commits in order).

No FUSE here: forgetfs.py maps FUSE requests onto this model, and the unit
tests drive it directly."""
import errno
import json
import os
import random

PAGE = 4096
ROOT = 1


class Node:
    """One inode of the volatile view."""
    __slots__ = ("ino", "is_dir", "mode", "entries", "size", "dsize", "cut", "dirty", "opens",
                 "linked", "fd")

    def __init__(self, ino, is_dir, mode, dsize=0):
        self.ino = ino
        self.is_dir = is_dir
        self.mode = mode
        self.entries = {} if is_dir else None      # name -> ino (volatile view)
        self.size = dsize            # volatile size
        self.dsize = dsize           # size of the durable layer
        self.cut = None              # lowest size truncated to since the last sync
        self.dirty = {}              # page number -> bytearray(PAGE)
        self.opens = 0
        self.linked = True           # has a name in the volatile view
        self.fd = -1                 # the durable layer, opened on demand

    def durable_limit(self):
        """Bytes of the durable layer that are still visible."""
        return self.dsize if self.cut is None else min(self.dsize, self.cut)


class Model:
    def __init__(self, backing, rng=None):
        self.backing = backing
        self.inode_dir = os.path.join(backing, "inodes")
        self.ns_path = os.path.join(backing, "namespace.json")
        self.rng = rng or random.Random()
        self.nodes = {}
        self.pending = []            # name operations not yet durable, oldest first
        self.last_write = None       # (node, offset, length) of the newest unsynced write
        self.stats = {"writes": 0, "fsyncs": 0, "fsyncdirs": 0, "cuts": 0}
        os.makedirs(self.inode_dir, exist_ok=True)
        self._load()

    # -- the durable layer --------------------------------------------------------

    def _load(self):
        try:
            with open(self.ns_path) as f:
                ns = json.load(f)
        except FileNotFoundError:
            ns = {"next_ino": ROOT + 1, "nodes": {str(ROOT): {"dir": True, "mode": 0o40755}},
                  "entries": {str(ROOT): {}}}
        self.next_ino = ns["next_ino"]
        self.d_nodes = {int(k): v for k, v in ns["nodes"].items()}
        self.d_entries = {int(k): {n: i for n, i in v.items()} for k, v in ns["entries"].items()}
        # what is not reachable from the root was unlinked for good (or never linked)
        reachable, stack = set(), [ROOT]
        while stack:
            ino = stack.pop()
            reachable.add(ino)
            stack.extend(self.d_entries.get(ino, {}).values())
        self.d_nodes = {i: v for i, v in self.d_nodes.items() if i in reachable}
        self.d_entries = {i: v for i, v in self.d_entries.items() if i in reachable}
        for name in os.listdir(self.inode_dir):
            if not name.isdigit() or int(name) not in self.d_nodes or self.d_nodes[int(name)]["dir"]:
                os.unlink(os.path.join(self.inode_dir, name))
        for ino, meta in self.d_nodes.items():
            dsize = 0 if meta["dir"] else self._durable_size(ino)
            node = Node(ino, meta["dir"], meta["mode"], dsize)
            if node.is_dir:
                node.entries = dict(self.d_entries.get(ino, {}))
            self.nodes[ino] = node
        self._save_namespace()

    def _durable_size(self, ino):
        try:
            return os.path.getsize(self._inode_path(ino))
        except FileNotFoundError:
            return 0

    def _inode_path(self, ino):
        return os.path.join(self.inode_dir, str(ino))

    def _fd(self, node):
        if node.fd < 0:
            node.fd = os.open(self._inode_path(node.ino), os.O_RDWR | os.O_CREAT, 0o600)
        return node.fd

    def _save_namespace(self):
        tmp = self.ns_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"next_ino": self.next_ino,
                       "nodes": {str(k): v for k, v in self.d_nodes.items()},
                       "entries": {str(k): v for k, v in self.d_entries.items()}}, f)
        os.replace(tmp, self.ns_path)

    # -- names ------------------------------------------------------------------

    def lookup(self, path):
        node = self.nodes[ROOT]
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir:
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            ino = node.entries.get(part)
            if ino is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            node = self.nodes[ino]
        return node

    def _parent(self, path):
        head, name = path.rstrip("/").rsplit("/", 1)
        parent = self.lookup(head or "/")
        if not parent.is_dir:
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        return parent, name

    def create(self, path, mode, is_dir=False):
        parent, name = self._parent(path)
        if name in parent.entries:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
        node = Node(self.next_ino, is_dir, mode)
        self.next_ino += 1
        self.nodes[node.ino] = node
        parent.entries[name] = node.ino
        self.pending.append(("link", parent.ino, name, node.ino, is_dir, mode))
        return node

    def unlink(self, path, is_dir=False):
        parent, name = self._parent(path)
        ino = parent.entries.get(name)
        if ino is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        node = self.nodes[ino]
        if is_dir and not node.is_dir:
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        if not is_dir and node.is_dir:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if is_dir and node.entries:
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), path)
        del parent.entries[name]
        self.pending.append(("unlink", parent.ino, name))
        self._forget(node)

    def rename(self, old, new, noreplace=False):
        op, on = self._parent(old)
        np_, nn = self._parent(new)
        ino = op.entries.get(on)
        if ino is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), old)
        target = np_.entries.get(nn)
        if target == ino:
            return
        if target is not None:
            if noreplace:
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), new)
            t = self.nodes[target]
            if t.is_dir and t.entries:
                raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), new)
            self._forget(t)
        del op.entries[on]
        np_.entries[nn] = ino
        self.pending.append(("rename", op.ino, on, np_.ino, nn))

    def _forget(self, node):
        node.linked = False
        if node.opens == 0:
            self._drop_node(node)

    def _drop_node(self, node):
        if node.fd >= 0:
            os.close(node.fd)
            node.fd = -1
        self.nodes.pop(node.ino, None)
        if self.last_write is not None and self.last_write[0] is node:
            self.last_write = None

    def opened(self, node):
        node.opens += 1

    def released(self, node):
        node.opens -= 1
        if node.opens == 0 and not node.linked:
            self._drop_node(node)

    def _commit_op(self, op):
        kind = op[0]
        if kind == "link":
            _, parent, name, ino, is_dir, mode = op
            self.d_entries.setdefault(parent, {})[name] = ino
            self.d_nodes[ino] = {"dir": is_dir, "mode": mode}
            if is_dir:
                self.d_entries.setdefault(ino, {})
        elif kind == "unlink":
            _, parent, name = op
            self.d_entries.get(parent, {}).pop(name, None)
        else:
            _, op_, on, np_, nn = op
            ino = self.d_entries.get(op_, {}).pop(on, None)
            if ino is not None:
                self.d_entries.setdefault(np_, {})[nn] = ino

    def fsync_dir(self, node):
        """The directory's pending operations become durable, in order, with
        the earlier operations on the other side of a rename that moved
        something in or out of it. Nothing else: not the directory's own
        name (that takes fsync of its parent), not other directories."""
        self.stats["fsyncdirs"] += 1
        dirs = {node.ino}
        chosen = []
        for i in range(len(self.pending) - 1, -1, -1):
            op = self.pending[i]
            touched = {op[1], op[3]} if op[0] == "rename" else {op[1]}
            if touched & dirs:
                chosen.append(i)
                dirs |= touched
        if not chosen:
            return
        keep = set(chosen)
        for i in sorted(keep):
            self._commit_op(self.pending[i])
        self.pending = [op for i, op in enumerate(self.pending) if i not in keep]
        self._save_namespace()

    # -- data -------------------------------------------------------------------

    def _page_base(self, node, page):
        """A page as it reads now, to start a dirty copy from."""
        start = page * PAGE
        buf = bytearray(PAGE)
        lim = node.durable_limit()
        if start < lim:
            data = os.pread(self._fd(node), min(PAGE, lim - start), start)
            buf[:len(data)] = data
        return buf

    def read(self, node, offset, size):
        end = min(offset + size, node.size)
        if offset >= end:
            return b""
        out = bytearray(end - offset)
        lim = node.durable_limit()
        if offset < lim:
            data = os.pread(self._fd(node), min(end, lim) - offset, offset)
            out[:len(data)] = data
        if node.dirty:
            for page in range(offset // PAGE, (end - 1) // PAGE + 1):
                p = node.dirty.get(page)
                if p is not None:
                    start = page * PAGE
                    a, b = max(offset, start), min(end, start + PAGE)
                    out[a - offset:b - offset] = p[a - start:b - start]
        return bytes(out)

    def write(self, node, offset, data):
        n = len(data)
        if n == 0:
            return 0
        self.stats["writes"] += 1
        pos = 0
        while pos < n:
            page = (offset + pos) // PAGE
            start = page * PAGE
            p = node.dirty.get(page)
            if p is None:
                p = node.dirty[page] = self._page_base(node, page)
            a = offset + pos - start
            k = min(PAGE - a, n - pos)
            p[a:a + k] = data[pos:pos + k]
            pos += k
        node.size = max(node.size, offset + n)
        self.last_write = (node, offset, n)
        return n

    def truncate(self, node, length):
        if length < node.size:
            for page in [p for p in node.dirty if p * PAGE >= length]:
                del node.dirty[page]
            tail = node.dirty.get(length // PAGE)
            if tail is not None:
                tail[length % PAGE:] = bytes(PAGE - length % PAGE)
            node.cut = length if node.cut is None else min(node.cut, length)
        node.size = length

    def zero_range(self, node, offset, length):
        """fallocate PUNCH_HOLE / ZERO_RANGE: the range reads as zeros."""
        end = min(offset + length, node.size)
        pos = offset
        while pos < end:
            k = min(PAGE - pos % PAGE, end - pos, 1 << 20)
            self.write(node, pos, bytes(k))
            pos += k

    def _persist(self, node, pages, with_size):
        """Copy these dirty pages (and, if asked, the volatile size) down to
        the durable layer."""
        fd = self._fd(node)
        size = node.dsize
        if with_size:
            if node.cut is not None and node.cut < node.dsize:
                os.ftruncate(fd, node.cut)
            size = node.size
        for page in sorted(pages):
            start = page * PAGE
            k = min(PAGE, size - start)
            if k > 0:
                os.pwrite(fd, node.dirty[page][:k], start)
        os.ftruncate(fd, size)
        node.dsize = size

    def fsync(self, node):
        """fsync and fdatasync alike: data and size become durable (the name
        does not: that takes fsync of its directory)."""
        self.stats["fsyncs"] += 1
        if node.is_dir:
            return self.fsync_dir(node)
        if node.dirty or node.cut is not None or node.size != node.dsize:
            self._persist(node, list(node.dirty), True)
        node.dirty.clear()
        node.cut = None
        if self.last_write is not None and self.last_write[0] is node:
            self.last_write = None

    def sync_all(self):
        """Everything becomes durable (a clean unmount)."""
        for node in list(self.nodes.values()):
            if not node.is_dir:
                self.fsync(node)
        for op in self.pending:
            self._commit_op(op)
        self.pending = []
        self._save_namespace()

    # -- losing power -----------------------------------------------------------

    def power_cut(self, mode):
        """Keep what this failure mode lets through of the volatile state;
        the caller then dies. mode: "drop" (only synced data survives),
        "torn" (plus a page-aligned prefix of the newest unsynced write),
        "subset:P" (each dirty page, each file's size and the pending name
        operations in order each survive with probability P)."""
        self.stats["cuts"] += 1
        kept = {"pages": 0, "dropped_pages": sum(len(n.dirty) for n in self.nodes.values() if not n.is_dir),
                "ops": 0, "dropped_ops": len(self.pending)}
        if mode == "torn" and self.last_write is not None:
            node, offset, n = self.last_write
            first, last = offset // PAGE, (offset + n - 1) // PAGE
            count = last - first + 1
            k = self.rng.randint(1, count - 1) if count > 1 else self.rng.randint(0, 1)
            pages = [p for p in range(first, first + k) if p in node.dirty]
            if pages:
                end = min(node.size, (first + k) * PAGE)
                fd = self._fd(node)
                for page in pages:
                    start = page * PAGE
                    if start < end:
                        os.pwrite(fd, node.dirty[page][:min(PAGE, end - start)], start)
                if end > node.dsize:
                    os.ftruncate(fd, end)
                kept["pages"] = len(pages)
        elif mode.startswith("subset:"):
            p = float(mode.split(":", 1)[1])
            for node in list(self.nodes.values()):
                if node.is_dir or not (node.dirty or node.size != node.dsize or node.cut is not None):
                    continue
                pages = [pg for pg in node.dirty if self.rng.random() < p]
                with_size = self.rng.random() < p
                if pages or with_size:
                    self._persist(node, pages, with_size)
                kept["pages"] += len(pages)
            n_ops = self.rng.randint(0, len(self.pending)) if self.pending else 0
            for op in self.pending[:n_ops]:
                self._commit_op(op)
            kept["ops"] = n_ops
        elif mode not in ("drop", "torn"):
            raise ValueError(f"unknown power cut mode {mode!r}")
        self._save_namespace()
        for node in self.nodes.values():
            if node.fd >= 0:
                os.close(node.fd)
                node.fd = -1
        return kept

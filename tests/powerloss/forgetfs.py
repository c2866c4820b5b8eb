"""ForgetFS: a FUSE filesystem that forgets what was not synced.

    python -m tests.powerloss.forgetfs BACKING_DIR MOUNTPOINT

Runs in the foreground, single-threaded, until unmounted or told to lose
power. Data lives in BACKING_DIR as described in model.py: written data
stays in this process's memory until fsync/fdatasync (msync and syncfs
reach us as the page writebacks plus fsync they are made of), names until
fsync of their directory.

The control file MOUNTPOINT/.forgetfs takes one command per write:

    sync                 make everything durable (a clean unmount does too)
    cut MODE [SEED]      lose power: keep what MODE lets through (drop, torn,
                         subset:P; see Model.power_cut), then exit at once

Reading it returns counters as JSON. After a cut the kernel aborts the
mount (its page cache goes with it once unmounted): `umount -l MOUNTPOINT`
and start a new process on the same BACKING_DIR to "reboot".

Mount settings that keep the simulation honest: no writeback cache (each
write(2) reaches us when it is made, so only the kernel's dirty mmap pages
can lag, and those are written back to us on msync/fsync), no direct I/O
(shared writable mmap needs the page cache), kernel_cache (nothing but
this mount changes the files, so the cache never needs dropping)."""
import errno
import json
import logging
import os
import random
import stat
import sys
import time

import mfusepy
from mfusepy import FUSE, FuseOSError, Operations

from tests.powerloss.model import Model

CONTROL = "/.forgetfs"
CONTROL_FH = 1 << 40

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10

# FUSE_CAP_* bits of libfuse 3 (fuse_common.h)
CAP_AUTO_INVAL_DATA = 1 << 12
CAP_WRITEBACK_CACHE = 1 << 16

log = logging.getLogger("forgetfs")


def oserror(exc):
    return FuseOSError(exc.errno or errno.EIO)


def handle(fi):
    """Our handle number from what mfusepy passes with raw_fi: a
    fuse_file_info, a plain number (the directory calls) or None."""
    return getattr(fi, "fh", fi)


class ForgetFS(Operations):
    use_ns = True

    def __init__(self, backing):
        self.model = Model(backing)
        self.handles = {}
        self.next_fh = 1
        self.started = time.time_ns()
        self.control_out = b""

    # -- setup ------------------------------------------------------------------

    def init_with_config(self, conn, config):
        if conn is not None:
            conn.want &= ~(CAP_WRITEBACK_CACHE | CAP_AUTO_INVAL_DATA)
        if config is not None:
            config.hard_remove = 1        # unlinked-but-open files keep working through their handles
            config.use_ino = 1
            config.kernel_cache = 1
            config.direct_io = 0
            config.entry_timeout = 1.0
            config.attr_timeout = 1.0
            config.negative_timeout = 0.0

    def destroy(self, path):
        # a clean unmount: what the kernel wrote back on the way is durable
        self.model.sync_all()

    # -- helpers ----------------------------------------------------------------

    def _node(self, path, fi=None):
        fh = handle(fi)
        if fh is not None and fh in self.handles:
            return self.handles[fh]
        if path is None:
            raise FuseOSError(errno.ENOENT)
        try:
            return self.model.lookup(path)
        except OSError as exc:
            raise oserror(exc) from None

    def _open(self, node):
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = node
        self.model.opened(node)
        return fh

    def _stat(self, node):
        if node.is_dir:
            mode, nlink, size = stat.S_IFDIR | (node.mode & 0o7777), 2, 4096
        else:
            mode, nlink, size = node.mode, 1, node.size
        return {"st_mode": mode, "st_nlink": nlink, "st_size": size, "st_ino": node.ino,
                "st_uid": 0, "st_gid": 0, "st_blocks": (size + 511) // 512, "st_blksize": 4096,
                "st_atime": self.started, "st_mtime": self.started, "st_ctime": self.started}

    # -- the control file ---------------------------------------------------------

    def _control(self, text):
        words = text.split()
        if not words:
            return
        if words[0] == "sync":
            self.model.sync_all()
        elif words[0] == "cut" and len(words) >= 2:
            if len(words) >= 3:
                self.model.rng = random.Random(int(words[2]))
            kept = self.model.power_cut(words[1])
            log.warning("power cut (%s): %s", words[1], kept)
            logging.shutdown()
            os._exit(0)
        else:
            raise FuseOSError(errno.EINVAL)

    # -- operations ---------------------------------------------------------------

    def getattr(self, path, fh=None):
        if path == CONTROL and handle(fh) in (None, CONTROL_FH):
            return {"st_mode": stat.S_IFREG | 0o600, "st_nlink": 1, "st_size": 0,
                    "st_atime": self.started, "st_mtime": self.started, "st_ctime": self.started}
        return self._stat(self._node(path, fh))

    def access(self, path, amode):
        self._node(path) if path != CONTROL else None
        return 0

    def statfs(self, path):
        # plenty of room: the broker's free-disk check must not trip
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 30, "f_bfree": 1 << 29,
                "f_bavail": 1 << 29, "f_files": 1 << 20, "f_ffree": 1 << 19, "f_namemax": 255}

    def readdir(self, path, fh):
        node = self._node(path, fh)
        if not node.is_dir:
            raise FuseOSError(errno.ENOTDIR)
        # with use_ino every entry needs its inode number: readdir(3) skips zeros
        out = [(".", {"st_ino": node.ino, "st_mode": stat.S_IFDIR}, 0),
               ("..", {"st_ino": node.ino, "st_mode": stat.S_IFDIR}, 0)]
        for name, ino in node.entries.items():
            child = self.model.nodes[ino]
            out.append((name, {"st_ino": ino, "st_mode": stat.S_IFDIR if child.is_dir else stat.S_IFREG}, 0))
        return out

    def opendir(self, path):
        node = self._node(path)
        if not node.is_dir:
            raise FuseOSError(errno.ENOTDIR)
        return self._open(node)

    def releasedir(self, path, fh):
        return self.release(path, fh)

    def mkdir(self, path, mode):
        try:
            self.model.create(path, mode, is_dir=True)
        except OSError as exc:
            raise oserror(exc) from None

    def rmdir(self, path):
        try:
            self.model.unlink(path, is_dir=True)
        except OSError as exc:
            raise oserror(exc) from None

    def create(self, path, mode, fi):
        try:
            node = self.model.create(path, stat.S_IFREG | (mode & 0o7777))
        except OSError as exc:
            raise oserror(exc) from None
        fi.fh = self._open(node)
        return 0

    def mknod(self, path, mode, dev):
        if not stat.S_ISREG(mode):
            raise FuseOSError(errno.EPERM)     # sockets, fifos, devices: not needed here
        try:
            self.model.create(path, mode)
        except OSError as exc:
            raise oserror(exc) from None

    def open(self, path, fi):
        if path == CONTROL:
            self.control_out = json.dumps(self.model.stats).encode() + b"\n"
            fi.fh = CONTROL_FH
            fi.direct_io = 1        # no page cache: every read and write reaches us
            return 0
        node = self._node(path)
        if fi.flags & os.O_TRUNC:
            self.model.truncate(node, 0)
        fi.fh = self._open(node)
        return 0

    def release(self, path, fh):
        node = self.handles.pop(handle(fh), None)
        if node is not None:
            self.model.released(node)
        return 0

    def flush(self, path, fh):
        return 0          # close(2) is not a sync

    def read(self, path, size, offset, fh):
        if handle(fh) == CONTROL_FH:
            return self.control_out[offset:offset + size]
        return self.model.read(self._node(path, fh), offset, size)

    def write(self, path, data, offset, fh):
        if handle(fh) == CONTROL_FH:
            self._control(data.decode())
            return len(data)
        node = self._node(path, fh)
        if node.is_dir:
            raise FuseOSError(errno.EISDIR)
        return self.model.write(node, offset, data)

    def truncate(self, path, length, fh=None):
        if path == CONTROL:
            return 0
        node = self._node(path, fh)
        if node.is_dir:
            raise FuseOSError(errno.EISDIR)
        self.model.truncate(node, length)
        return 0

    def fallocate(self, path, mode, offset, size, fh):
        node = self._node(path, fh)
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE):
            self.model.zero_range(node, offset, size)
        elif mode & ~FALLOC_FL_KEEP_SIZE:
            raise FuseOSError(errno.EOPNOTSUPP)
        if not mode & FALLOC_FL_KEEP_SIZE and offset + size > node.size:
            self.model.truncate(node, offset + size)
        return 0

    def fsync(self, path, datasync, fh):
        if handle(fh) == CONTROL_FH:
            return 0
        self.model.fsync(self._node(path, fh))
        return 0

    def fsyncdir(self, path, datasync, fh):
        self.model.fsync_dir(self._node(path, fh))
        return 0

    def unlink(self, path):
        try:
            self.model.unlink(path)
        except OSError as exc:
            raise oserror(exc) from None

    def rename(self, old, new):
        # (mfusepy does not pass renameat2's flags on; the broker uses plain rename)
        try:
            self.model.rename(old, new)
        except OSError as exc:
            raise oserror(exc) from None

    def chmod(self, path, mode):
        self._node(path).mode = (self._node(path).mode & ~0o7777) | (mode & 0o7777)
        return 0

    def chown(self, path, uid, gid):
        return 0

    def utimens(self, path, times=None):
        return 0


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    backing, mountpoint = args
    logging.basicConfig(level=logging.WARNING, format="forgetfs %(levelname)s %(message)s")
    os.makedirs(mountpoint, exist_ok=True)
    log.info("libfuse %s", mfusepy.fuse_version_major)
    FUSE(ForgetFS(backing), mountpoint, raw_fi=True, foreground=True, nothreads=True, fsname="forgetfs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

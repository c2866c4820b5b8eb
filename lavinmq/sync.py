"""Group commit: publisher confirms and tx.commit-ok go out only once the
messages they cover are on disk.

Durable queues' stores put themselves on `Syncer.dirty` at their first
write after a flush (once per flush round, never per message). A flush
takes that list, fdatasyncs the written segment files in a worker thread
while the event loop keeps reading, then runs everything that waited for
it: cumulative basic.ack per channel, deferred tx.commit-ok. Whatever
arrived during a flush is covered by the next one, so one fdatasync serves
every publish of the round, however many there were.
"""
import asyncio
import ctypes
import errno
import ctypes.util
import logging
import os

log = logging.getLogger("lavinmq.sync")

# Above this many files one syncfs(2) of the data directory's filesystem is
# cheaper than a fdatasync per file.
SYNCFS_ABOVE = 64

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _fsync_path(path, directory=False):
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    except FileNotFoundError:
        return          # a segment dropped since (all its messages acked): nothing to keep
    try:
        if directory:
            os.fsync(fd)
        else:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def flush_files(files, dirs, anchor):
    """Runs in a worker thread: make these files and directory entries
    durable. `anchor` is any path on the data directory's filesystem."""
    if len(files) + len(dirs) > SYNCFS_ABOVE:
        fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _libc.syncfs(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
        finally:
            os.close(fd)
        return
    for path in files:
        _fsync_path(path)
    for path in dirs:
        _fsync_path(path, directory=True)


class Syncer:
    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.dirty = []          # MessageStores written since the last flush started
        self.extra_files = set()  # other files to include (definitions.amqp)
        self.waiters = []        # callables to run after the next flush
        self.flushing = False
        self.flushes = 0         # rounds done, for tests and stats
        self.retry = None        # (files, dirs) of a round that ran out of descriptors

    @property
    def idle(self):
        """Nothing written and nothing in flight: a confirm may go out now."""
        return not self.flushing and not self.dirty and not self.extra_files and self.retry is None

    def after_flush(self, callback):
        """Run callback once everything written so far is on disk."""
        if self.idle:
            callback()
            return
        self.waiters.append(callback)
        if not self.flushing:
            self._start()

    def confirm_later(self, channel):
        """A channel owes confirms up to its current publish sequence."""
        seq = channel.publish_seq
        self.after_flush(lambda: channel.confirm_to(seq))

    def add_file(self, path):
        self.extra_files.add(path)

    def _start(self):
        self.flushing = True
        stores, self.dirty = self.dirty, []
        waiters, self.waiters = self.waiters, []
        files, dirs = list(self.extra_files), set()
        self.extra_files = set()
        if self.retry is not None:
            files.extend(self.retry[0])
            dirs.update(self.retry[1])
            self.retry = None
        for store in stores:
            paths, directory = store.take_sync_paths()
            files.extend(paths)
            if directory:
                dirs.add(directory)
                dirs.add(os.path.dirname(directory))
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(None, flush_files, files, sorted(dirs), self.data_dir)
        fut.add_done_callback(lambda f: self._done(f, waiters, files, dirs))

    def _done(self, fut, waiters, files=(), dirs=()):
        self.flushing = False
        self.flushes += 1
        exc = fut.exception()
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            # out of descriptors to open the files with: nothing was lost on
            # the disk, so wait (confirms wait too) and flush the same files again
            log.warning("flushing messages to disk: %s; retrying", exc.strerror)
            self.retry = (files, set(dirs))
            self.waiters[:0] = waiters
            asyncio.get_running_loop().call_later(0.2, self._retry)
            return
        if exc is not None:
            # a failed fdatasync means the kernel may have dropped the pages:
            # confirming would be a lie, and carrying on would be another
            log.critical("flushing messages to disk failed: %s; stopping", exc)
            os.kill(os.getpid(), 15)
            return
        conns = set()
        for callback in waiters:
            try:
                conn = callback()
            except Exception:
                log.exception("after-flush callback failed")
                continue
            if conn is not None:
                conns.add(conn)
        for conn in conns:
            conn.flush()
        if self.waiters or self.dirty or self.extra_files:
            if self.waiters:
                self._start()

    def _retry(self):
        if not self.flushing and self.retry is not None:
            self._start()

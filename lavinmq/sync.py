"""Group commit: publisher confirms and tx.commit-ok go out only once the
messages they cover are on disk.

Durable queues' stores put themselves on `Syncer.dirty` at their first
write after a flush (once per flush round, never per message). A flush
takes that list, fdatasyncs the written segment files in the flusher's
threads (lavinmq/_core/flusher.pyx, no GIL) while the event loop keeps
reading, then runs everything that waited for it: cumulative basic.ack per channel, deferred tx.commit-ok. Whatever
arrived during a flush is covered by the next one, so one fdatasync serves
every publish of the round, however many there were.

Per store that wrote records, a flush also carries its commit record
(lavinmq/commit.py), which lets recovery after a power cut keep exactly
what flushes made durable. When nothing waits for the disk (acks only,
publishers without confirms), a flush still runs within LAZY_FLUSH seconds.

Ack files go with a flush only when one of its waiters vouches for acks: a
publisher confirm on a connection that acked since its last confirms (its
acks before the confirm are durable when the confirm goes out), and every
other waiter (tx.commit-ok, MQTT's PUBACK, ...). A publisher whose
connection never acks does not wait for other connections' ack files: with
a consumer on the same queue that was a third fdatasync in each of its
flushes. Acks nobody vouches for reach the disk with the next flush that
carries acks, or within LAZY_FLUSH; lost to a power cut, their messages come
back, as unacked ones do. A cluster's leader carries them in every flush.

On a cluster's leader a flush is also the unit of replication: when it
starts, the replicator (lavinmq/clustering/replicator.py) sends the
followers what it covers, and its waiters run once the in-sync followers
have it on their disks too. A single node has no replicator and pays one
comparison per flush.
"""
import asyncio
import errno
import itertools
import logging
import os

from lavinmq import commit
from lavinmq._core import flusher

log = logging.getLogger("lavinmq.sync")

# Above this many files one syncfs(2) of the data directory's filesystem is
# cheaper than a fdatasync per file.
SYNCFS_ABOVE = 64

# Seconds a write may wait for a flush when nothing waits for it.
LAZY_FLUSH = 1.0

# Flushes on their way to the disk at once. A publisher with a window of
# unconfirmed messages waits for the disk's latency, not its bandwidth: with
# one flush at a time, what arrives during a flush waits for it to end and
# then for its own, and for the loop's turn in between; with a few in flight
# the next starts at once and the journal commits follow each other back to
# back (LavinMQ's lavinmqperf -c 1000 -p: +10-20% here). Each one vouches
# for everything since the newest completed commit (MessageStore.take_sync),
# and the commit file has a slot per flush in flight and one for the newest
# completed (commit.SLOTS). A cluster's leader keeps one at a time: a flush
# is its unit of replication.
MAX_IN_FLIGHT = commit.SLOTS - 1
# ...but a flush joins one already on its way only when it carries this many
# bytes of records. A slow publisher (a few messages per read) otherwise got
# a flush per read: up to three times the fdatasyncs and confirm frames for
# the same messages, and nothing to gain, since its window is not what
# waits. Below it, what comes waits for the flush on its way, as with one
# flush at a time.
OVERLAP_MIN_BYTES = 8192
# Stores looked at for those bytes, the newest written first: every
# confirming channel's read batch asks, and the dirty list may hold
# thousands of queues (one whose consumer only acked counts nothing).
OVERLAP_SCAN = 64


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path, data):
    """path holds data, whole and on disk, or what it held before: written
    aside, fsynced, renamed over it, and the rename made durable."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def flush_round(files, dirs, jobs, anchor):
    """One flush in the calling thread, blocking: the commit records
    (commit.commit's jobs) written, then all of it durable together. Order
    does not matter (a record whose bytes did not all make it fails its
    crc), only that all of it is durable before the waiters run. The
    syncer runs the same steps in the flusher's threads."""
    flusher.flush_now(files, dirs, jobs, anchor, commit.BOOT_ID, SYNCFS_ABOVE)


def flush_files(files, dirs, anchor):
    """Make these files and directory entries durable, blocking. `anchor`
    is any path on the data directory's filesystem."""
    flusher.flush_now(files, dirs, [], anchor, commit.BOOT_ID, SYNCFS_ABOVE)


class Syncer:
    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.dirty = []          # MessageStores written since the last flush started
        self.extra_files = set()  # other files to include (definitions.amqp)
        self.waiters = []        # callables to run after the next flush
        self.acks_wanted = False  # one of them vouches for acks: the next flush carries the ack files
        self.ack_stores = set()  # stores with ack files written that no flush has made durable yet
        self.in_flight = 0       # flushes submitted and not done
        self.flushes = 0         # rounds done, for tests and stats
        self.retry = None        # (files, dirs) of rounds that ran out of descriptors
        self.held = []           # their waiters, and those of later rounds, until a retry is done
        self._timer = None       # the lazy flush, when writes wait with nobody waiting on them
        self._current = None     # the running flush's future
        self._flusher = None     # lavinmq._core.flusher.Flusher, made on the loop of the first flush
        self._loop = None
        self._rounds = {}        # round id -> (waiters, files, dirs, future, rnd, taken)
        self.failed = False      # a flush failed: the broker is stopping
        self.replicator = None   # a cluster's leader: lavinmq.clustering.replicator.Replicator
        self.replicating = 0     # flushes done here whose followers have not all acknowledged

    @property
    def idle(self):
        """Nothing written and nothing in flight: a confirm may go out now."""
        return (not self.in_flight and not self.dirty and not self.extra_files and self.retry is None
                and not self.replicating)

    def idle_for(self, acks):
        """idle, and (acks) no ack file waits to be made durable either."""
        return self.idle and not (acks and self.ack_stores)

    def after_flush(self, callback, acks=True):
        """Run callback once everything written so far is on disk; with
        acks false, everything but the ack files (see the module's doc)."""
        if self.idle_for(acks):
            callback()
            return
        self.waiters.append(callback)
        if acks:
            self.acks_wanted = True
        if self._may_start():
            self._start()

    def confirm_later(self, channel, acks=True):
        """A channel owes confirms up to its current publish sequence; acks:
        its connection acked since its last confirms were taken."""
        seq = channel.publish_seq
        self.after_flush(lambda: channel.confirm_to(seq), acks)

    def _may_start(self):
        if not self.in_flight:
            return True
        if self.replicator is not None or self.in_flight >= MAX_IN_FLIGHT:
            return False
        pending = 0
        for store in itertools.islice(reversed(self.dirty), OVERLAP_SCAN):
            pending += store.pending_sync_bytes()
            if pending >= OVERLAP_MIN_BYTES:
                return True
        return False

    @property
    def flushing(self):
        return self.in_flight > 0

    def add_file(self, path):
        self.extra_files.add(path)
        self._arm()

    def mark(self, store):
        """A store wrote (records or acks) for the first time since the last
        flush took its marks."""
        self.dirty.append(store)
        self._arm()

    def _arm(self):
        if self._timer is not None or self.flushing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return          # no loop (tools, tests): the next after_flush covers it
        self._timer = loop.call_later(LAZY_FLUSH, self._lazy)

    def _lazy(self):
        self._timer = None
        if not self.flushing and (self.dirty or self.extra_files or self.ack_stores):
            self._start(acks=True)

    async def close(self):
        """At shutdown: everything written so far reaches the disk (with its
        commit records), so a restart after a power cut keeps it all."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while not self.failed and (self.flushing or self.dirty or self.extra_files or self.waiters
                                   or self.retry is not None or self.ack_stores):
            if not self.flushing:
                self._start(acks=True)
            await asyncio.wait([self._current])
        self._detach()

    def _start(self, acks=False):
        if self.failed:
            return          # stopping: nothing more is confirmed
        acks = acks or self.acks_wanted or self.replicator is not None
        self.acks_wanted = False
        self.in_flight += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        stores, self.dirty = self.dirty, []
        waiters, self.waiters = self.waiters, []
        files, dirs, taken = list(self.extra_files), set(), []
        self.extra_files = set()
        if self.retry is not None:
            files.extend(self.retry[0])
            dirs.update(self.retry[1])
            self.retry = None
            waiters[:0] = self.held
            self.held = []
        for store in stores:
            paths, directory, job = store.take_sync(acks)
            files.extend(paths)
            if directory:
                dirs.add(directory)
                dirs.add(os.path.dirname(directory))
            if job is not None:
                taken.append((store, job))
            if not acks and store.unsynced_acks:
                self.ack_stores.add(store)
        if acks and self.ack_stores:
            for store in self.ack_stores:
                files.extend(store.take_acks())
            self.ack_stores = set()
        # the followers get the flush first: their round trip is the longer one
        jobs = [job for _, job in taken]
        rnd = self.replicator.capture(files, jobs) if self.replicator is not None else None
        self._submit(files, sorted(dirs), jobs, waiters, rnd, taken)

    def _submit(self, files, dirs, jobs, waiters, rnd, taken=()):
        loop = asyncio.get_running_loop()
        if self._flusher is None or self._loop is not loop:
            self._attach(loop)
        fut = loop.create_future()
        self._current = fut
        try:
            rid = self._flusher.submit(files, dirs, jobs, self.data_dir, commit.BOOT_ID)
        except OSError as exc:
            fut.set_result(None)
            self._done(exc, waiters, files, dirs, rnd, taken)
            return
        self._rounds[rid] = (waiters, files, dirs, fut, rnd, taken)

    def _attach(self, loop):
        """The flusher wakes this loop through an eventfd, as a socket would."""
        self._detach()
        self._flusher = flusher.Flusher(SYNCFS_ABOVE, flusher.fdatasync_flushes_all(self.data_dir))
        self._loop = loop
        loop.add_reader(self._flusher.fileno(), self._on_rounds)

    def _detach(self):
        if self._flusher is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._flusher.fileno())
        self._flusher = self._loop = None

    def _on_rounds(self):
        for rid, err in self._flusher.take_done():
            waiters, files, dirs, fut, rnd, taken = self._rounds.pop(rid)
            fut.set_result(None)
            if not err:
                for store, job in taken:
                    store.commit_done(job)
            self._done(OSError(err, os.strerror(err)) if err else None, waiters, files, dirs, rnd, taken)

    def _done(self, exc, waiters, files=(), dirs=(), rnd=None, taken=()):
        self.in_flight -= 1
        self.flushes += 1
        if exc is not None and rnd is not None:
            rnd.flushed(None)       # its confirms wait for a later flush, or never come
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            # out of descriptors to open the files with: nothing was lost on
            # the disk, so wait (confirms wait too) and flush the same files
            # again, with commits taken afresh
            log.warning("flushing messages to disk: %s; retrying", exc.strerror)
            old_files, old_dirs = self.retry if self.retry is not None else ([], set())
            self.retry = (old_files + list(files), old_dirs | set(dirs))
            self.held.extend(waiters)
            for store, _ in taken:
                store.commit_again()
            asyncio.get_running_loop().call_later(0.2, self._retry)
            return
        if self.retry is not None:
            # an earlier flush of the ones in flight failed: confirms are
            # cumulative, so these wait for its retry too
            self.held.extend(waiters)
            return
        if exc is not None:
            # a failed fdatasync means the kernel may have dropped the pages:
            # confirming would be a lie, and carrying on would be another
            log.critical("flushing messages to disk failed: %s; stopping", exc)
            self.failed = True
            os.kill(os.getpid(), 15)
            return
        if rnd is not None:
            rnd.flushed(lambda: self._release(waiters))
        else:
            self._release(waiters)
        if self.waiters and self._may_start():
            self._start()
        elif self.dirty or self.extra_files or self.ack_stores:
            self._arm()

    def _release(self, waiters):
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

    def _retry(self):
        if not self.flushing and self.retry is not None:
            self._start()

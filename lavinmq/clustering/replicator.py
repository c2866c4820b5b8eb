"""The leader's side of replication: every group commit becomes one batch
of frames for the followers, and the confirms of that commit go out only
once every member of the in-sync replica set (ISR) has acknowledged the
batch from its own disk.

Once per flush (lavinmq/sync.py calls capture() when a flush starts), never
per message: the flush's commit jobs say which byte ranges of which segments
it covers (the same ranges its commit records checksum), so a batch is one
WRITE frame per segment range and store, read from the page cache with one
pread, plus the tails of the ack files and definitions it fsyncs, plus the
files writers reported through lavinmq.clustering.changes (whole files: they
are small), plus a COMMIT frame per store that lets the follower write its
own commit record. The batch is one bytes object written to every
follower's socket.

A flush's confirms are released (Round.flushed, then _check_rounds), in
order, when:
  - the local fdatasync is done (as on a single node),
  - this node still holds its lease by its own clock (lease.valid()),
  - every follower the confirms must wait for acknowledged the batch. Those
    are the in-sync followers, and the ones etcd's ISR key still lists: a
    follower that disconnected, fell behind for ACK_TIMEOUT, or has not
    finished its sync holds the confirms back until the leader has written
    an ISR without it (ISRWriter), so a follower etcd could elect never
    lacks a confirmed message.
A leader that lost its lease, or is stopping, releases nothing any more."""
import asyncio
import collections
import logging
import os
import stat
import time

from lavinmq.clustering import protocol
from lavinmq.clustering.coordinator import StaleLeadership, format_isr
from lavinmq.clustering.etcd import EtcdError
from lavinmq.clustering.settings import node_name, to_base36

log = logging.getLogger("lavinmq.clustering.replicator")

ACK_TIMEOUT = 3.0                   # s a follower may leave bytes unacknowledged without progress
SYNC_TIMEOUT = 60.0                 # ... while it syncs (it hashes its files: it says it is alive)
MAX_UNACKED = 512 * 1024 * 1024     # bytes a follower may lag before it is dropped (and syncs again)
CHECK_INTERVAL = 0.1                # s between lag and lease checks
ISR_RETRY = 0.5                     # s between attempts to write the ISR while etcd does not answer
SYNC_GRACE = 2.0                    # s a confirm waits for a connected ISR member to finish its sync
                                    # (after a failover they all sync again) before it is written out
SEGMENT_HEADER = 4
STOPPING = "stopping"               # the fence reason of a clean stop (lavinmq.clustering.node)
APPENDED = ("definitions.amqp", "consumer_offsets")   # files only ever appended to (or replaced)
APPENDED_PREFIXES = ("acks.", "requeued.")


def appended_file(rel):
    name = rel.rsplit("/", 1)[-1]
    return name.startswith(APPENDED_PREFIXES) or name in APPENDED


class FollowerLink:
    """One connected follower, as the leader sees it."""

    def __init__(self, node_id, writer, peer):
        self.node_id = node_id
        self.writer = writer
        self.peer = peer                # (ip, port) it connected from
        self.sent = 0                   # bytes of frames written (or held) for it
        self.acked = 0
        self.state = "syncing"          # syncing: a full sync's first pass; buffering: its
                                        # second pass, batches held; streaming: batches go out
        self.backlog = []
        self.backlog_bytes = 0
        self.join_at = None             # streaming: in sync once acked reaches this
        self.in_sync = False
        self.last_progress = time.monotonic()
        self.closed = False
        self.connected_at = time.time()
        self.connected_mono = time.monotonic()
        self.requests = None            # a sync pass: paths the follower asked for
        self.requests_done = None       # ... and the future its REQUEST_END resolves
        self.acks_task = None           # the task reading what the follower sends
        self.uri = None                 # where it says it can be reached when it leads

    def __str__(self):
        """As the logs name it: its name and node id, as /api/nodes and the ISR key do."""
        return f"{node_name(self.uri) if self.uri else 'follower'} ({to_base36(self.node_id)})"

    @property
    def receiving(self):
        return self.state != "syncing" and not self.closed

    @property
    def lag(self):
        return self.sent - self.acked

    def write(self, data):
        """Frames of the sync itself (and the streamed batches once streaming)."""
        if self.closed:
            return
        if self.sent == self.acked:
            self.last_progress = time.monotonic()      # the ack clock starts now
        self.sent += len(data)
        self.writer.write(data)

    def batch(self, data):
        """A flush's batch. -> the position the follower must acknowledge."""
        if self.state == "buffering":
            self.backlog.append(data)
            self.backlog_bytes += len(data)
            if self.sent == self.acked:
                self.last_progress = time.monotonic()
            self.sent += len(data)
            return self.sent
        self.write(data)
        return self.sent

    def start_streaming(self):
        """The sync is done: what was held goes out, then batches as they come."""
        backlog, self.backlog, self.backlog_bytes = self.backlog, [], 0
        self.state = "streaming"
        for data in backlog:
            self.writer.write(data)       # counted in sent when held
        self.join_at = self.sent

    def close(self):
        if not self.closed:
            self.closed = True
            self.backlog = []
            try:
                self.writer.close()
            except Exception:
                pass


class Round:
    """The batch of one flush, and the confirms it holds back."""
    __slots__ = ("replicator", "targets", "local_done", "release", "seq")

    def __init__(self, replicator, seq):
        self.replicator = replicator
        self.targets = {}           # FollowerLink -> position it must acknowledge
        self.local_done = False
        self.release = None
        self.seq = seq

    def flushed(self, release):
        """The local flush is done; release() runs once the followers have it too."""
        self.local_done = True
        self.release = release
        self.replicator.check_rounds()


class Replicator:
    def __init__(self, data_dir, node_id, coordinator, lease, syncer, etcd_isr, on_fence):
        self.data_dir = os.path.abspath(data_dir)
        self.node_id = node_id
        self.coordinator = coordinator
        self.lease = lease
        self.syncer = syncer
        self.on_fence = on_fence            # called once when this leader must stop
        self.links = {}                     # node id -> FollowerLink
        self.rounds = collections.deque()
        self.round_seq = 0
        self.ops = []                       # ("changed" | "removed", rel) since the last capture
        self.known = {}                     # rel -> (inode, size) the followers have of an appended file
        self.isr = set()                    # followers in sync: confirms wait for their acks
        self.left = {}                      # node id -> (who, why) it left self.isr (for the warning)
        self.etcd_isr = set(etcd_isr)       # what the ISR key says (it includes this node)
        self.isr_dirty = False              # a round waits on a member to leave the ISR key
        self.writing_isr = False
        self.fenced = False
        self.fence_reason = None
        self.batches = 0
        self.batch_bytes = 0
        self._monitor = None
        self.logical_sizes = lambda: {}     # set by the node: write segments' data sizes

    # -- lifecycle ------------------------------------------------------------------------

    def start(self):
        syncer = self.syncer
        syncer.replicator = self
        self._monitor = asyncio.get_running_loop().create_task(self._watch())

    def fence(self, reason):
        """Stop confirming, for good: the lease is gone, or the node is stopping."""
        if self.fenced:
            return
        self.fenced = True
        self.fence_reason = reason
        dropped = len(self.rounds)
        self.rounds.clear()
        # never idle again: a confirm sent because nothing seemed to wait
        # would cover earlier publishes that were withheld
        self.syncer.replicating = 1 << 30
        # a clean stop that withholds nothing is no news; anything else is
        log.log(logging.INFO if reason == STOPPING and not dropped else logging.WARNING,
                "replication fenced (%s): %d flush(es) of confirms withheld", reason, dropped)
        if self.on_fence is not None:
            self.on_fence(reason)

    def stop(self):
        if self._monitor is not None:
            self._monitor.cancel()
            self._monitor = None
        for link in list(self.links.values()):
            link.close()
        self.links.clear()
        if self.syncer.replicator is self:
            self.syncer.replicator = None

    # -- followers --------------------------------------------------------------------------

    def add_link(self, link):
        old = self.links.get(link.node_id)
        if old is not None:
            log.info("%s connected again: the older connection is closed", link)
            self.remove_link(old)
        self.links[link.node_id] = link

    def remove_link(self, link, reason="disconnected"):
        if self.links.get(link.node_id) is link:
            del self.links[link.node_id]
        if not link.closed:
            log.info("%s %s (lag %d bytes)", link, reason, link.lag)
        link.close()
        if link.node_id in self.isr:
            # the ISR key still names it: it is written without it only when
            # a confirm waits on it (_write_isr warns then), never on a clean stop
            self.isr.discard(link.node_id)
            self.left[link.node_id] = (str(link), reason)
        self.check_rounds()

    def acked(self, link, position):
        if position > link.sent:
            raise protocol.ProtocolError(f"acknowledged {position} bytes of {link.sent} sent")
        if position > link.acked:
            link.acked = position
            link.last_progress = time.monotonic()
        elif link.state != "streaming":
            link.last_progress = time.monotonic()     # a syncing follower's sign of life
        if not link.in_sync and link.join_at is not None and link.acked >= link.join_at:
            link.in_sync = True
            self.isr.add(link.node_id)
            self.left.pop(link.node_id, None)
            log.info("%s is in sync", link)
            self._write_isr_soon()
        self.check_rounds()

    # -- what writers report -----------------------------------------------------------------

    def rel(self, path):
        return os.path.relpath(path, self.data_dir).replace(os.sep, "/")

    def changed(self, path):
        self.ops.append(("changed", self.rel(path)))
        self.syncer.add_file(path)

    def removed(self, path):
        rel = self.rel(path)
        self.ops.append(("removed", rel))
        for k in [k for k in self.known if k == rel or k.startswith(rel + "/")]:
            del self.known[k]
        self.syncer.add_file(path)      # not there to fsync: it only makes the next flush come

    # -- one flush ---------------------------------------------------------------------------

    def capture(self, files, jobs):
        """At the start of a flush (lavinmq/sync.py): the batch of frames for
        what it covers, sent to every follower that takes batches. -> the Round."""
        self.round_seq += 1
        rnd = Round(self, self.round_seq)
        if self.fenced:
            return rnd
        self.rounds.append(rnd)
        self.syncer.replicating += 1
        ops, self.ops = self.ops, []
        links = [link for link in self.links.values() if link.receiving]
        if not links:
            return rnd          # whoever connects next gets a full sync
        out = bytearray()
        done = set()
        for kind, rel in ops:
            if kind == "removed":
                out += protocol.delete_frame(rel)
                # what is written there after the removal must go again
                done = {d for d in done if d != rel and not d.startswith(rel + "/")}
            elif rel not in done:
                self._file_frames(out, rel)
                done.add(rel)
        for path in files:
            rel = self.rel(path)
            # segments come from the jobs below
            if rel not in done and not rel.rsplit("/", 1)[-1].startswith("msgs."):
                self._file_frames(out, rel)
                done.add(rel)
        for job in jobs:
            self._job_frames(out, job)
        if not out:
            return rnd
        data = bytes(out)
        self.batches += 1
        self.batch_bytes += len(data)
        for link in links:
            rnd.targets[link] = link.batch(data)
        return rnd

    def _file_frames(self, out, rel):
        path = os.path.join(self.data_dir, rel)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self.known.pop(rel, None)
            out += protocol.delete_frame(rel)
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return
            known = self.known.get(rel)
            if known is not None and known[0] == st.st_ino and known[1] <= st.st_size and appended_file(rel):
                if st.st_size > known[1]:
                    protocol.write_frames(out, rel, known[1], os.pread(fd, st.st_size - known[1], known[1]))
            else:
                pos = 0
                while True:         # the whole file, written aside and renamed into place
                    chunk = os.pread(fd, protocol.CHUNK, pos)
                    last = pos + len(chunk) >= st.st_size or not chunk
                    out += protocol.sync_file_frame(rel, pos, last, chunk)
                    pos += len(chunk)
                    if last:
                        break
            if appended_file(rel):
                self.known[rel] = (st.st_ino, st.st_size)
        finally:
            os.close(fd)

    def _job_frames(self, out, job):
        directory, seq, first, start, ends = job[:5]
        rel_dir = self.rel(directory)
        for seg_id, end in ends:
            if not end:
                continue        # the segment was gone when the flush started
            begin = start if seg_id == first and start != SEGMENT_HEADER else 0
            if end <= begin:
                continue
            rel = f"{rel_dir}/msgs.{seg_id:010d}"
            try:
                fd = os.open(os.path.join(self.data_dir, rel), os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                protocol.write_frames(out, rel, begin, os.pread(fd, end - begin, begin))
            finally:
                os.close(fd)
        out += protocol.commit_frame(rel_dir, seq, first, start, ends)

    # -- releasing confirms --------------------------------------------------------------

    def must_ack(self):
        return self.isr | (self.etcd_isr - {self.node_id})

    def _blockers(self, rnd):
        """Followers this round still waits on -> (lagging in-sync ones, ones to drop from the ISR key)."""
        lagging, dropping = [], []
        now = time.monotonic()
        for node in self.must_ack():
            link = self.links.get(node)
            if link is not None and not link.in_sync and now - link.connected_mono < SYNC_GRACE:
                lagging.append(node)        # about to be in sync: cheaper to wait than to shrink the ISR
            elif link is None or not link.in_sync:
                dropping.append(node)
            else:
                target = rnd.targets.get(link)
                if target is not None and link.acked < target:
                    lagging.append(node)
        return lagging, dropping

    def check_rounds(self):
        while self.rounds and not self.fenced:
            rnd = self.rounds[0]
            if not rnd.local_done:
                return
            lagging, dropping = self._blockers(rnd)
            if dropping:
                self.isr_dirty = True
                self._write_isr_soon()
                return
            if lagging:
                return
            if not self.lease.valid():
                self.fence("the lease's deadline passed")
                return
            self.rounds.popleft()
            self.syncer.replicating -= 1
            if rnd.release is not None:
                rnd.release()

    # -- the ISR key -----------------------------------------------------------------------

    def desired_isr(self):
        return {self.node_id} | self.isr

    def _write_isr_soon(self):
        if self.writing_isr or self.fenced:
            return
        want = self.desired_isr()
        if want == self.etcd_isr:
            self.isr_dirty = False
            return
        # additions go in at once; removals when a confirm waits on them
        if not (want - self.etcd_isr) and not self.isr_dirty:
            return
        self.writing_isr = True
        asyncio.get_running_loop().create_task(self._write_isr())

    async def _write_isr(self):
        try:
            while not self.fenced:
                want = self.desired_isr()
                try:
                    await self.coordinator.write_isr(want, self.lease.lease_id)
                except StaleLeadership as exc:
                    self.fence(str(exc))
                    return
                except (EtcdError, OSError) as exc:
                    log.warning("writing the ISR %s: %s; retrying", format_isr(want), exc)
                    await asyncio.sleep(ISR_RETRY)
                    continue
                for gone in sorted(self.etcd_isr - want):
                    who, why = self.left.pop(gone, (to_base36(gone), "not connected to this leader"))
                    log.warning("the in-sync replicas shrink: %s left (%s)", who, why)
                self.etcd_isr = want
                if want == self.desired_isr():
                    break
        finally:
            self.writing_isr = False
        self.isr_dirty = False
        self.check_rounds()
        self._write_isr_soon()

    # -- followers that fall behind, the lease ----------------------------------------------

    async def _watch(self):
        while True:
            await asyncio.sleep(CHECK_INTERVAL)
            now = time.monotonic()
            for link in list(self.links.values()):
                timeout = ACK_TIMEOUT if link.state == "streaming" else SYNC_TIMEOUT
                if link.lag > 0 and now - link.last_progress > timeout:
                    self.remove_link(link, f"acknowledged nothing for {timeout:.0f} s")
                elif link.lag > MAX_UNACKED:
                    self.remove_link(link, f"{link.lag} bytes behind")
            if not self.fenced and not self.lease.valid():
                self.fence("the lease's deadline passed")
            if self.rounds:
                self.check_rounds()

    # -- status ----------------------------------------------------------------------------

    def followers(self):
        out = []
        for link in self.links.values():
            out.append({"id": link.node_id, "uri": link.uri,
                        "address": f"{link.peer[0]}:{link.peer[1]}" if link.peer else None,
                        "state": "in sync" if link.in_sync else link.state, "in_isr": link.node_id in self.etcd_isr,
                        "sent_bytes": link.sent, "acked_bytes": link.acked, "lag_in_bytes": link.lag})
        return out

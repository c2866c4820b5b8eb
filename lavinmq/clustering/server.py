"""The leader's replication port: followers connect, prove they know the
cluster's secret, are brought in sync, then receive every flush's batch.

A full sync runs twice. The first pass lists every replicated file with its
checksum while the broker goes on; the follower asks for the files it lacks
or has otherwise, and gets them. The second pass starts holding the flush
batches for this follower, lists again (checksums are cached: only files
that changed are hashed again) and sends what changed since the first;
then the held batches follow and the stream goes on. Writes carry their
offsets, so the overlap between the second listing and the held batches
does no harm. Files are read and hashed in worker threads: the event loop
only hands out work.
"""
import asyncio
import hmac
import logging
import os
import struct

from lavinmq import sockopts
from lavinmq.clustering import files, protocol
from lavinmq.clustering.replicator import FollowerLink

log = logging.getLogger("lavinmq.clustering.server")

HANDSHAKE_TIMEOUT = 5.0
MAX_HANDSHAKES = 32             # connections not yet past the secret: more are closed at once
SYNC_READ = 1024 * 1024
PAGE = 4096                     # what a sync checks for zeros (and leaves out)
ZEROS = bytes(PAGE)
MAX_REQUESTED = 10_000_000      # paths one sync may ask for (a bound on what a peer can make us hold)


def read_pieces(fd, pos, size):
    """In a worker thread: the next chunk of a file being sent, read and
    scanned for zeros off the loop. -> (its length, the file's last?, runs)"""
    chunk = os.pread(fd, min(SYNC_READ, size - pos), pos)
    last = not chunk or pos + len(chunk) >= size
    return len(chunk), last, pages_not_zero(chunk, first=pos == 0, last=last)


def pages_not_zero(chunk, first, last):
    """[(start, bytes)]: chunk's runs of pages that are not all zeros. The
    chunk's first page stays if it begins the file (the follower creates
    the file with it) and its last if it ends the file (it names the size)."""
    runs, start = [], None
    n = len(chunk)
    for off in range(0, n, PAGE):
        end = min(off + PAGE, n)
        # most pages hold data and fail on their first byte, without a copy
        keep = (first and off == 0) or (last and end == n) or chunk[off] != 0 or chunk[off:end] != ZEROS[:end - off]
        if keep and start is None:
            start = off
        elif not keep and start is not None:
            runs.append((start, chunk[start:off]))
            start = None
    if start is not None:
        runs.append((start, chunk[start:] if start else chunk))
    if not runs and last:
        runs.append((n, b""))       # an empty last read: the end of the file
    return runs


class ReplicationServer:
    def __init__(self, replicator, secret, bind, port, keepalive=None, cache=None):
        self.replicator = replicator
        self.keepalive = keepalive      # [main] tcp_keepalive, on each follower's socket
        self.secret = secret
        self.bind = bind
        self.port = port
        self.server = None
        self.cache = cache if cache is not None else files.ChecksumCache()     # the node's
        self.sync_lock = asyncio.Lock()     # one full sync at a time: hashing is the cost
        self.tasks = set()
        self.handshakes = 0

    async def start(self):
        from lavinmq.listener import ListenError
        try:
            self.server = await asyncio.start_server(self._client, self.bind, self.port, reuse_address=True)
        except OSError as exc:
            raise ListenError(f"clustering port {self.bind}:{self.port} (--clustering-port / [clustering] port): "
                              f"{exc.strerror or exc}") from None
        log.info("replication listening on %s:%d", self.bind, self.port)

    def close(self):
        if self.server is not None:
            self.server.close()
            self.server = None
        for task in list(self.tasks):
            task.cancel()

    async def _client(self, reader, writer):
        task = asyncio.current_task()
        self.tasks.add(task)
        peer = writer.get_extra_info("peername")
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sockopts.set_keepalive(sock, self.keepalive)
            except OSError:
                pass        # already gone: the handshake finds out
        link = None
        if self.handshakes >= MAX_HANDSHAKES:
            writer.close()
            self.tasks.discard(task)
            return
        try:
            self.handshakes += 1
            try:
                node_id, uri = await asyncio.wait_for(self._handshake(reader, writer), HANDSHAKE_TIMEOUT)
            finally:
                self.handshakes -= 1
            link = FollowerLink(node_id, writer, peer)
            link.uri = uri
            self.replicator.add_link(link)
            log.info("%s connected from %s", link, peer[0] if peer else "?")
            acks = link.acks_task = asyncio.ensure_future(self._read_acks(reader, link))
            try:
                await self._full_sync(reader, link)
                await acks
            finally:
                acks.cancel()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, protocol.ProtocolError) as exc:
            if link is None:
                log.info("replication connection from %s refused: %s", peer, exc or type(exc).__name__)
            else:
                closed = isinstance(exc, asyncio.IncompleteReadError) and not exc.partial
                self.replicator.remove_link(link, "disconnected" if closed else
                                            f"disconnected ({exc or type(exc).__name__})")
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("replication connection from %s failed", peer)
        finally:
            if link is not None:
                self.replicator.remove_link(link)
            writer.close()
            self.tasks.discard(task)

    async def _handshake(self, reader, writer):
        magic = await reader.readexactly(len(protocol.MAGIC))
        if magic != protocol.MAGIC:
            writer.write(protocol.MAGIC)
            raise protocol.ProtocolError("not a replication client")
        n = (await reader.readexactly(1))[0]
        secret = await reader.readexactly(n)
        if not hmac.compare_digest(secret, self.secret):
            writer.write(b"\x01")
            await writer.drain()
            raise protocol.ProtocolError("wrong secret")
        writer.write(b"\x00")
        node_id = struct.unpack("<i", await reader.readexactly(4))[0]
        n = (await reader.readexactly(1))[0]
        uri = (await reader.readexactly(n)).decode("utf-8", "replace")
        if node_id == self.replicator.node_id:
            raise protocol.ProtocolError("a follower with the leader's own node id")
        return node_id, uri

    # -- full sync -------------------------------------------------------------------------

    async def _full_sync(self, reader, link):
        async with self.sync_lock:
            for pass_no in (1, 2):
                if pass_no == 2:
                    link.state = "buffering"        # batches from here on are held, then sent
                await self._sync_pass(reader, link, pass_no)
            link.start_streaming()
        log.info("%s synced; streaming", link)

    async def _sync_pass(self, reader, link, pass_no):
        sizes = self.replicator.logical_sizes()
        hashed = self.cache.hashed_files, self.cache.hashed_bytes
        entries = await asyncio.to_thread(files.listing, self.replicator.data_dir, sizes, self.cache)
        hashed = self.cache.hashed_files - hashed[0], self.cache.hashed_bytes - hashed[1]
        for f in protocol.list_frames(entries):
            link.write(f)
        link.write(protocol.frame(protocol.LIST_END, bytes((pass_no,))))
        await link.writer.drain()
        wanted = await self._requests(link)
        listed = {rel: size for rel, size, _ in entries}
        sent = 0
        for rel in wanted:
            if rel not in listed:
                raise protocol.ProtocolError(f"requested {rel!r}, which was not listed")
            sent += await self._send_file(link, rel, rel in sizes, listed[rel])
        link.write(protocol.frame(protocol.SYNC_END, bytes((pass_no,))))
        await link.writer.drain()
        log.info("%s sync pass %d: %d files listed, %d sent (%d bytes), %d hashed (%d bytes)",
                 link, pass_no, len(entries), len(wanted), sent, *hashed)

    async def _requests(self, link):
        """The paths the follower asks for (its ack reader collects them)."""
        link.requests = []
        fut = link.requests_done = asyncio.get_running_loop().create_future()
        await asyncio.wait([fut, link.acks_task], return_when=asyncio.FIRST_COMPLETED)
        if fut.done():
            return fut.result()
        fut.cancel()
        link.acks_task.result()         # raises what ended it
        raise ConnectionError("the follower went away during a sync")

    async def _send_file(self, link, rel, is_write_segment, listed_size):
        """The file as it is now; a write segment up to its listed size (past
        it may be a record half written). Pages of zeros between its first
        and its last are not sent: the follower writes each chunk at its
        offset into a file it created empty, so they read back as zeros (a
        queue's commit file is 192 KB of which four slots are not zero).
        -> bytes sent."""
        path = os.path.join(self.replicator.data_dir, rel)
        try:
            fd = await asyncio.to_thread(os.open, path, os.O_RDONLY)
        except FileNotFoundError:
            link.write(protocol.delete_frame(rel))       # gone since: the stream says so too
            return 0
        try:
            size = listed_size if is_write_segment else os.fstat(fd).st_size
            pos, sent = 0, 0
            while True:
                n, last, runs = await asyncio.to_thread(read_pieces, fd, pos, size)
                for start, piece in runs:
                    link.write(protocol.sync_file_frame(rel, pos + start, last and start + len(piece) == n, piece))
                    sent += len(piece)
                pos += n
                await link.writer.drain()
                if last:
                    return sent
        finally:
            os.close(fd)

    # -- what the follower sends -----------------------------------------------------------

    async def _read_acks(self, reader, link):
        while True:
            head = await reader.readexactly(protocol.HEADER.size)
            kind, length = protocol.HEADER.unpack(head)
            if length > protocol.MAX_FRAME:
                raise protocol.ProtocolError(f"frame of {length} bytes")
            body = await reader.readexactly(length)
            if kind == protocol.ACK:
                if length != 8:
                    raise protocol.ProtocolError("bad ack")
                self.replicator.acked(link, protocol.U64.unpack(body)[0])
            elif kind == protocol.REQUEST:
                requests = getattr(link, "requests", None)
                if requests is None:
                    raise protocol.ProtocolError("request outside a sync")
                requests.extend(protocol.parse_paths(body))
                if len(requests) > MAX_REQUESTED:
                    raise protocol.ProtocolError("too many requests")
            elif kind == protocol.REQUEST_END:
                fut = getattr(link, "requests_done", None)
                if fut is None or fut.done():
                    raise protocol.ProtocolError("request end outside a sync")
                fut.set_result(link.requests)
                link.requests = None
            else:
                raise protocol.ProtocolError(f"unexpected frame type {kind}")

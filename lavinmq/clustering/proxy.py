"""A follower pipes its clients to the leader, as LavinMQ's followers do, so
a client may connect to any node: AMQP (and AMQPS), the management API
(and HTTPS) and the metrics port listen on this node's own addresses and
ports, and each connection is piped to the leader's host on the same port
number (every node of a cluster uses the same ports).

A client that connects while there is no leader (a failover in progress),
or before the leader has taken this node as a follower (the node retargets
then: lavinmq/clustering/node.py), waits up to WAIT_FOR_LEADER seconds for
one, then is closed. When the
leader changes, the pipes to the old one are closed: their clients
reconnect, and land on the new leader. Bytes are passed as they come, with
flow control both ways (a slow side pauses the other's reads); nothing is
parsed. TLS passes through untouched: the leader terminates it.

The client's socket gets the TCP options ([main] tcp_*) that the protocol
listeners give theirs (lavinmq/sockopts.py: AMQP and MQTT, not HTTP), and
the pipe to the leader keepalive, as the cluster's other links.

An AMQP or MQTT pipe starts with a PROXY v1 header naming the client (as
LavinMQ's AMQP pipe does), which the leader believes from its followers
(lavinmq/listener.py): the connection shows the client's address, and the
per-address connection limit, login back-off and loopback-only users judge
the client, not the follower. Not when this node's own ports take PROXY
headers ([amqp] tcp_proxy_protocol): then the balancer's header in front of
it passes through and names the client.
"""
import asyncio
import logging
import os
import socket

from lavinmq import proxy_protocol, sockopts

log = logging.getLogger("lavinmq.clustering.proxy")

WAIT_FOR_LEADER = 5.0
PROTOCOLS = ("AMQP", "AMQPS", "MQTT", "MQTTS")     # the listeners with TCP options
HEADER_PROTOCOLS = ("AMQP", "MQTT")                 # the leader's ports that read a follower's PROXY header
CONNECT_TIMEOUT = 3.0


class _Side(asyncio.Protocol):
    """One end of a pipe; `other` is the opposite end."""

    def __init__(self, pipes):
        self.pipes = pipes
        self.transport = None
        self.other = None
        self.early = []             # what the client sent before the leader side was up
        self.closed = False

    def connection_made(self, transport):
        self.transport = transport
        self.pipes.add(self)

    def data_received(self, data):
        other = self.other
        if other is None or other.transport is None:
            self.early.append(data)
            if sum(map(len, self.early)) > 1 << 20:
                self.transport.pause_reading()
        else:
            other.transport.write(data)

    def eof_received(self):
        if self.other is not None and self.other.transport is not None and self.other.transport.can_write_eof():
            self.other.transport.write_eof()
            return True         # half-close: the other way may still have bytes
        return False

    def pause_writing(self):
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self):
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def connection_lost(self, exc):
        self.closed = True
        self.pipes.discard(self)
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()

    def close(self):
        if self.transport is not None:
            self.transport.close()


class _ClientSide(_Side):
    def __init__(self, proxy, port, what):
        super().__init__(proxy.pipes)
        self.proxy = proxy
        self.port = port
        self.what = what

    def connection_made(self, transport):
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        if self.proxy.sockopts is not None and self.what in PROTOCOLS and sock is not None and peer:
            try:
                self.proxy.sockopts.apply(sock, peer[0])
            except OSError:
                pass        # the client is already gone: the pipe ends with it
        asyncio.ensure_future(self._connect())

    async def _connect(self):
        host = await self.proxy.target(WAIT_FOR_LEADER)
        if host is None or self.closed:
            self.close()
            return
        leader = _Side(self.pipes)
        leader.other = self
        try:
            await asyncio.wait_for(asyncio.get_running_loop().create_connection(
                lambda: leader, host, self.port, local_addr=self.proxy.local_addr(self.transport)), CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as exc:
            log.info("proxy to the leader at %s:%d: %s", host, self.port, exc)
            self.close()
            return
        if self.closed:
            leader.close()
            return
        sock = leader.transport.get_extra_info("socket") if leader.transport is not None else None
        if sock is not None and self.proxy.sockopts is not None:
            try:
                sockopts.set_keepalive(sock, self.proxy.sockopts.keepalive)
            except OSError:
                pass
        if leader.closed:
            # the leader hung up before the pipe was joined (it is stopping):
            # nothing can be written to it, and the client goes too
            self.close()
            return
        self.other = leader
        if self.proxy.proxy_header and self.what in HEADER_PROTOCOLS:
            peer, local = self.transport.get_extra_info("peername"), self.transport.get_extra_info("sockname")
            if isinstance(peer, tuple) and isinstance(local, tuple):
                leader.transport.write(proxy_protocol.v1_header(peer, local))
        for data in self.early:
            leader.transport.write(data)
        self.early = []
        self.transport.resume_reading()


class Proxies:
    def __init__(self, listeners, options=None, proxy_header=True):
        """listeners: [(bind address, port, what)]; options: the
        lavinmq.sockopts.SocketOptions of the broker's listeners;
        proxy_header: AMQP and MQTT pipes start with a PROXY header."""
        self.listeners = listeners
        self.sockopts = options
        self.proxy_header = proxy_header
        self.servers = []
        self.pipes = set()
        self.host = None
        self._changed = asyncio.Event()

    async def start(self):
        from lavinmq.listener import ListenError, bind_sockets
        loop = asyncio.get_running_loop()
        opened = []
        for bind, port, what in self.listeners:
            try:
                # the sockets the process took at start (lavinmq/ports.py), or new ones
                socks = bind_sockets(bind, port, f"{what} port", "proxied to the leader")
            except ListenError as exc:
                log.error("cannot proxy %s to the leader: %s", what, exc)
                continue
            for sock in socks:
                server = await loop.create_server(lambda port=port, what=what: _ClientSide(self, port, what),
                                                  sock=sock)
                self.servers.append((bind, port, server))
            opened.append(f"{what} ({bind}:{port})")
        if opened:      # the ones that opened only: one that did not was named above
            log.info("proxying %s to the leader", ", ".join(opened))

    def local_addr(self, client_transport):
        """Connect from the address the client reached: on 127.0.0.x the
        kernel would pick 127.0.0.1, and the leader could not tell which
        follower a connection came through."""
        sock = client_transport.get_extra_info("sockname")
        return (sock[0], 0) if sock else None

    async def target(self, wait):
        """The leader's host, waiting up to `wait` s for there to be one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while self.host is None:
            left = deadline - loop.time()
            if left <= 0:
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                return None
        return self.host

    def retarget(self, host):
        """The leader changed (None: there is none): pipes to the old one go."""
        if host == self.host:
            return
        self.host = host
        for side in list(self.pipes):
            side.close()
        self._changed.set()

    async def close(self, hand_over=False):
        """Stop proxying. hand_over (this node was elected): each listening
        socket stays open, a duplicate of it left in lavinmq.listener.HELD
        for the broker's listener on that address and port, so the port
        never refuses a client while the broker starts; what connects
        meanwhile waits in the kernel's backlog and is served by it."""
        servers, self.servers = self.servers, []
        if hand_over:
            from lavinmq import listener
            for bind, port, server in servers:
                kept = [socket.socket(fileno=os.dup(s.fileno())) for s in server.sockets]
                listener.HELD.setdefault((bind, port), []).extend(kept)
        for _, _, server in servers:
            server.close()
        for side in list(self.pipes):
            side.close()
        self._changed.set()
        for _, _, server in servers:
            await server.wait_closed()

"""Listening sockets that no client can use to stop the broker.

Every TCP listener (AMQP, AMQPS, HTTP, HTTPS, metrics) accepts through
`Listener`, which

- counts open connections in one `ConnectionGuard`: a total cap and a cap
  per source address, both below the open-file limit, so that sockets can
  never take the descriptors the message store needs (a refused socket is
  closed at once, before any protocol object exists);
- on EMFILE/ENFILE (descriptors exhausted anyway, e.g. by other files)
  stops accepting for a moment and tries again, instead of letting the
  event loop close the listener for good (uvloop does that);
- turns "address already in use" into one line naming the setting;
- serves UNIX sockets too (`bind_unix`), and reads a PROXY protocol header
  (lavinmq.proxy_protocol) where one is allowed, before the per-address
  cap judges the client it names.

The accept loop is Python, once per connection, as asyncio's own is.
"""
import asyncio
import errno
import itertools
import logging
import os
import resource
import socket
import struct
import time

log = logging.getLogger("lavinmq.listener")

ACCEPT_RETRY_DELAY = 0.5     # seconds without accepting after EMFILE/ENFILE
ACCEPTS_PER_WAKEUP = 64      # then let the loop serve the clients it has
OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class ListenError(Exception):
    """A listener could not be opened: the message names the setting."""


def fd_limit():
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def map_limit():
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65530


def default_max_connections(limit=None, maps=None):
    """Sockets may use the open-file limit less a reserve for segment files,
    ack files, definitions and the like: a quarter of it, at least 256.
    Each connection's read buffer is a memory map of its own, so at most
    half of vm.max_map_count too (the other half is for segments)."""
    limit = fd_limit() if limit is None else limit
    if limit == resource.RLIM_INFINITY or limit <= 0:
        limit = 1 << 20
    maps = map_limit() if maps is None else maps
    return max(16, min(limit - max(256, limit // 4), maps // 2))


class RateLimitedLog:
    """At most one line per `interval` seconds; the lines left out are
    counted and reported with the next one."""

    def __init__(self, logger, level=logging.WARNING, interval=1.0):
        self.logger = logger
        self.level = level
        self.interval = interval
        self.last = 0.0
        self.suppressed = 0

    def __call__(self, msg, *args):
        now = time.monotonic()
        if now - self.last < self.interval:
            self.suppressed += 1
            return
        self.last = now
        if self.suppressed:
            msg += " (%d similar lines suppressed)"
            args = args + (self.suppressed,)
            self.suppressed = 0
        self.logger.log(self.level, msg, *args)


class Ticket:
    """One admitted connection; release() is idempotent."""
    __slots__ = ("guard", "address", "released")

    def __init__(self, guard, address):
        self.guard = guard
        self.address = address
        self.released = False

    def release(self):
        if not self.released:
            self.released = True
            self.guard._release(self.address)


class ConnectionGuard:
    """Open sockets of all TCP listeners: a total cap and a per-address cap."""

    def __init__(self, max_total=0, max_per_address=0):
        self.max_total = max_total or default_max_connections()
        self.max_per_address = max_per_address or max(1, self.max_total // 2)
        self.total = 0
        self.by_address = {}
        self.refused = 0
        self._log = RateLimitedLog(log)

    def admit(self, address):
        """-> Ticket, or None when a cap is reached (the caller closes the
        socket). address None: the total cap only, for now (the client's
        address comes later: `assign`)."""
        n = self.by_address.get(address, 0) if address is not None else 0
        if self.total >= self.max_total:
            self.refused += 1
            self._log("connection from %s refused: %d connections open, the limit (max_connections)",
                      address, self.total)
            return None
        if n >= self.max_per_address:
            self.refused += 1
            self._log("connection from %s refused: %d connections open from that address, the limit "
                      "(max_connections_per_address)", address, n)
            return None
        self.total += 1
        if address is not None:
            self.by_address[address] = n + 1
        return Ticket(self, address)

    def assign(self, ticket, address):
        """A ticket admitted without an address gets one (the client a PROXY
        header names): -> False, and the ticket given back, when that address
        is at its cap."""
        n = self.by_address.get(address, 0)
        if n >= self.max_per_address:
            self.refused += 1
            self._log("connection from %s refused: %d connections open from that address, the limit "
                      "(max_connections_per_address)", address, n)
            ticket.release()
            return False
        self.by_address[address] = n + 1
        ticket.address = address
        return True

    def _release(self, address):
        self.total -= 1
        if address is None:
            return
        n = self.by_address.get(address, 0) - 1
        if n > 0:
            self.by_address[address] = n
        else:
            self.by_address.pop(address, None)


# sockets bound when the process started (lavinmq.ports), not listening
# yet: (host, port) as configured -> [socket]. A listener opening on one of
# them takes it, as with systemd's socket activation.
HELD = {}


def bind_sockets(host, port, what, setting, listen=True):
    """Listening sockets for host:port (every address host resolves to):
    those held for it since start, or new ones. `what` ("AMQP port") and
    `setting` ("--amqp-port / [amqp] port") name it in the error.
    listen=False: bound only (lavinmq.ports holds them)."""
    held = HELD.pop((host, port), None)
    if held is not None:
        return listen_on(held, port, what, setting) if listen else held
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"{what} {port}: cannot resolve bind address {host!r}: {exc.strerror}") from None
    socks = []
    seen = set()
    try:
        for family, kind, proto, _, addr in infos:
            if addr in seen:
                continue
            seen.add(addr)
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(addr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise ListenError(f"{what} {port} ({setting}) is in use") from None
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise ListenError(f"{what} {port} ({setting}): address {addr[0]} is not on this "
                                      f"machine") from None
                raise ListenError(f"{what} {port} ({setting}) cannot be opened on {addr[0]}: "
                                  f"{exc.strerror}") from None
    except BaseException:
        for s in socks:
            s.close()
        raise
    return listen_on(socks, port, what, setting) if listen else socks


def listen_on(socks, port, what, setting):
    """Bound sockets start listening. Two sockets with SO_REUSEADDR may bind
    one port; the second to listen fails, named as a bind would be."""
    try:
        for sock in socks:
            sock.listen(1024)
            sock.setblocking(False)
    except OSError as exc:
        for s in socks:
            s.close()
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"{what} {port} ({setting}) is in use") from None
        raise ListenError(f"{what} {port} ({setting}) cannot be opened: {exc.strerror}") from None
    return socks


def bind_unix(path, what, setting, mode=0o666):
    """A listening UNIX socket at path (LavinMQ's unix_path: open to every
    local user, who still has to log in). A stale socket file is replaced;
    one that a live process answers on is an error."""
    if os.path.exists(path):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1)
            probe.connect(path)
        except OSError:
            pass
        else:
            raise ListenError(f"{what} {path} ({setting}) is in use by another process")
        finally:
            probe.close()
        try:
            os.unlink(path)
        except OSError as exc:
            raise ListenError(f"{what} {path} ({setting}): cannot replace it: {exc.strerror}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, mode)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ListenError(f"{what} {path} ({setting}) cannot be opened: {exc.strerror}") from None
    return [sock]


_unix_clients = itertools.count(1)


def client_peer(protocol, transport):
    """(host, port) of the client a protocol object serves: the address a
    PROXY header named, else a local (UNIX socket) client numbered to keep
    the names of connections apart, else the socket's peer."""
    peer = getattr(protocol, "client_address", None)
    if peer is None and getattr(protocol, "local_socket", False):
        peer = ("unix", next(_unix_clients))
    return peer or transport.get_extra_info("peername") or ("?", 0)


def from_loopback(protocol, address):
    """Loopback-only users may log in from loopback, or over a UNIX socket
    (LavinMQ's rule), judged by a PROXY header's address if there is one."""
    from lavinmq.auth.users import is_loopback_address
    return (getattr(protocol, "local_socket", False) and getattr(protocol, "client_address", None) is None) \
        or is_loopback_address(address)


class Listener:
    """Accepts on the given sockets and hands each admitted connection to
    `protocol_factory()` (through the loop's connect_accepted_socket, with
    TLS when ssl_context is set). The protocol gets `ticket` and must call
    `ticket.release()` in connection_lost; it also gets `client_address`
    ((host, port) that a PROXY header named, else None) and `local_socket`
    (True on a UNIX socket: a local client, as loopback).

    proxy: None (no PROXY headers), or the trusted source networks (an
    empty list trusts everyone). An AMQP UNIX socket always accepts a
    header (LavinMQ's), unless unix_proxy is False (HTTP)."""

    def __init__(self, socks, protocol_factory, guard, name, ssl_context=None, handshake_timeout=10.0,
                 proxy=None, unix_proxy=True):
        self.socks = socks
        self.factory = protocol_factory
        self.guard = guard
        self.name = name
        self.ssl = ssl_context
        self.handshake_timeout = handshake_timeout
        self.unix = bool(socks) and _is_unix(socks[0])
        self.proxy = proxy if proxy is not None or not (self.unix and unix_proxy) else []
        self.loop = None
        self.paused = False
        self.closed = False
        self.tasks = set()
        self._log = RateLimitedLog(log, logging.ERROR)

    @property
    def addresses(self):
        return [s.getsockname()[:2] for s in self.socks if not _is_unix(s)]

    @property
    def paths(self):
        return [s.getsockname() for s in self.socks if _is_unix(s)]

    def start(self):
        self.loop = asyncio.get_running_loop()
        for sock in self.socks:
            self.loop.add_reader(sock.fileno(), self._accept, sock)
        for host, port in self.addresses:
            log.info("%s listening on %s:%d%s", self.name, host, port,
                     " (PROXY protocol)" if self.proxy is not None else "")
        for path in self.paths:
            log.info("%s listening on %s", self.name, path)

    def _accept(self, sock):
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                conn, addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in OUT_OF_FDS:
                    self._pause(exc)
                    return
                self._log("%s: accept failed: %s", self.name, exc)
                return
            host = addr[0] if isinstance(addr, tuple) else ""
            # behind a balancer (or a local socket) the client is known only
            # once its PROXY header is read: its address counts from then
            ticket = self.guard.admit(None if self.proxy is not None else host)
            if ticket is None:
                _close_now(conn)
                continue
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self.loop.create_task(self._connect(conn, ticket, host))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _client(self, conn, ticket, host):
        """The client a PROXY header names (None: the socket's peer); False
        when the connection is to be dropped (its ticket given back)."""
        from lavinmq import proxy_protocol as pp
        try:
            client = await pp.read_header(self.loop, conn, self.handshake_timeout)
        except (pp.ProxyError, TimeoutError, OSError) as exc:
            log.info("%s: connection from %s dropped: %s", self.name, host or "a local socket",
                     exc or type(exc).__name__)
            ticket.release()
            return False
        except asyncio.CancelledError:      # the listener closed meanwhile
            ticket.release()
            raise
        except Exception:       # nothing a client sends may leave a task failing
            log.exception("%s: reading the PROXY header of a connection from %s failed", self.name, host)
            ticket.release()
            return False
        if client is not None and not self.unix and not pp.trusted(self.proxy, host):
            self._log("%s: PROXY header from untrusted source %s ignored (proxy_protocol_trusted_sources)",
                      self.name, host)
            client = None
        if not self.unix or client is not None:
            if not self.guard.assign(ticket, client[0] if client is not None else host):
                return False
        return client

    async def _connect(self, conn, ticket, host=""):
        client = None
        if self.proxy is not None:
            try:
                client = await self._client(conn, ticket, host)
            except asyncio.CancelledError:
                _close_now(conn)
                raise
            if client is False:
                _close_now(conn)
                return

        def factory():
            protocol = self.factory()
            protocol.ticket = ticket
            protocol.client_address = client
            protocol.local_socket = self.unix and client is None
            return protocol
        try:
            if self.ssl is None:
                await self.loop.connect_accepted_socket(factory, conn)
            else:
                await self.loop.connect_accepted_socket(factory, conn, ssl=self.ssl,
                                                        ssl_handshake_timeout=self.handshake_timeout)
        except Exception as exc:
            # TLS handshake failed or timed out, or the peer left: the
            # protocol never started, so its ticket is ours to give back
            ticket.release()
            try:
                conn.close()
            except OSError:
                pass
            log.debug("%s: connection not established: %s", self.name, exc)

    def _pause(self, exc):
        """Out of descriptors: stop accepting for a moment (pending clients
        wait in the backlog) and try again; never close the listener."""
        if self.paused or self.closed:
            return
        self.paused = True
        self._log("%s: %s; not accepting for %.1f s", self.name, exc.strerror, ACCEPT_RETRY_DELAY)
        for sock in self.socks:
            self.loop.remove_reader(sock.fileno())
        self.loop.call_later(ACCEPT_RETRY_DELAY, self._resume)

    def _resume(self):
        if self.closed or not self.paused:
            return
        self.paused = False
        for sock in self.socks:
            self.loop.add_reader(sock.fileno(), self._accept, sock)

    def close(self):
        if self.closed:
            return
        self.closed = True
        for sock in self.socks:
            if self.loop is not None and not self.paused:
                self.loop.remove_reader(sock.fileno())
            sock.close()
        for task in list(self.tasks):
            task.cancel()


def _is_unix(sock):
    return getattr(sock, "family", None) == socket.AF_UNIX


def _close_now(conn):
    # RST instead of FIN: nothing of the refused socket stays in TIME_WAIT here
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    conn.close()

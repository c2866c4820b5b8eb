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


# how far a socket that has not logged in got: the guard closes those that
# got least far first (a flood of idle sockets cannot push out a client in
# the middle of its handshake)
SILENT, TALKING, LOGGING_IN = 0, 1, 2
PEEK_SILENT = 16        # silent sockets looked at for unread bytes before one is closed


class Ticket:
    """One admitted socket; release() is idempotent. `close` (set by whoever
    owns the socket) ends it when the guard needs its slot back."""
    __slots__ = ("guard", "key", "released", "logged_in", "stage", "close", "sock")

    def __init__(self, guard, key, sock=None):
        self.guard = guard
        self.key = key
        self.released = False
        self.logged_in = False
        self.stage = SILENT
        self.close = None
        self.sock = sock            # to see whether a silent one has sent what we did not read yet

    def has_unread_bytes(self):
        if self.sock is None:
            return False
        try:
            return bool(self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except OSError:
            return False

    @property
    def address(self):
        return self.key[1]

    def release(self):
        if not self.released:
            self.released = True
            self.guard._release(self)

    def progress(self, stage):
        """The client got as far as `stage` (TALKING, LOGGING_IN)."""
        if not self.released and not self.logged_in and stage > self.stage:
            self.guard._unwait(self)
            self.stage = stage
            self.guard._wait(self)

    def login(self):
        """The socket's client logged in: it is no longer one the guard may
        close to make room."""
        if not self.released and not self.logged_in:
            self.guard._unwait(self)
            self.logged_in = True


class ConnectionGuard:
    """Open sockets of all TCP listeners: a total cap, a cap per source
    address and kind of listener (AMQP or HTTP: 7,500 AMQP clients on
    127.0.0.1 must not lock the operator out of the management API there),
    and caps on sockets that have not logged in yet.

    A socket that has not logged in is what a flood is made of (a flood of
    3,000 had a legitimate client refused 41 times in 49), so those are
    capped apart (a quarter of the total, half of that per address and
    kind) and, when a newcomer needs room, one of them is closed instead of
    the newcomer being refused: of those that got least far (silent, then
    talking, then logging in), the oldest. Sockets that have logged in are
    never closed for room."""

    def __init__(self, max_total=0, max_per_address=0):
        self.max_total = max_total or default_max_connections()
        self.max_per_address = max_per_address or max(1, self.max_total // 2)
        self.max_waiting = max(16, self.max_total // 4)
        self.max_waiting_per_address = max(8, self.max_waiting // 2)
        self.total = 0
        self.by_key = {}            # (kind, address) -> sockets open
        self.waiting = [{}, {}, {}]     # per stage: {ticket: None} not logged in, oldest first
        self.waiting_count = 0
        self.waiting_by_key = {}    # (kind, address) -> [{ticket: None} per stage, count]
        self.refused = 0
        self.dropped = 0            # closed before login to make room
        self._log = RateLimitedLog(log)

    def admit(self, address, kind="amqp", sock=None):
        """-> Ticket, or None when a cap is reached (the caller closes the socket)."""
        key = (kind, address)
        if self.total >= self.max_total and not self._drop(self.waiting, address):
            self.refused += 1
            self._log("connection from %s refused: %d connections open, the limit (max_connections)",
                      address, self.total)
            return None
        mine = self.waiting_by_key.get(key)
        if self.by_key.get(key, 0) >= self.max_per_address and not (mine and self._drop(mine[0], address)):
            self.refused += 1
            self._log("connection from %s refused: %d connections open from that address, the limit "
                      "(max_connections_per_address)", address, self.by_key[key])
            return None
        if self.waiting_count >= self.max_waiting:
            self._drop(self.waiting, address)
        mine = self.waiting_by_key.get(key)
        if mine is not None and mine[1] >= self.max_waiting_per_address:
            self._drop(mine[0], address)
        ticket = Ticket(self, key, sock)
        self.total += 1
        self.by_key[key] = self.by_key.get(key, 0) + 1
        self._wait(ticket)
        return ticket

    def _drop(self, stages, newcomer):
        """Close the socket that got least far, oldest first, of `stages`
        (not logged in) -> whether there was one."""
        # a "silent" socket may only be one whose bytes the loop has not
        # read yet (a client that sent its protocol header, on a busy
        # broker): a look at a few of the oldest moves those on
        for _ in range(PEEK_SILENT):
            silent = stages[SILENT]
            if not silent:
                break
            ticket = next(iter(silent))
            if not ticket.has_unread_bytes():
                break
            ticket.progress(TALKING)
        for pool in stages:
            if pool:
                ticket = next(iter(pool))
                break
        else:
            return False
        close = ticket.close
        ticket.release()
        if close is not None:
            close()
        self.dropped += 1
        self._log("connection from %s closed before login (%s) to make room for one from %s (sockets not "
                  "logged in are capped, those that got least far go first)", ticket.address,
                  ("silent", "talking", "logging in")[ticket.stage], newcomer)
        return True

    def assign(self, ticket, address):
        """The client a PROXY header names takes the place of the balancer
        that connected (the ticket's address until now) under the caps per
        address: -> False, and the ticket given back, when that address is
        at its cap."""
        key = (ticket.key[0], address)
        if ticket.released or key == ticket.key:
            return not ticket.released
        n = self.by_key.get(key, 0)
        if n >= self.max_per_address:
            self.refused += 1
            self._log("connection from %s refused: %d connections open from that address, the limit "
                      "(max_connections_per_address)", address, n)
            ticket.release()
            return False
        waiting = not ticket.logged_in
        if waiting:
            self._unwait(ticket)
        old = self.by_key.get(ticket.key, 0) - 1
        if old > 0:
            self.by_key[ticket.key] = old
        else:
            self.by_key.pop(ticket.key, None)
        ticket.key = key
        self.by_key[key] = n + 1
        if waiting:
            self._wait(ticket)
        return True

    def _release(self, ticket):
        key = ticket.key
        self.total -= 1
        n = self.by_key.get(key, 0) - 1
        if n > 0:
            self.by_key[key] = n
        else:
            self.by_key.pop(key, None)
        if not ticket.logged_in:
            self._unwait(ticket)

    def _wait(self, ticket):
        self.waiting[ticket.stage][ticket] = None
        self.waiting_count += 1
        mine = self.waiting_by_key.get(ticket.key)
        if mine is None:
            mine = self.waiting_by_key[ticket.key] = [[{}, {}, {}], 0]
        mine[0][ticket.stage][ticket] = None
        mine[1] += 1

    def _unwait(self, ticket):
        if self.waiting[ticket.stage].pop(ticket, 0) is None:
            self.waiting_count -= 1
            mine = self.waiting_by_key[ticket.key]
            del mine[0][ticket.stage][ticket]
            mine[1] -= 1
            if not mine[1]:
                del self.waiting_by_key[ticket.key]


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
    header (LavinMQ's), unless unix_proxy is False (HTTP).

    sockopts: the TCP options ([main] tcp_*) set on each accepted TCP
    socket (the AMQP and MQTT listeners); None sets TCP_NODELAY only.

    followers: on a cluster's leader, host -> whether a follower's
    replication link comes from there; a PROXY header is then read on every
    connection and believed from those hosts (a follower names the client it
    pipes, lavinmq/clustering/proxy.py). Read from everyone, so that a pipe
    made before its follower's link is up still works (its header ignored)."""

    def __init__(self, socks, protocol_factory, guard, name, ssl_context=None, handshake_timeout=10.0,
                 proxy=None, unix_proxy=True, sockopts=None, followers=None):
        self.socks = socks
        # UNIX socket paths, named while the sockets are open: a drain closes
        # them before the stop removes their files
        self._paths = [sk.getsockname() for sk in socks if _is_unix(sk)]
        self.followers = followers
        self.sockopts = sockopts    # lavinmq.sockopts.SocketOptions for TCP clients; None: TCP_NODELAY only
        self.factory = protocol_factory
        self.guard = guard
        self.name = name
        # the guard counts each protocol's sockets from an address apart
        self.kind = {"AMQPS": "amqp", "MQTTS": "mqtt", "HTTPS": "http"}.get(name, name.lower())
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
        return list(self._paths)

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
            # behind a balancer the client's own address takes the place of
            # the balancer's once its PROXY header is read (guard.assign)
            ticket = self.guard.admit(host, self.kind, conn)
            if ticket is None:
                _close_now(conn)
                continue
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    if self.sockopts is None:       # HTTP: replies are whole, Nagle would only delay them
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    else:
                        self.sockopts.apply(conn, host)
                except OSError as exc:      # the peer is already gone (reset)
                    log.debug("%s: connection from %s dropped: %s", self.name, host, exc)
                    ticket.release()
                    _close_now(conn)
                    continue
            task = self.loop.create_task(self._connect(conn, ticket, host))
            # until the protocol has the socket (the task may not even have
            # started: a cancelled one never runs its own cleanup)
            ticket.close = lambda task=task, conn=conn: (task.cancel(), _close_now(conn))
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
        if client is not None and not self.unix and not self._trusted(host):
            self._log("%s: PROXY header from untrusted source %s ignored (proxy_protocol_trusted_sources)",
                      self.name, host)
            client = None
        if client is not None and not self.guard.assign(ticket, client[0]):
            return False
        return client

    def _trusted(self, host):
        from lavinmq import proxy_protocol as pp
        if self.followers is not None and self.followers(host):
            return True
        return self.proxy is not None and pp.trusted(self.proxy, host)

    async def _connect(self, conn, ticket, host=""):
        client = None
        if self.proxy is not None or self.followers is not None:
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
        except BaseException as exc:
            # TLS handshake failed or timed out, the peer left, or the guard
            # needed the slot (cancelled): the protocol never started, so
            # its ticket is ours to give back
            ticket.release()
            try:
                conn.close()
            except OSError:
                pass
            if isinstance(exc, asyncio.CancelledError):
                raise
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

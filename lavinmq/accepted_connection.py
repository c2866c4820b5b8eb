"""What a client connection a listener accepted (AMQP or MQTT, over TCP,
TLS, a UNIX socket or WebSocket) does whatever its protocol: when its
socket opens, its name and addresses, its slot under the connection caps
(the listener's Ticket), the server's list and the churn counters; when
the socket goes, the timers that must not outlive it (a token's expiry, a
login answered late), the lists, its read buffer and its slot; in between,
the login throttle's back-off, EOF and a full write buffer.

A mixin put before the protocol's Cython core in the bases. It runs once
per connection or login, never per frame, and names no field the core
declares: a class attribute here would hide the core's field."""
import socket
import time

from lavinmq import churn, process
from lavinmq.listener import client_peer, from_loopback


class AcceptedConnection:
    client_address = None       # set by the listener: (host, port) from a PROXY header
    local_socket = False        # set by the listener: a UNIX socket client (counts as loopback)
    ticket = None               # set by the listener: lavinmq.listener.Ticket, our slot under the caps
    peer = ("?", 0)
    local = ("?", 0)
    name = "?"
    tls = False
    token_timer = None          # an OAuth token's expiry
    login_pending = None        # the timer of a login answered late (lavinmq.auth.throttle)

    def socket_opened(self, transport):
        """The first thing connection_made does."""
        self.transport = transport
        local = transport.get_extra_info("sockname") or ("?", 0)
        if isinstance(local, str):      # a UNIX socket: its path
            local = (local, 0)
        # the listener's word on who the client is (a PROXY header's address,
        # a local client), else the socket's peer
        self.peer = peer = client_peer(self, transport)
        self.local = local
        self.connected_at = int(time.time() * 1000)
        self.accepted = time.monotonic()    # handshake_timeout counts from here
        self.tls = transport.get_extra_info("ssl_object") is not None
        self.name = f"{peer[0]}:{peer[1]} -> {local[0]}:{local[1]}"
        if self.ticket is not None:
            self.ticket.close = transport.abort     # the guard may need the slot before login
        self.server.connections.add(self)
        churn.count("connection_created")

    def socket_lost(self):
        """The first thing connection_lost does: no timer fires on a connection that is gone."""
        churn.count("connection_closed")
        if self.token_timer is not None:
            self.token_timer.cancel()
            self.token_timer = None
        if self.login_pending is not None:
            self.login_pending.cancel()
            self.login_pending = None

    def socket_released(self):
        """The last thing connection_lost does, once the protocol let go of
        its channels or session."""
        self.server.connections.discard(self)
        if self.vhost is not None:
            self.vhost.connections.discard(self)
        self.release_buffer()
        process.released()
        if self.ticket is not None:
            self.ticket.release()

    def eof_received(self):
        return False        # the transport closes: no half-open sockets

    def pause_writing(self):
        self.state.paused = True    # deliveries wait for resume_writing (the protocol's own)

    # -- login ------------------------------------------------------------------------

    @property
    def peer_address(self):
        """The client's address as a string; "" for a UNIX socket's client."""
        return self.peer[0] if isinstance(self.peer[0], str) else ""

    def from_loopback(self, address):
        return from_loopback(self, address)

    def login_throttle_key(self, username):
        """(address, user) the login throttle counts failures of; None when there is none."""
        throttle = getattr(self.server, "login_throttle", None)
        if throttle is None or username is None:
            return None
        return throttle.key(self.peer_address, username, self.server.users.get(username) is not None)

    def login_later(self, key, callback, *args):
        """-> whether the login waits in its address's line (backing off,
        lavinmq.auth.throttle): then callback(*args) checks it when its turn
        comes, whatever the password, so a guesser learns slowly and a user
        who knows the password still gets in. Nothing more is read meanwhile."""
        if key is None:
            return False
        waiting = self.server.login_throttle.admit(*key, callback, *args, alive=self.peer_still_there)
        if waiting is None:
            return False
        self.block_reading()
        self.login_pending = waiting
        return True

    def peer_still_there(self):
        """A login waiting in the line does not read its socket: a look at
        it (no byte taken) tells whether the client went meanwhile; if so,
        the socket is closed and no check is spent on it."""
        transport = self.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None:
            return transport is not None
        peek = socket.socket(fileno=sock.fileno())      # the same descriptor, not a copy
        try:
            gone = peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            gone = False
        except OSError:
            gone = True
        finally:
            peek.detach()
        if gone:
            transport.abort()
        return not gone

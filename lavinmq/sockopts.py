"""TCP options of accepted client sockets, LavinMQ's [main] keys:

    tcp_nodelay            TCP_NODELAY (here on unless set to false, see below)
    tcp_keepalive          SO_KEEPALIVE with TCP_KEEPIDLE:TCP_KEEPINTVL:TCP_KEEPCNT,
                           "idle:interval:count" (default 60:10:3; false turns it off)
    tcp_recv_buffer_size   SO_RCVBUF (default: the kernel's autotuning)
    tcp_send_buffer_size   SO_SNDBUF

As LavinMQ's protocol listeners, they apply to the AMQP, AMQPS, MQTT and
MQTTS ports (not to HTTP, where LavinMQ sets none), and keepalive only to
clients that are not on loopback: a loopback peer cannot vanish behind a
dead link. Set once per accepted socket, by lavinmq.listener, before the
protocol sees it; nothing per message.

tcp_nodelay: LavinMQ leaves Nagle's algorithm on unless it is set. Here
every read batch's replies and deliveries already leave in one write, so
Nagle could only hold back the next batch behind a delayed ACK (up to 40
ms on Linux); the default stays on. `tcp_nodelay = false` turns it off.
"""
import dataclasses
import socket

from lavinmq import booleans
from lavinmq.errors import ConfigError

KEEPALIVE_DEFAULT = (60, 10, 3)     # LavinMQ's: idle s, interval s, probes
# the kernel's bounds (MAX_TCP_KEEPIDLE, MAX_TCP_KEEPINTVL, MAX_TCP_KEEPCNT)
KEEPALIVE_MAX = (32767, 32767, 127)
KEEPALIVE_NAMES = ("idle", "interval", "count")


def parse_keepalive(raw, where):
    """LavinMQ's tcp_keepalive value -> (idle, interval, count), or None
    when it turns keepalive off. Parts left out take LavinMQ's defaults
    ("120" is 120:10:3; "true" is 60:10:3); a part that is not a whole
    number in the kernel's range stops the start (LavinMQ would silently
    use its default for it)."""
    if isinstance(raw, tuple) or raw is None:
        return raw
    text = raw.strip().lower()
    if text in booleans.FALSE_WORDS:
        return None
    if text in booleans.TRUE_WORDS or text == "":
        return KEEPALIVE_DEFAULT
    parts = text.split(":")
    if len(parts) > 3:
        raise ConfigError(f"{where}: {raw.strip()!r} is not idle:interval:count (e.g. 60:10:3), or false")
    out = list(KEEPALIVE_DEFAULT)
    for i, part in enumerate(parts):
        part = part.strip()
        if part == "":
            continue
        try:
            n = int(part)
        except ValueError:
            raise ConfigError(f"{where}: {raw.strip()!r}: {KEEPALIVE_NAMES[i]} {part!r} is not an integer "
                              f"(idle:interval:count, e.g. 60:10:3, or false)") from None
        if not 1 <= n <= KEEPALIVE_MAX[i]:
            raise ConfigError(f"{where}: {raw.strip()!r}: {KEEPALIVE_NAMES[i]} {n} is out of range "
                              f"(1..{KEEPALIVE_MAX[i]})")
        out[i] = n
    return tuple(out)


def format_keepalive(value):
    return "false" if value is None else ":".join(str(n) for n in value)


@dataclasses.dataclass(frozen=True)
class SocketOptions:
    nodelay: bool = True
    keepalive: tuple | None = KEEPALIVE_DEFAULT
    recv_buffer: int | None = None
    send_buffer: int | None = None

    @classmethod
    def from_config(cls, config):
        return cls(nodelay=config.tcp_nodelay, keepalive=config.tcp_keepalive,
                   recv_buffer=config.tcp_recv_buffer_size, send_buffer=config.tcp_send_buffer_size)

    def apply(self, sock, peer_host):
        """On a freshly accepted TCP socket; peer_host is its peer's address."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if self.nodelay else 0)
        if not is_loopback(peer_host):
            set_keepalive(sock, self.keepalive)
        # the kernel doubles these (bookkeeping) and caps them at
        # net.core.rmem_max / wmem_max, as for LavinMQ
        if self.recv_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.recv_buffer)
        if self.send_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)


def set_keepalive(sock, keepalive):
    """SO_KEEPALIVE with (idle, interval, count); None leaves it off. Also
    the cluster's links, on loopback too (as LavinMQ's): a leader or
    follower whose machine vanished is found by the probes, not by a read
    that waits forever."""
    if keepalive is None:
        return
    idle, interval, count = keepalive
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)


def is_loopback(host):
    from lavinmq.auth.users import is_loopback_address
    return is_loopback_address(host)

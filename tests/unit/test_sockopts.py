"""lavinmq.sockopts on real sockets: what each [main] tcp_* setting puts
on an accepted socket, read back with getsockopt (the integration test
reads the rest from the server's side with ss)."""
import socket

import pytest

from lavinmq.sockopts import SocketOptions


@pytest.fixture
def accepted():
    """A freshly accepted TCP socket over loopback, as a listener has one."""
    srv = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    yield conn
    for s in (conn, cli, srv):
        s.close()


def opt(sock, level, name):
    return sock.getsockopt(level, name)


def test_defaults_nodelay_on_keepalive_lavinmqs(accepted):
    SocketOptions().apply(accepted, "192.0.2.9")        # a client that is not on loopback
    assert opt(accepted, socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    assert opt(accepted, socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert (opt(accepted, socket.IPPROTO_TCP, socket.TCP_KEEPIDLE), opt(accepted, socket.IPPROTO_TCP,
            socket.TCP_KEEPINTVL), opt(accepted, socket.IPPROTO_TCP, socket.TCP_KEEPCNT)) == (60, 10, 3)


def test_settings_are_applied(accepted):
    SocketOptions(nodelay=False, keepalive=(25, 7, 4), recv_buffer=65536, send_buffer=98304).apply(
        accepted, "10.1.2.3")
    assert opt(accepted, socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
    assert (opt(accepted, socket.IPPROTO_TCP, socket.TCP_KEEPIDLE), opt(accepted, socket.IPPROTO_TCP,
            socket.TCP_KEEPINTVL), opt(accepted, socket.IPPROTO_TCP, socket.TCP_KEEPCNT)) == (25, 7, 4)
    # the kernel doubles what it is given
    assert opt(accepted, socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 * 65536
    assert opt(accepted, socket.SOL_SOCKET, socket.SO_SNDBUF) == 2 * 98304


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_no_keepalive_for_loopback_clients(accepted, peer):
    SocketOptions(keepalive=(25, 7, 4)).apply(accepted, peer)
    assert opt(accepted, socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0


def test_keepalive_off(accepted):
    SocketOptions(keepalive=None).apply(accepted, "192.0.2.9")
    assert opt(accepted, socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0

"""Issue 14 item 4: a client that never logs in cannot exhaust or stop
the broker. Each test is the attack; on the code before the fix the
sockets stayed open forever and 20,000 of them stopped the broker."""
import resource
import socket
import time

import pika
import pytest

from tests.security.conftest import call


def _closed_within(sock, seconds):
    """True once the broker has closed (FIN or RST) this idle socket."""
    sock.settimeout(seconds)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_sockets_that_never_log_in_are_closed(make_broker):
    b = make_broker("[amqp]\nhandshake_timeout = 1\n")
    idle = [socket.create_connection((b.host, b.port)) for _ in range(20)]
    header_only = [socket.create_connection((b.host, b.port)) for _ in range(5)]
    for s in header_only:
        s.sendall(b"AMQP\x00\x00\x09\x01")          # then stop in the middle of the handshake
    # a client that logs in in time is not affected
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    started = time.monotonic()
    for s in idle + header_only:
        assert _closed_within(s, 6), "a socket that never logged in was kept open"
        s.close()
    assert time.monotonic() - started < 8
    assert conn.is_open
    conn.channel().queue_declare("", exclusive=True)
    conn.close()


def _open_many(host, port, n, source="127.0.0.1"):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        try:
            s.connect((host, port))
        except (ConnectionResetError, ConnectionRefusedError):
            # the accept queue overflowed while the broker shed the flood (a
            # loaded machine): that socket never got in, which is the point
            s.close()
            continue
        socks.append(s)
    return socks


def _logged_in(host, port, source):
    """A raw AMQP connection from `source` that has logged in (connection.open-ok)."""
    from tests.helpers.rawclient import RawClient
    c = RawClient.__new__(RawClient)
    c.sock = socket.socket()
    c.sock.bind((source, 0))
    c.sock.settimeout(10)
    c.sock.connect((host, port))
    c.buf, c.frame_max, c.capabilities = b"", 131072, {}
    c.handshake("guest", "guest", "/")
    return c


def test_connection_caps_total_and_per_address(make_broker):
    """Issue 25 changed the caps (tests/security/test_connection_guard.py):
    sockets that have not logged in make room for newcomers; what has
    logged in is capped per address and in all, and never closed for room."""
    b = make_broker("[main]\nmax_connections = 40\nmax_connections_per_address = 25\n"
                    "default_user_only_loopback = false\n")
    logged = [_logged_in(b.host, b.port, "127.0.0.2") for _ in range(25)]
    extra = socket.socket()
    extra.bind(("127.0.0.2", 0))
    extra.connect((b.host, b.port))
    assert _closed_within(extra, 2), "a 26th connection from one address was kept, the cap is 25"
    extra.close()
    # sockets that never log in: at most a quarter of the total stays (the oldest go)
    flood = _open_many(b.host, b.port, 30, source="127.0.0.3")
    time.sleep(0.5)
    kept = [s for s in flood if not _closed_within(s, 0.05)]
    assert len(kept) == 8, f"{len(kept)} of 30 sockets that did not log in kept, the cap is 8"
    assert kept == flood[-8:], "the newest should stay"
    # the total holds for what has logged in
    more = [_logged_in(b.host, b.port, "127.0.0.4") for _ in range(40 - 25 - 8)]
    last = socket.socket()
    last.bind(("127.0.0.5", 0))
    last.connect((b.host, b.port))
    # room is made by dropping a socket that has not logged in, never a logged-in one
    assert not _closed_within(last, 0.5)
    assert sum(_closed_within(s, 0.05) for s in kept) == 1
    for c in logged + more:
        assert not _closed_within(c.sock, 0.01)
        c.close()
    for s in flood + [last]:
        s.close()
    assert "refused" in b.log_text() and "closed before login" in b.log_text()


def _low_fd_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))


def test_flood_past_the_fd_limit_does_not_stop_the_broker(make_broker):
    """The reproduction: more idle sockets than the broker has descriptors
    while a publisher with confirms needs fsync's open() on durable data."""
    b = make_broker("", preexec_fn=_low_fd_limit)
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("durable-under-flood", durable=True)
    flood = []
    for source in ("127.0.0.2", "127.0.0.4", "127.0.0.5"):
        flood += _open_many(b.host, b.port, 250, source=source)
    flood += [socket.create_connection((b.host, b.http_port)) for _ in range(100)]
    for i in range(50):
        ch.basic_publish("", "durable-under-flood", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    assert ch.queue_declare("durable-under-flood", passive=True).method.message_count == 50
    assert b.proc.poll() is None, "the broker stopped:\n" + b.log_tail()
    for s in flood:
        s.close()
    conn.close()
    # the slots come back: new clients and the API get in again
    deadline = time.monotonic() + 10
    while call(b, "GET", "/api/overview")[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    assert conn.channel().queue_declare("durable-under-flood", passive=True).method.message_count == 50
    conn.close()
    assert "connection from 127.0.0.2 closed before login" in b.log_text()


def test_http_headers_and_bodies_must_arrive_in_time(make_broker):
    from tests.conftest import free_port
    metrics_port = free_port()
    b = make_broker("[mgmt]\nread_timeout = 1\n", extra_args=["--metrics-http-port", str(metrics_port)])
    # the open metrics listener too
    idle_metrics = socket.create_connection((b.host, metrics_port))
    idle_metrics.sendall(b"GET /metrics HTTP/1.1\r\n")
    assert _closed_within(idle_metrics, 4)
    idle_metrics.close()
    slow_headers = socket.create_connection((b.host, b.http_port))
    slow_headers.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()
    for _ in range(10):                 # a header byte every 0.3 s never completes the request
        try:
            slow_headers.sendall(b"X")
        except OSError:
            break
        time.sleep(0.3)
    assert _closed_within(slow_headers, 3)
    assert time.monotonic() - started < 5
    slow_body = socket.create_connection((b.host, b.http_port))
    slow_body.sendall(b"PUT /api/queues/%2F/q1 HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"dur")
    slow_body.settimeout(5)
    answer = slow_body.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    slow_body.close()
    assert call(b, "GET", "/api/overview")[0] == 200

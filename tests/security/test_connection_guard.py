"""Issue 25 finding 9, connection caps that could be turned against
others: a flood of sockets that never log in got a legitimate client
refused 41 times in 49 at max_connections 3000, and the per-address cap
counted HTTP and AMQP together, so 7,500 AMQP clients on 127.0.0.1 locked
the operator out of the local management API."""
import socket
import threading
import time

import pika

from tests.security.conftest import call
from tests.security.test_before_login import _logged_in


class Flood:
    """Threads opening sockets that never log in, as fast as they can,
    keeping the newest `keep` of each open."""

    def __init__(self, b, sources, keep=500):
        self.b, self.sources, self.keep = b, sources, keep
        self.stop = threading.Event()
        self.opened = 0
        self.threads = [threading.Thread(target=self.run, args=(src,)) for src in sources]

    def run(self, source):
        held = []
        while not self.stop.is_set():
            s = socket.socket()
            try:
                s.bind((source, 0))
                s.connect((self.b.host, self.b.port))
            except OSError:
                s.close()
                time.sleep(0.001)
                continue
            held.append(s)
            self.opened += 1
            if len(held) > self.keep:
                held.pop(0).close()
        for s in held:
            s.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


def test_a_flood_that_never_logs_in_cannot_keep_a_client_out(make_broker):
    b = make_broker("[main]\nmax_connections = 1000\n")
    ok = 0
    with Flood(b, ["127.0.0.2", "127.0.0.3", "127.0.0.1"]) as flood:
        time.sleep(2)           # (enough sockets to fill max_connections: the code before refused here)
        for _ in range(20):
            params = pika.URLParameters(b.url)
            params.connection_attempts = 1
            params.socket_timeout = 5
            try:
                conn = pika.BlockingConnection(params)
            except pika.exceptions.AMQPConnectionError:
                continue
            conn.channel().queue_declare("", exclusive=True)
            conn.close()
            ok += 1
        opened = flood.opened
    assert opened > 1000, f"the flood opened only {opened} sockets"
    assert ok == 20, f"{ok} of 20 logins got through a flood of {opened} sockets"


def test_amqp_clients_do_not_use_up_the_management_apis_share(make_broker):
    b = make_broker("[main]\nmax_connections_per_address = 10\n")
    clients = [_logged_in(b.host, b.port, "127.0.0.1") for _ in range(10)]
    try:
        status = call(b, "GET", "/api/overview")[0]
    except OSError as exc:       # reset at once: the cap was shared
        status = exc
    assert status == 200
    # the AMQP cap itself holds
    extra = socket.create_connection((b.host, b.port))
    extra.settimeout(2)
    try:
        assert extra.recv(10) == b""
    except ConnectionResetError:
        pass
    extra.close()
    for c in clients:
        c.close()


def test_the_guard_closes_what_got_least_far_first():
    from lavinmq.listener import LOGGING_IN, TALKING, ConnectionGuard
    g = ConnectionGuard(64, 64)         # 16 may wait before login, 8 per address
    closed = []
    t = [g.admit("10.0.0.1") for _ in range(8)]
    for i, ticket in enumerate(t):
        ticket.close = lambda i=i: closed.append(i)
    t[0].progress(LOGGING_IN)
    t[1].progress(TALKING)
    t[2].login()
    for i in range(7):
        g.admit("10.0.0.1").close = lambda i=i: closed.append(f"new{i}")
    # the silent ones went first, oldest first; the one logging in, and the one logged in, stay
    assert closed == [3, 4, 5, 6, 7, "new0"]
    assert not t[0].released and not t[1].released and not t[2].released
    assert g.total == 9 and g.by_key[("amqp", "10.0.0.1")] == 9
    # HTTP from the same address counts apart
    assert g.admit("10.0.0.1", "http") is not None
    for ticket in list(g.waiting[0]) + list(g.waiting[1]) + list(g.waiting[2]):
        ticket.release()
    t[2].release()
    assert g.total == 0 and g.waiting_count == 0 and not g.waiting_by_key and not g.by_key

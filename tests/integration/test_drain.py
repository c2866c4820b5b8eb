"""A clean stop's grace period (lavinmq/drain.py, LavinMQ issue #2199),
with the real broker and pika: on SIGTERM consumers get basic.cancel (when
their client announced consumer_cancel_notify), nothing new is delivered,
new connections are refused, and what clients ack or publish with
confirms meanwhile is kept; then the connections close (320) and the
broker exits. A restart on the same data directory shows what was kept."""
import asyncio
import datetime
import signal
import socket
import time

import pika
import pytest

from tests.conftest import BrokerProcess
from tests.helpers.rawclient import RawClient
from pamqp import commands

# pika's own capabilities, less the one that asks for basic.cancel
NO_CANCEL_NOTIFY = {"authentication_failure_close": True, "basic.nack": True, "connection.blocked": True,
                    "exchange_exchange_bindings": True, "publisher_confirms": True}


@pytest.fixture
def start(tmp_path):
    started = []

    def start(timeout, mqtt=False):
        ini = tmp_path / "lavinmq.ini"
        ini.write_text(f"[main]\nshutdown_drain_timeout = {timeout}\n")
        b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)], mqtt=mqtt).start()
        started.append(b)
        return b
    yield start
    for b in started:
        if b.proc.poll() is None:
            b.proc.kill()
            b.proc.wait()
        b.check_clean()


def publish(url, queue, n, start=0):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    for i in range(start, start + n):
        ch.basic_publish("", queue, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    conn.close()


def count(url, queue):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


class Holder:
    """A pika consumer that takes `hold` deliveries of `queue` and keeps
    them unacked; notify: whether it announces consumer_cancel_notify."""

    def __init__(self, url, queue, hold, notify=True):
        params = pika.URLParameters(url)
        if not notify:
            params.client_properties = {"capabilities": NO_CANCEL_NOTIFY}
        self.conn = pika.BlockingConnection(params)
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=hold)
        self.tags, self.cancelled, self.closed = [], [], None
        self.ch.add_on_cancel_callback(lambda frame: self.cancelled.append(frame.method.consumer_tag))
        self.ch.basic_consume(queue, lambda ch, method, props, body: self.tags.append(method.delivery_tag))
        self.pump_until(lambda: len(self.tags) >= hold, what=f"{hold} deliveries")

    def pump(self, seconds):
        """Read what the broker sends for this long (or until it closes the connection)."""
        deadline = time.monotonic() + seconds
        while self.closed is None and time.monotonic() < deadline:
            try:
                self.conn.process_data_events(min(0.05, max(0.0, deadline - time.monotonic())))
            except pika.exceptions.ConnectionClosedByBroker as exc:
                self.closed = (exc.reply_code, exc.reply_text)
            except pika.exceptions.AMQPConnectionError as exc:
                self.closed = (0, repr(exc))

    def pump_until(self, cond, timeout=15, what="condition"):
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.pump(0.05)

    def ack_all(self):
        for tag in self.tags:
            self.ch.basic_ack(tag)


def sigterm_at(broker):
    broker.proc.send_signal(signal.SIGTERM)
    return time.monotonic()


def exit_code(broker, timeout=30):
    return broker.proc.wait(timeout)


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def stop_took(log):
    """Seconds from the log's "shutting down" to its "stopped"."""
    stamps = [datetime.datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00"))
              for line in log.splitlines() if line.endswith(("lavinmq.server: shutting down", "lavinmq.server: stopped"))]
    return (stamps[1] - stamps[0]).total_seconds()


def test_acks_sent_after_the_cancel_are_kept(start, name):
    """The issue's acceptance: 1,000 unacked deliveries (prefetch 1000,
    manual acks); SIGTERM; the client gets basic.cancel, acks them all;
    the broker exits at once; after a restart nothing comes again."""
    b = start(30)
    publish(b.url, name, 1000)
    h = Holder(b.url, name, 1000)
    t0 = sigterm_at(b)
    h.pump_until(lambda: h.cancelled, timeout=5, what="basic.cancel")
    assert len(h.tags) == 1000
    h.ack_all()
    h.pump_until(lambda: h.closed is not None, what="connection.close")
    assert h.closed == (320, "CONNECTION_FORCED - broker shutdown")
    assert exit_code(b) == 0
    assert time.monotonic() - t0 < 15, "the drain did not end once every delivery was acked"
    assert "drained in" in b.log_text()
    b.start()
    assert count(b.url, name) == 0


def test_nacks_and_rejects_during_the_drain_count_as_settled(start, name):
    """Requeued by a nack, a message waits in its queue (nothing is
    delivered now); rejected without requeue, it is gone."""
    b = start(20)
    publish(b.url, name, 10)
    h = Holder(b.url, name, 10)
    t0 = sigterm_at(b)
    h.pump_until(lambda: h.cancelled, timeout=5, what="basic.cancel")
    for tag in h.tags[:5]:
        h.ch.basic_ack(tag)
    for tag in h.tags[5:8]:
        h.ch.basic_nack(tag, requeue=True)
    for tag in h.tags[8:]:
        h.ch.basic_reject(tag, requeue=False)
    h.pump_until(lambda: h.closed is not None, what="connection.close")
    assert len(h.tags) == 10
    assert exit_code(b) == 0
    assert time.monotonic() - t0 < 10
    b.start()
    assert count(b.url, name) == 3


def test_aio_pika_acks_after_the_cancel(start, name):
    aio_pika = pytest.importorskip("aio_pika")
    b = start(20)
    publish(b.url, name, 200)

    async def run():
        conn = await aio_pika.connect(b.url)
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=200)
        q = await ch.get_queue(name)
        held = []

        async def take(message):
            held.append(message)
        await q.consume(take)
        while len(held) < 200:
            await asyncio.sleep(0.01)
        sigterm_at(b)
        await asyncio.sleep(0.3)        # the basic.cancel arrives; the work is done meanwhile
        for message in held:
            await message.ack()
        deadline = time.monotonic() + 10
        while b.proc.poll() is None:    # the broker closes it and exits once all is acked
            assert time.monotonic() < deadline, "the broker did not exit"
            await asyncio.sleep(0.05)
        await conn.close()
    asyncio.run(run())
    assert exit_code(b) == 0
    assert "drained in" in b.log_text()
    b.start()
    assert count(b.url, name) == 0


def test_unacked_deliveries_are_requeued_after_the_grace_period(start, name):
    """The same client never acks: the broker waits the grace period (and
    not much longer), then the 1,000 are all there after a restart."""
    b = start(2)
    publish(b.url, name, 1000)
    h = Holder(b.url, name, 1000)
    t0 = sigterm_at(b)
    h.pump_until(lambda: h.cancelled, timeout=5, what="basic.cancel")
    h.pump_until(lambda: h.closed is not None, what="connection.close")
    assert exit_code(b) == 0
    took = time.monotonic() - t0
    assert 1.9 < took < 2 + 4, took
    assert "drain ended after" in b.log_text()
    b.start()
    assert count(b.url, name) == 1000


def test_publishes_with_confirms_during_the_drain_are_confirmed_and_kept(start, name):
    b = start(20)
    publish(b.url, name, 10)
    h = Holder(b.url, name, 10)         # holds the drain open
    pub = pika.BlockingConnection(pika.URLParameters(b.url))
    pch = pub.channel()
    pch.queue_declare(name + ".in", durable=True)
    pch.confirm_delivery()
    sigterm_at(b)
    h.pump_until(lambda: h.cancelled, timeout=5, what="basic.cancel")
    for i in range(300):
        # raises unless confirmed (basic.ack); pika waits for each
        pch.basic_publish("", name + ".in", b"p%d" % i, pika.BasicProperties(delivery_mode=2), mandatory=True)
    h.ack_all()
    h.pump_until(lambda: h.closed is not None, what="connection.close")
    assert exit_code(b) == 0
    b.start()
    assert count(b.url, name + ".in") == 300
    assert count(b.url, name) == 0


def test_no_new_connections_and_a_second_sigterm_ends_the_wait(start, name):
    b = start(60)
    publish(b.url, name, 5)
    h = Holder(b.url, name, 5)
    # a client half way through its handshake when the stop begins
    late = RawClient(b.host, b.port, handshake=False)
    late.sock.sendall(b"AMQP\x00\x00\x09\x01")
    late.expect(commands.Connection.Start)
    late.send(0, commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0guest\0guest"))
    late.expect(commands.Connection.Tune)
    late.send(0, commands.Connection.TuneOk(0, 131072, 0))
    sigterm_at(b)
    h.pump_until(lambda: h.cancelled, timeout=5, what="basic.cancel")
    assert refused(b.port)
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika.URLParameters(b.url))
    late.send(0, commands.Connection.Open("/"))
    close = late.expect(commands.Connection.Close)
    assert (close.reply_code, close.reply_text) == (320, "CONNECTION_FORCED - broker shutdown")
    # WebSocket upgrades on the HTTP port (still up for the API) are refused too
    with socket.create_connection(("127.0.0.1", b.http_port), timeout=5) as s:
        s.sendall(b"GET /amqp HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 503")
    h.pump(0.5)
    assert b.proc.poll() is None and h.closed is None, "the grace period ended early"
    t1 = time.monotonic()
    b.proc.send_signal(signal.SIGTERM)
    h.pump_until(lambda: h.closed is not None, timeout=5, what="connection.close")
    assert exit_code(b, 10) == 0
    assert time.monotonic() - t1 < 3
    b.start()
    assert count(b.url, name) == 5        # not acked: requeued


def test_a_client_without_consumer_cancel_notify_gets_no_cancel_but_its_acks_count(start, name):
    b = start(20)
    publish(b.url, name, 1500)
    h = Holder(b.url, name, 1000, notify=False)
    t0 = sigterm_at(b)
    h.pump(1.0)
    assert h.cancelled == [] and h.closed is None
    assert len(h.tags) == 1000, "delivered more after the stop began"
    h.ack_all()
    h.pump(1.0)       # acks free its prefetch window: still nothing new comes
    assert len(h.tags) == 1000, "delivered more after the stop began"
    h.pump_until(lambda: h.closed is not None, what="connection.close")
    assert exit_code(b) == 0
    assert time.monotonic() - t0 < 10
    b.start()
    assert count(b.url, name) == 500


def test_consume_and_get_during_the_drain_deliver_nothing(start, name):
    b = start(20)
    publish(b.url, name, 1)
    publish(b.url, name + ".ready", 3)
    c = RawClient(b.host, b.port)
    c.open_channel(1)
    c.send(1, commands.Basic.Consume(queue=name, consumer_tag="held"))
    c.expect(commands.Basic.ConsumeOk)
    deliver = c.expect(commands.Basic.Deliver)
    c.read_frame()
    c.read_frame()      # its header and body
    sigterm_at(b)
    assert c.expect(commands.Basic.Cancel).consumer_tag == "held"
    c.send(1, commands.Basic.Get(queue=name + ".ready"))
    c.expect(commands.Basic.GetEmpty)
    c.send(1, commands.Basic.Consume(queue=name + ".ready", consumer_tag="late"))
    assert c.expect(commands.Basic.ConsumeOk).consumer_tag == "late"
    assert c.expect(commands.Basic.Cancel).consumer_tag == "late"
    c.send(1, commands.Basic.Ack(deliver.delivery_tag))
    close = c.expect(commands.Connection.Close)
    assert close.reply_code == 320
    assert exit_code(b) == 0
    b.start()
    assert (count(b.url, name), count(b.url, name + ".ready")) == (0, 3)


def test_zero_turns_the_drain_off(start, name):
    b = start(0)
    publish(b.url, name, 10)
    h = Holder(b.url, name, 10)
    t0 = sigterm_at(b)
    h.pump_until(lambda: h.closed is not None, timeout=5, what="connection.close")
    assert exit_code(b) == 0
    assert time.monotonic() - t0 < 2
    # its close-ok was read (reading had stopped before the close), not waited out (1 s)
    assert stop_took(b.log_text()) < 0.9
    b.start()
    assert count(b.url, name) == 10

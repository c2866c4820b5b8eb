"""Resource limits and backpressure: vhost connection/queue limits, channel
ids above channel_max, name rules, the free_disk_min alarm with
connection.blocked, and a consumer that stops reading."""
import json
import os
import signal
import socket
import time

import pika
import pytest
from pamqp import commands as C

from lavinmq.errors import PreconditionFailed
from lavinmq.vhost import check_name
from tests.conftest import BrokerProcess, unique
from tests.helpers.rawclient import RawClient, publish_frames


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


def test_vhost_connection_and_queue_limits(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "vhosts.json").write_text(json.dumps(
        [{"name": "/", "limits": {"max-connections": 2, "max-queues": 3}}]))
    b = BrokerProcess(data).start()
    try:
        c1 = pika.BlockingConnection(pika.URLParameters(b.url))
        c2 = pika.BlockingConnection(pika.URLParameters(b.url))
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as e:
            pika.BlockingConnection(pika.URLParameters(b.url))
        assert "(530)" in str(e.value) and "connection limit (2) is reached" in str(e.value)
        c2.close()
        c3 = pika.BlockingConnection(pika.URLParameters(b.url))    # a slot is free again
        ch = c3.channel()
        for i in range(3):
            ch.queue_declare(f"q{i}")
        ch.queue_declare("q0")                                       # redeclaring is not a new queue
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            ch.queue_declare("q3")
        assert e.value.args[0] == 406 and "queue limit in vhost '/' (3)" in e.value.args[1]
        c1.close()
        c3.close()
        # limits are kept in vhosts.json across restarts
        b.restart()
        assert json.loads((data / "vhosts.json").read_text())[0]["limits"] == {
            "max-connections": 2, "max-queues": 3}
    finally:
        b.stop()
    b.check_clean()


def test_channel_max_counts_open_channels_and_bad_names(broker):
    c = RawClient(broker.host, broker.port, handshake=False)
    c.sock.sendall(b"AMQP\x00\x00\x09\x01")
    c.expect(C.Connection.Start)
    c.send(0, C.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"))
    c.expect(C.Connection.Tune)
    c.send(0, C.Connection.TuneOk(3, 131072, 0), C.Connection.Open("/"))
    c.expect(C.Connection.OpenOk)
    # channel_max counts open channels; any id up to 65535 is valid
    for ch in (1, 2000, 65535):
        c.send(ch, C.Channel.Open())
        c.expect(C.Channel.OpenOk)
    c.send(7, C.Channel.Open())
    close = c.expect(C.Connection.Close)
    assert close.reply_code == 530
    assert "number of channels opened (3) has reached the negotiated channel_max (3)" in close.reply_text
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    for declare in (lambda ch: ch.queue_declare("line\nbreak"),
                    lambda ch: ch.exchange_declare("ex\rname")):
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            declare(ch)
        assert e.value.args[0] == 406 and "newline" in e.value.args[1]
    conn.close()
    # over AMQP a name cannot exceed a shortstr; other ways in (HTTP) share this check
    with pytest.raises(PreconditionFailed, match="too long"):
        check_name("queue", "é" * 128, 50, 10)      # 256 bytes
    check_name("queue", "a" * 255, 50, 10)


def test_disk_alarm_blocks_publishers_until_space_returns(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\nfree_disk_min = 0\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        blocked = []
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        conn.add_on_connection_blocked_callback(lambda c, m: blocked.append(m.method.reason))
        conn.add_on_connection_unblocked_callback(lambda c, m: blocked.append("unblocked"))
        ini.write_text("[main]\nfree_disk_min = 1000000000000000\n")    # 1 PB: the alarm goes on
        b.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while not blocked and time.monotonic() < deadline:
            conn.process_data_events(0.1)
        assert blocked == ["low on disk"]
        # a client connecting during the alarm is told at once
        late = RawClient(b.host, b.port, capabilities={"connection.blocked": True})
        assert late.expect(C.Connection.Blocked).reason == "low on disk"
        late.close()
        # a raw publisher: its first batch may land, then it is not read any more
        q = unique("q")
        ch = conn.channel()
        ch.queue_declare(q)
        raw = RawClient(b.host, b.port)
        raw.send(1, C.Channel.Open())
        raw.expect(C.Channel.OpenOk)
        for _ in range(20):
            raw.sendall(publish_frames(1, "", q, b"x" * 1000) * 100)
            time.sleep(0.01)
        time.sleep(0.5)
        held = ch.queue_declare(q, passive=True).method.message_count
        assert held < 2000, "publishes went through during the alarm"
        assert "disk alarm" in b.log_text()
        # space is back (the limit lowered, applied on SIGHUP): publishers go on
        ini.write_text("[main]\nfree_disk_min = 0\n")
        b.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
                len(blocked) < 2 or ch.queue_declare(q, passive=True).method.message_count < 2000):
            conn.process_data_events(0.1)
        assert ch.queue_declare(q, passive=True).method.message_count == 2000
        assert blocked == ["low on disk", "unblocked"]
        raw.close()
        conn.close()
    finally:
        b.stop()
    b.check_clean()


def test_consumer_that_stops_reading_does_not_grow_the_broker(fresh_broker):
    # a consumer takes deliveries without reading its socket: the broker
    # must stop writing to it (socket full) instead of buffering 200 MB
    b = fresh_broker
    q = unique("q")
    consumer = RawClient(b.host, b.port)
    consumer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    consumer.send(1, C.Channel.Open(), C.Basic.Consume(queue=q, no_ack=True))
    pub = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = pub.channel()
    ch.queue_declare(q)
    consumer.send(1, C.Basic.Consume(queue=q, no_ack=True))
    base = rss_mb(b.proc.pid)
    body = b"y" * 100_000
    for _ in range(2000):                       # 200 MB
        ch.basic_publish("", q, body)
    ch.queue_declare(q, passive=True)
    grown = rss_mb(b.proc.pid) - base
    ready = ch.queue_declare(q, passive=True).method.message_count
    assert ready > 1000, "the broker claims to have delivered to a consumer that reads nothing"
    assert grown < 60, f"broker RSS grew {grown:.0f} MB"
    consumer.close()
    pub.close()

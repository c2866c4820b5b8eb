"""Queues as LavinMQ's: basic.get on a paused queue, restarting a closed
queue (HTTP and lavinmqctl), pause_queue / resume_queue."""
import hashlib
import os

import pika
import pytest

from tests.conftest import BrokerProcess, unique
from tests.parity.helpers import api, ctl


def test_basic_get_on_a_paused_queue_is_empty(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    q = unique("q")
    ch.queue_declare(q)
    ch.basic_publish("", q, b"one")
    assert api(broker, "PUT", f"/api/queues/%2F/{q}/pause")[0] == 204
    assert ch.basic_get(q) == (None, None, None)        # get-empty, and the channel stays open
    assert ch.queue_declare(q, passive=True).method.message_count == 1
    assert api(broker, "PUT", f"/api/queues/%2F/{q}/resume")[0] == 204
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"one"
    conn.close()


def test_ctl_pause_and_resume_queue(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    q = unique("q")
    ch.queue_declare(q)
    ch.basic_publish("", q, b"m")
    ctl(broker, "pause_queue", q, process=True)
    assert api(broker, "GET", f"/api/queues/%2F/{q}")[1]["state"] == "paused"
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    conn.process_data_events(0.3)
    assert got == []
    ctl(broker, "resume_queue", q)
    conn.process_data_events(0.5)
    assert got == [b"m"]
    # a queue that is not closed is not restarted: LavinMQ's 400
    p = ctl(broker, "restart_queue", q, check=False)
    assert p.returncode == 1 and "400" in p.stderr
    p = ctl(broker, "pause_queue", unique("missing"), check=False)
    assert p.returncode == 1 and "404" in p.stderr
    conn.close()


def queue_dir(b, name):
    h = lambda s: hashlib.sha1(s.encode()).hexdigest()     # noqa: E731
    return os.path.join(b.data_dir, h("/"), h(name))


@pytest.fixture
def small_segments(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\nsegment_size = 16384\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    yield b
    b.stop()


def test_restart_reopens_a_closed_queue(small_segments):
    b = small_segments
    name, x = unique("damaged"), unique("x")
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(name, durable=True)
    ch.exchange_declare(x, "direct", durable=True)
    ch.queue_bind(name, x, "rk")
    for i in range(300):
        ch.basic_publish("", name, b"%05d" % i + b"x" * 200, pika.BasicProperties(delivery_mode=2))
    conn.close()
    assert b.stop() == 0
    seg = os.path.join(queue_dir(b, name), "msgs.0000000002")
    with open(seg, "rb") as f:
        good = f.read()
    with open(seg, "r+b") as f:          # garbage over a sealed segment: closed at boot
        f.seek(5000)
        f.write(b"\xff" * 8 + b"\x00" * 500)
    b.start()
    assert api(b, "GET", f"/api/queues/%2F/{name}")[1]["state"] == "closed"
    # still damaged: not restarted
    status, body = api(b, "PUT", f"/api/queues/%2F/{name}/restart")
    assert status == 400 and "not restarted" in body["reason"]
    # the operator puts the segment back; the queue opens without a broker restart
    with open(seg, "wb") as f:
        f.write(good)
    assert ctl(b, "restart_queue", name).stdout == ""      # LavinMQ's lavinmqctl prints nothing
    q = api(b, "GET", f"/api/queues/%2F/{name}")[1]
    assert q["state"] == "running" and q["messages"] == 300
    # its binding came along: a publish through the exchange reaches it
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish(x, "rk", b"after", mandatory=True)
    bodies = []
    while (m := ch.basic_get(name, auto_ack=True))[0] is not None:
        bodies.append(m[2])
    assert bodies[:300] == [b"%05d" % i + b"x" * 200 for i in range(300)] and bodies[300:] == [b"after"]
    conn.close()
    b.check_clean()


def test_delayed_message_policy(tmp_path):
    """LavinMQ's policy key delayed-message: true makes a matching exchange
    delay by x-delay; its delayed messages survive a restart."""
    import time
    b = BrokerProcess(tmp_path / "data").start()
    try:
        status, _ = api(b, "PUT", "/api/policies/%2F/delay",
                        {"pattern": "^delayed\\.", "apply-to": "exchanges", "definition": {"delayed-message": True}})
        assert status == 201
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.exchange_declare("delayed.x", "direct", durable=True)
        ch.exchange_declare("plain.x", "direct", durable=True)
        for x in ("delayed.x", "plain.x"):
            ch.queue_declare(x + ".q", durable=True)
            ch.queue_bind(x + ".q", x, "k")
        ch.confirm_delivery()
        delay = pika.BasicProperties(headers={"x-delay": 600}, delivery_mode=2)
        ch.basic_publish("delayed.x", "k", b"later", delay)
        ch.basic_publish("plain.x", "k", b"now", delay)
        assert ch.queue_declare("plain.x.q", passive=True).method.message_count == 1
        assert ch.queue_declare("delayed.x.q", passive=True).method.message_count == 0
        time.sleep(0.9)
        assert ch.queue_declare("delayed.x.q", passive=True).method.message_count == 1
        # kept across a restart while still waiting
        sent = time.monotonic()
        ch.basic_publish("delayed.x", "k", b"after restart", pika.BasicProperties(headers={"x-delay": 5000},
                                                                                 delivery_mode=2))
        conn.close()
        b.restart()
        assert time.monotonic() - sent < 4.5, "the restart took too long for this check"
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        assert ch.queue_declare("delayed.x.q", passive=True).method.message_count == 1
        deadline = time.monotonic() + 8
        while ch.queue_declare("delayed.x.q", passive=True).method.message_count < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        conn.close()
    finally:
        b.stop()
    b.check_clean()

"""Attacks that used to lose other tenants' confirmed messages at the next
start: arguments the definitions file cannot read back, durable
server-named queues, and definition frames that do not decode."""
import os
import struct

import pika
import pytest

from lavinmq._core.codec import encode_method_frame
from lavinmq.vhost import sha1
from tests.conftest import BrokerProcess, unique
from tests.integration.test_http_api import call


def nested(depth):
    table = {"leaf": 1}
    for _ in range(depth):
        table = {"n": table}
    return table


def publish_confirmed(b, queue, count):
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    for i in range(count):
        ch.basic_publish("", queue, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    c.close()


def message_count(b, queue):
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    try:
        return c.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        c.close()


@pytest.mark.parametrize("arguments", [
    {"x-deep": nested(40)},
    {"x-big": 2 ** 63},
    {"x-long-key-" + "k" * 300: 1},
], ids=["nested-40", "int-2^63", "key-over-255"])
def test_unstorable_arguments_refused_over_http_and_nothing_lost(fresh_broker, arguments):
    b = fresh_broker
    victim = unique("victim")
    publish_confirmed(b, victim, 50)
    attacker = unique("alice.q")
    status, body = call(b, "PUT", f"/api/queues/%2F/{attacker}", {"durable": True, "arguments": arguments})
    assert status == 400, (status, body)
    assert "invalid arguments" in body["reason"]
    ex = unique("alice.x")
    status, body = call(b, "PUT", f"/api/exchanges/%2F/{ex}",
                        {"type": "direct", "durable": True, "arguments": arguments})
    assert status == 400, (status, body)
    # a binding with such arguments is refused too
    status, _ = call(b, "POST", f"/api/bindings/%2F/e/amq.direct/q/{victim}",
                     {"routing_key": "k", "arguments": arguments})
    assert status == 400
    assert call(b, "GET", f"/api/queues/%2F/{attacker}")[0] == 404
    # declared after the attempts: must survive too
    later = unique("later")
    publish_confirmed(b, later, 20)
    b.restart()
    assert message_count(b, victim) == 50
    assert message_count(b, later) == 20
    assert "damaged" not in b.log_text()


def test_durable_server_named_queue_survives_restart_and_kill(fresh_broker):
    b = fresh_broker
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    name = ch.queue_declare("", durable=True).method.queue
    assert name.startswith("amq.gen-")
    ch.confirm_delivery()
    for i in range(100):
        ch.basic_publish("", name, b"x%d" % i, pika.BasicProperties(delivery_mode=2))
    c.close()
    b.restart()
    assert message_count(b, name) == 100
    b.kill()
    b.start()
    assert message_count(b, name) == 100
    assert "reserved prefix" not in b.log_text()


def test_undecodable_frame_is_skipped_not_a_cut(tmp_path):
    """A whole frame whose table does not decode (written by an older
    version that accepted it) loses only itself."""
    data = tmp_path / "data"
    vdir = data / sha1("/")
    os.makedirs(vdir)
    good_before, good_after = unique("before"), unique("after")
    frames = [encode_method_frame(0, 50, 10, (0, good_before, False, True, False, False, False, {}))]
    # 40 levels: encodable, but deeper than the decoder reads back
    frames.append(encode_method_frame(0, 50, 10, (0, unique("deep"), False, True, False, False, False,
                                                  {"x": nested(40)})))
    frames.append(encode_method_frame(0, 50, 10, (0, good_after, False, True, False, False, False, {})))
    (vdir / "definitions.amqp").write_bytes(struct.pack("<I", 1) + b"".join(frames))
    b = BrokerProcess(data).start()
    try:
        for q in (good_before, good_after):
            assert message_count(b, q) == 0
        assert "does not decode, skipped" in b.log_text()
    finally:
        b.stop()


def test_orphaned_queue_directory_reported_and_set_aside(fresh_broker):
    b = fresh_broker
    name = unique("orphan")
    publish_confirmed(b, name, 10)
    b.stop()
    # lose the definition but keep the messages, as the old replay bug did
    vdir = os.path.join(b.data_dir, sha1("/"))
    with open(os.path.join(vdir, "definitions.amqp"), "wb") as f:
        f.write(struct.pack("<I", 1))
    empty = os.path.join(vdir, "0" * 40)
    os.makedirs(empty)
    b.start()
    moved = os.path.join(vdir, "orphaned", sha1(name))
    assert os.path.isdir(moved)
    assert any(f.startswith("msgs.") for f in os.listdir(moved))
    assert not os.path.exists(os.path.join(vdir, sha1(name)))
    assert not os.path.exists(empty)
    log = b.log_text()
    assert sha1(name) in log and "belongs to no queue" in log

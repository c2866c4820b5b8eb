"""Issue 14 items 5 and 6: no one exhausts the broker's memory or its
mappings. Publishes are checked before any body is buffered, unfinished
bodies and open transactions are capped, a memory high watermark blocks
publishers, idle queues hold no mapping, server-named queues need the
configure right."""
import os
import signal
import struct
import time

import pika
import pytest
from pamqp import commands, frame, header

from tests.conftest import unique
from tests.helpers.rawclient import RawClient
from tests.security.conftest import add_user


def header_frame(ch, size):
    return frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()), ch)


def body_frame(ch, data):
    return struct.pack(">BHI", 3, ch, len(data)) + data + b"\xce"


def wait_close(c, timeout=10):
    c.sock.settimeout(timeout)
    while True:
        got = c.read_frame()
        assert got is not None, "connection closed without a close frame"
        if isinstance(got[1], (commands.Channel.Close, commands.Connection.Close)):
            return got


def test_refused_publish_is_refused_before_its_body(make_broker):
    b = make_broker()
    name = unique("mallory")
    add_user(b, name, perms=("", "", ".*"))          # may read, may not write
    c = RawClient(b.host, b.port, user=name, password="pw")
    c.open_channel(1)
    started = time.monotonic()
    # a 100 MB message announced, one frame of it sent: the refusal comes now
    c.sendall(frame.marshal(commands.Basic.Publish(exchange="amq.direct", routing_key="k"), 1)
              + header_frame(1, 100 * 1024 * 1024) + body_frame(1, b"x" * 100_000))
    ch, close = wait_close(c)
    assert (ch, close.reply_code) == (1, 403)
    assert time.monotonic() - started < 5
    c.close()


def test_unfinished_bodies_per_connection_are_capped(make_broker):
    b = make_broker("[amqp]\nmax_message_size = 1048576\n")
    c = RawClient(b.host, b.port)
    q = unique("q")
    c.open_channel(1)
    c.open_channel(2)
    c.send(1, commands.Queue.Declare(queue=q, exclusive=True))
    c.expect(commands.Queue.DeclareOk)
    # channel 1 starts a 700 kB message and stops halfway
    c.sendall(frame.marshal(commands.Basic.Publish(exchange="", routing_key=q), 1)
              + header_frame(1, 700_000) + body_frame(1, b"a" * 100_000))
    # channel 2 starts another: together over max_message_size
    c.sendall(frame.marshal(commands.Basic.Publish(exchange="", routing_key=q), 2) + header_frame(2, 700_000))
    ch, close = wait_close(c)
    assert (ch, close.reply_code) == (2, 406) and "unfinished" in close.reply_text
    # channel 1 finishes its message: nothing lost there
    c.send(2, commands.Channel.CloseOk())
    for _ in range(6):
        c.sendall(body_frame(1, b"a" * 100_000))
    c.send(1, commands.Basic.Get(queue=q, no_ack=True))
    got = c.read_frame()
    while not isinstance(got[1], (commands.Basic.GetOk, commands.Basic.GetEmpty)):
        got = c.read_frame()
    assert isinstance(got[1], commands.Basic.GetOk) and got[1].message_count == 0
    c.close()


def test_open_transaction_bytes_are_capped(make_broker):
    b = make_broker("[amqp]\nmax_message_size = 1048576\n")
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.tx_select()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        for _ in range(3):
            ch.basic_publish("", q, b"x" * 400_000)
        ch.tx_commit()
    assert e.value.reply_code == 406 and "transaction" in e.value.reply_text
    ch = conn.channel()
    assert ch.queue_declare(q, passive=True).method.message_count == 0      # nothing of it went in
    conn.close()


def test_memory_high_watermark_blocks_publishers(make_broker, tmp_path):
    b = make_broker("[main]\nvm_memory_high_watermark = 0.0000001\n")
    c = RawClient(b.host, b.port, capabilities={"connection.blocked": True}, handshake=False)
    c.handshake("guest", "guest", "/")
    _, blocked = c.read_frame()
    assert isinstance(blocked, commands.Connection.Blocked) and "memory" in blocked.reason
    # the API and the metrics say so too
    assert "memory alarm" in b.log_text()
    # a new queue is refused while the alarm is on
    c.open_channel(1)
    c.send(1, commands.Queue.Declare(queue=unique("new")))
    ch, close = wait_close(c)
    assert close.reply_code == 406 and "low on memory" in close.reply_text
    # raised back to a sane level: unblocked within a housekeeping round
    (tmp_path / "lavinmq.ini").write_text("[main]\nvm_memory_high_watermark = 0.9\n")
    b.proc.send_signal(signal.SIGHUP)
    c.sock.settimeout(5)
    kinds = []
    while commands.Connection.Unblocked not in kinds:
        got = c.read_frame()
        assert got is not None
        kinds.append(type(got[1]))
    c.close()


def test_empty_and_idle_queues_hold_no_mapping(make_broker):
    b = make_broker()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    prefix = unique("idle")
    for i in range(300):
        ch.queue_declare(f"{prefix}-{i}", durable=True)
    vdir = [d for d in os.listdir(b.data_dir) if len(d) == 40][0]
    from lavinmq.vhost import sha1
    qdir = os.path.join(b.data_dir, vdir, sha1(f"{prefix}-0"))
    assert not [f for f in os.listdir(qdir) if f.startswith("msgs.")]      # no segment until a message

    def mapped():
        with open(f"/proc/{b.proc.pid}/maps") as f:
            return sum(1 for line in f if "/msgs." in line)
    for i in range(300):
        ch.basic_publish("", f"{prefix}-{i}", b"m")
    ch.queue_declare(f"{prefix}-0", passive=True)
    assert mapped() >= 300
    deadline = time.monotonic() + 20
    while mapped() > 10 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert mapped() <= 10, "idle queues kept their segments mapped"
    # and they still work
    for i in range(0, 300, 50):
        m, _, body = ch.basic_get(f"{prefix}-{i}", auto_ack=True)
        assert body == b"m"
    ch.basic_publish("", f"{prefix}-1", b"again")
    assert ch.queue_declare(f"{prefix}-1", passive=True).method.message_count == 2
    for i in range(300):
        ch.queue_delete(f"{prefix}-{i}")
    conn.close()


def test_server_named_queue_needs_configure_right(make_broker):
    b = make_broker()
    name = unique("alice")
    add_user(b, name, perms=(r"^alice\.", ".*", ".*"))
    conn = pika.BlockingConnection(pika.URLParameters(b.url.replace("guest:guest", f"{name}:pw")))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        conn.channel().queue_declare("", exclusive=True)
    assert e.value.reply_code == 403
    assert conn.channel().queue_declare("alice.mine", exclusive=True).method.queue == "alice.mine"
    conn.close()

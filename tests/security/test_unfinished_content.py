"""Issue 25 finding 9, what a tenant's unfinished messages could hold:
open transactions were capped per channel (six channels each holding a
120 MiB transaction took +730 MB), an unfinished body could stay forever,
and one tenant's unfinished 95 MB bodies held the memory alarm (which
blocks every vhost's publishers) on for 3 min 21 s."""
import signal
import time

import pika
import pytest
from pamqp import commands, frame

from tests.helpers.rawclient import RawClient
from tests.security.conftest import call
from tests.security.test_oversize_frame import rss_mb
from tests.security.test_resource_limits import body_frame, header_frame, wait_close


def test_transactions_are_capped_per_connection(make_broker):
    b = make_broker("[amqp]\nmax_message_size = 1048576\n")
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    q = conn.channel().queue_declare("", exclusive=True).method.queue
    first, second = conn.channel(), conn.channel()
    first.tx_select()
    second.tx_select()
    first.basic_publish("", q, b"x" * 700_000)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        second.basic_publish("", q, b"y" * 700_000)
        second.tx_commit()
    assert e.value.reply_code == 406 and "transactions of this connection" in e.value.reply_text
    first.tx_commit()           # the first one's is whole
    assert conn.channel().queue_declare(q, passive=True).method.message_count == 1
    # and a rolled-back transaction gives its share back
    third = conn.channel()
    third.tx_select()
    third.basic_publish("", q, b"z" * 700_000)
    third.tx_rollback()
    third.basic_publish("", q, b"z" * 700_000)
    third.tx_commit()
    conn.close()


def _stall_a_body(b, declared, sent, queue="stall-q"):
    c = RawClient(b.host, b.port)
    c.open_channel(1)
    c.send(1, commands.Queue.Declare(queue=queue))
    c.expect(commands.Queue.DeclareOk)
    c.sendall(frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
              + header_frame(1, declared))
    chunk = b"s" * 128 * 1024
    for _ in range(sent // len(chunk)):
        c.sendall(body_frame(1, chunk))
    return c


def test_an_unfinished_body_must_make_progress(make_broker):
    b = make_broker("[amqp]\nunfinished_timeout = 2\n")
    c = _stall_a_body(b, 10_000_000, 1_000_000)
    # a slow one that keeps sending is left alone
    slow = _stall_a_body(b, 10_000_000, 0, queue="slow-q")
    started = time.monotonic()
    for _ in range(8):
        slow.sendall(body_frame(1, b"t" * 1000))
        time.sleep(0.5)
    ch, close = wait_close(c, timeout=5)
    assert ch == 0 and close.reply_code == 320 and "no progress" in close.reply_text, close
    assert time.monotonic() - started < 6
    slow.sock.settimeout(0.2)
    with pytest.raises(OSError):        # nothing for the slow one: still open
        slow.sock.recv(1)
    c.close()
    slow.close()


def _total_memory():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def test_unfinished_bodies_cannot_hold_the_memory_alarm(make_broker, tmp_path):
    b = make_broker()
    assert call(b, "PUT", "/api/vhosts/other")[0] in (201, 204)
    assert call(b, "PUT", "/api/permissions/other/guest", {"configure": ".*", "write": ".*", "read": ".*"})[0] \
        in (201, 204)
    victim = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@{b.host}:{b.port}/other"))
    vch = victim.channel()
    vch.confirm_delivery()
    vch.queue_declare("victim-q")
    # the watermark 60 MB above what the broker holds now
    watermark = (rss_mb(b.proc.pid) + 60) * 1024 * 1024 / _total_memory()
    (tmp_path / "lavinmq.ini").write_text(f"[main]\nvm_memory_high_watermark = {watermark:.6f}\n")
    b.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    # the attack: 95 MB of a 100 MB body, then nothing
    attacker = _stall_a_body(b, 100_000_000, 95 * 1024 * 1024)
    deadline = time.monotonic() + 10
    while "memory alarm:" not in b.log_text():
        assert time.monotonic() < deadline, "the alarm never went on:\n" + b.log_tail()
        time.sleep(0.2)
    # the other vhost's publisher is blocked only until the stalled bytes are shed
    # (a blocked connection's batch is still taken: the second publish is the one that waits)
    started = time.monotonic()
    for i in range(3):
        vch.basic_publish("", "victim-q", b"during the alarm %d" % i)     # each waits for its confirm
    waited = time.monotonic() - started
    assert waited < 10, f"confirms in another vhost waited {waited:.1f} s"
    ch, close = wait_close(attacker, timeout=5)
    assert close.reply_code == 320 and "low on memory" in close.reply_text
    assert "memory alarm cleared" in b.log_text()
    attacker.close()
    victim.close()

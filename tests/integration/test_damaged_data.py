"""Damaged files in a real broker's data directory: a corrupt segment closes
only its own queue (with a log line naming the file) and everything else
keeps working; a damaged definitions.amqp tail is cut at the last whole
frame; a torn segment tail and a zero-filled ack file are tolerated."""
import hashlib
import os

import pika
import pytest

from tests.conftest import BrokerProcess, unique


def sha1(s):
    return hashlib.sha1(s.encode()).hexdigest()


def queue_dir(b, queue, vhost="/"):
    return os.path.join(b.data_dir, sha1(vhost), sha1(queue))


def fill(b, queues, n):
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    ch.confirm_delivery()
    for q in queues:
        ch.queue_declare(q, durable=True)
        for i in range(n):
            ch.basic_publish("", q, b"%s-%05d" % (q.encode(), i) + b"x" * 200,
                             pika.BasicProperties(delivery_mode=2))
    c.close()


def drain(b, q):
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    bodies = []
    while (m := ch.basic_get(q, auto_ack=True))[0] is not None:
        bodies.append(m[2])
    c.close()
    return bodies


@pytest.fixture
def small_segments(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\nsegment_size = 16384\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    yield b
    if b.proc.poll() is None:
        b.stop()


def test_corrupt_segment_closes_only_its_queue(small_segments):
    b = small_segments
    bad, good = unique("bad"), unique("good")
    fill(b, [bad, good], 300)            # ~4 segments each
    assert b.stop() == 0
    seg = os.path.join(queue_dir(b, bad), "msgs.0000000002")
    with open(seg, "r+b") as f:          # garbage over the middle of a sealed segment
        f.seek(5000)
        f.write(b"\xff" * 8 + os.urandom(500))
    b.start()

    log = b.log_text()
    assert f"queue '{bad}' in vhost '/' closed" in log and seg in log
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    # still declared (its definition is kept), but refuses consumers with 404
    ch.queue_declare(bad, durable=True, passive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.basic_consume(bad, lambda *a: None)
    assert e.value.args[0] == 404 and "closed" in e.value.args[1]
    ch = c.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.basic_get(bad)
    assert e.value.args[0] == 404
    c.close()
    # every other queue works: all of good's messages, in order
    assert drain(b, good) == [b"%s-%05d" % (good.encode(), i) + b"x" * 200 for i in range(300)]
    fill(b, [good], 10)
    assert len(drain(b, good)) == 10
    # the damaged files are left as they were for the operator
    assert os.path.exists(seg)

    # after another restart the queue is still there and still closed;
    # deleting it removes its files
    b.restart()
    assert b.log_text().count(f"queue '{bad}' in vhost '/' closed") == 2
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    ch.queue_declare(bad, durable=True, passive=True)
    ch.queue_delete(bad)
    c.close()
    assert not os.path.exists(queue_dir(b, bad))
    b.check_clean()


def test_damaged_definitions_tail_and_torn_segment_tail(small_segments):
    b = small_segments
    q1, q2 = unique("q"), unique("q")
    fill(b, [q1, q2], 50)
    assert b.stop() == 0
    vdir = os.path.join(b.data_dir, sha1("/"))
    with open(os.path.join(vdir, "definitions.amqp"), "ab") as f:
        f.write(b"\x01\x00\x00\x00\x00\x00\x40\x00\x32\x00\x0a")      # half a queue.declare frame
    # the write segment of q1 cut short in the middle of its last record
    wseg = sorted(p for p in os.listdir(queue_dir(b, q1)) if p.startswith("msgs."))[-1]
    path = os.path.join(queue_dir(b, q1), wseg)
    last = open(path, "rb").read().rfind(q1.encode() + b"-00049")
    os.truncate(path, last + 10)
    # a zero-filled ack file next to it
    with open(os.path.join(queue_dir(b, q2), "acks.0000000001"), "wb") as f:
        f.write(b"\x00" * 64)
    b.start()
    log = b.log_text()
    assert "damaged tail" in log and "torn record" in log
    bodies = drain(b, q1)
    assert bodies == [b"%s-%05d" % (q1.encode(), i) + b"x" * 200 for i in range(49)]
    assert len(drain(b, q2)) == 50
    b.check_clean()

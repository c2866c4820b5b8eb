"""LavinMQ's message deduplication on queues: the x-deduplication-header
value (or the header a queue names) identifies a message; duplicates are
dropped and still confirmed; x-cache-size bounds the memory, x-cache-ttl
(and a per-message x-cache-ttl header) how long a value counts."""
import time

import pika

from tests.conftest import unique


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def bodies(ch, q):
    out = []
    while True:
        m, _, b = ch.basic_get(q, auto_ack=True)
        if m is None:
            return out
        out.append(b)


def test_queue_dedup_confirms_and_drops_duplicates(broker):
    c = connect(broker)
    ch = c.channel()
    q = ch.queue_declare(unique("dedup"), exclusive=True,
                         arguments={"x-message-deduplication": True}).method.queue
    ch.confirm_delivery()
    for key, body in (("a", b"1"), ("b", b"2"), ("a", b"3"), (None, b"4"), (None, b"5"), ("b", b"6")):
        headers = {"x-deduplication-header": key} if key else {}
        ch.basic_publish("", q, body, pika.BasicProperties(headers=headers))    # each one confirmed
    assert bodies(ch, q) == [b"1", b"2", b"4", b"5"]
    c.close()


def test_dedup_header_size_and_ttl(broker):
    c = connect(broker)
    ch = c.channel()
    q = ch.queue_declare(unique("dedup"), exclusive=True, arguments={
        "x-message-deduplication": True, "x-deduplication-header": "msg-id", "x-cache-size": 2,
        "x-cache-ttl": 300}).method.queue
    pub = lambda key, body, **h: ch.basic_publish("", q, body, pika.BasicProperties(headers={"msg-id": key, **h}))
    pub("k1", b"first")
    pub("k1", b"dup")
    pub("k2", b"two")
    pub("k3", b"three")          # the cache holds 2: k1 is forgotten
    pub("k1", b"k1 again")
    assert bodies(ch, q) == [b"first", b"two", b"three", b"k1 again"]
    pub("t", b"t1", **{"x-cache-ttl": 50})
    pub("t", b"t-dup")
    time.sleep(0.15)
    pub("t", b"t2")              # its own TTL passed
    assert bodies(ch, q) == [b"t1", b"t2"]
    c.close()

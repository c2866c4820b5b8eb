"""Queue semantics across a clean restart and a kill -9: priorities keep
their order, TTLs go on counting (also a message's own), dead-lettered
persistent messages are kept like any publish, x-expires still deletes."""
import time

import pika
import pytest

from tests.conftest import unique


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def drain(b, q):
    c = connect(b)
    ch = c.channel()
    out = []
    while True:
        m, p, body = ch.basic_get(q, auto_ack=True)
        if m is None:
            break
        out.append((p, body))
    c.close()
    return out


def count(b, q):
    c = connect(b)
    try:
        return c.channel().queue_declare(q, passive=True).method.message_count
    finally:
        c.close()


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_priority_order_survives(fresh_broker, how):
    b = fresh_broker
    q = unique("prio")
    c = connect(b)
    ch = c.channel()
    ch.queue_declare(q, durable=True, arguments={"x-max-priority": 10})
    ch.confirm_delivery()
    sent = [(i % 4 * 3, b"%02d" % i) for i in range(20)]
    for prio, body in sent:
        ch.basic_publish("", q, body, pika.BasicProperties(priority=prio, delivery_mode=2))
    c.close()
    b.restart() if how == "restart" else (b.kill(), b.start())
    want = [body for _, body in sorted(sent, key=lambda s: -s[0])]     # stable: FIFO within a level
    assert [body for _, body in drain(b, q)] == want


def test_ttls_go_on_counting_after_restart(fresh_broker):
    b = fresh_broker
    q, own, dlq = unique("ttl"), unique("own"), unique("dead")
    c = connect(b)
    ch = c.channel()
    ch.queue_declare(dlq, durable=True)
    ch.queue_declare(q, durable=True, arguments={"x-message-ttl": 2000, "x-dead-letter-exchange": "",
                                                 "x-dead-letter-routing-key": dlq})
    ch.queue_declare(own, durable=True)
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i, pika.BasicProperties(delivery_mode=2))
        ch.basic_publish("", own, b"%d" % i, pika.BasicProperties(delivery_mode=2, expiration="2000"))
    c.close()
    published = time.monotonic()
    b.restart()
    assert count(b, q) == 5 and count(b, own) == 5
    time.sleep(max(0.0, 2.5 - (time.monotonic() - published)))
    deadline = time.monotonic() + 3
    while count(b, dlq) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count(b, q) == 0
    dead = drain(b, dlq)
    assert [body for _, body in dead] == [b"%d" % i for i in range(5)]
    assert dead[0][0].headers["x-death"][0]["reason"] == "expired"
    assert drain(b, own) == []      # expired at the head on get


def test_dead_lettered_persistent_messages_survive_kill(fresh_broker):
    b = fresh_broker
    q, dlq = unique("src"), unique("dlq")
    c = connect(b)
    ch = c.channel()
    ch.queue_declare(dlq, durable=True)
    ch.queue_declare(q, durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("", q, b"%d" % i, pika.BasicProperties(delivery_mode=2))
    for _ in range(50):
        m, _, _ = ch.basic_get(q)
        ch.basic_reject(m.delivery_tag, requeue=False)
    ch.queue_declare(dlq, passive=True)     # a round trip: the rejects were processed
    c.close()
    b.kill()
    b.start()
    dead = drain(b, dlq)
    assert sorted(int(body) for _, body in dead) == list(range(50))
    assert all(p.headers["x-death"][0]["reason"] == "rejected" for p, _ in dead)
    assert count(b, q) == 0


def test_x_expires_counts_from_the_restart(fresh_broker):
    b = fresh_broker
    q = unique("exp")
    c = connect(b)
    c.channel().queue_declare(q, durable=True, arguments={"x-expires": 1500})
    c.close()
    b.restart()
    assert count(b, q) == 0             # still there, and this passive declare is a use
    time.sleep(2.2)
    c = connect(b)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        c.channel().queue_declare(q, passive=True)
    assert e.value.reply_code == 404
    c.close()
    b.restart()
    c = connect(b)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        c.channel().queue_declare(q, passive=True)      # the deletion was persisted
    c.close()

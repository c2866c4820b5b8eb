"""Queue semantics as RabbitMQ 3.10 has them, with pika: message TTL (queue,
message, policy), queue expiry, length limits and overflow modes,
dead-lettering with x-death, priority queues. Each test also runs against
RabbitMQ (LAVINMQ_TEST_URL) to check what it expects."""
import datetime
import time

import pika
import pytest

from tests.conftest import unique


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


@pytest.fixture
def ch(broker):
    c = connect(broker)
    yield c.channel()
    if c.is_open:
        c.close()


def get_all(ch, queue, ack=True):
    out = []
    while True:
        m, p, body = ch.basic_get(queue, auto_ack=ack)
        if m is None:
            return out
        out.append((m, p, body))


def wait_count(ch, queue, want, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        n = ch.queue_declare(queue, passive=True).method.message_count
        if n == want or time.monotonic() > deadline:
            return n
        time.sleep(0.02)


def dead_letter_setup(ch, **queue_args):
    """A queue whose dead letters go to a fanout exchange bound to a dlq."""
    q, dlx, dlq = unique("q"), unique("dlx"), unique("dlq")
    ch.exchange_declare(dlx, "fanout", auto_delete=True)
    ch.queue_declare(dlq, exclusive=True)
    ch.queue_bind(dlq, dlx)
    ch.queue_declare(q, exclusive=True, arguments={"x-dead-letter-exchange": dlx, **queue_args})
    return q, dlx, dlq


# -- TTL ------------------------------------------------------------------------------

def test_queue_ttl_expires_and_dead_letters_on_time(ch):
    q, dlx, dlq = dead_letter_setup(ch, **{"x-message-ttl": 300})
    arrivals = []
    sent = time.time()
    for i in range(3):
        ch.basic_publish("", q, b"m%d" % i, pika.BasicProperties(headers={"h": "v"}))
    ch.basic_consume(dlq, lambda c, m, p, b: arrivals.append((time.time(), m, p, b)), auto_ack=True)
    deadline = time.monotonic() + 5
    while len(arrivals) < 3 and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.05)
    assert [a[3] for a in arrivals] == [b"m0", b"m1", b"m2"]
    late = arrivals[-1][0] - sent - 0.3
    assert -0.01 < late < 0.25, f"expired {late * 1000:.0f} ms after its TTL"
    _, m, p, _ = arrivals[0]
    assert m.exchange == dlx and m.routing_key == q
    assert p.expiration is None
    assert p.headers["h"] == "v"
    death = p.headers["x-death"]
    assert len(death) == 1
    d = death[0]
    assert d["count"] == 1 and d["reason"] == "expired" and d["queue"] == q
    assert d["exchange"] == "" and d["routing-keys"] == [q]
    assert isinstance(d["time"], datetime.datetime)
    assert "original-expiration" not in d
    assert p.headers["x-first-death-queue"] == q
    assert p.headers["x-first-death-reason"] == "expired"
    assert p.headers["x-first-death-exchange"] == ""
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_message_expiration_on_a_plain_queue(ch):
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="100"))
    ch.basic_publish("", q, b"long", pika.BasicProperties(expiration="60000"))
    time.sleep(0.3)
    got = get_all(ch, q)
    assert [b for _, _, b in got] == [b"long"]
    assert got[0][1].expiration == "60000"      # still there while the message lives


def test_message_expiration_dead_letter_keeps_original_expiration(ch):
    q, dlx, dlq = dead_letter_setup(ch)
    ch.basic_publish("", q, b"x", pika.BasicProperties(expiration="50"))
    assert wait_count(ch, dlq, 1) == 1
    _, p, _ = get_all(ch, dlq)[0]
    assert p.expiration is None
    assert p.headers["x-death"][0]["original-expiration"] == "50"


def test_head_blocks_expiry_behind_it_as_rabbitmq(ch):
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"forever")
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="50"))
    time.sleep(0.3)
    # not at the head: still counted, dropped when it gets there
    assert ch.queue_declare(q, passive=True).method.message_count == 2
    assert [b for _, _, b in get_all(ch, q)] == [b"forever"]


def test_ttl_zero_delivers_now_or_drops(ch):
    q, dlx, dlq = dead_letter_setup(ch, **{"x-message-ttl": 0})
    for i in range(5):
        ch.basic_publish("", q, b"nobody%d" % i)
    assert wait_count(ch, dlq, 5) == 5
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    for i in range(5):
        ch.basic_publish("", q, b"live%d" % i)
    deadline = time.monotonic() + 5
    while len(got) < 5 and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.05)
    assert got == [b"live%d" % i for i in range(5)]


# -- queue expiry ----------------------------------------------------------------------

def test_unused_queue_is_deleted(broker):
    c = connect(broker)
    ch = c.channel()
    q, busy = unique("expires"), unique("busy")
    ch.queue_declare(q, arguments={"x-expires": 400})
    ch.queue_declare(busy, arguments={"x-expires": 400})
    c.channel().basic_consume(busy, lambda *a: None)
    time.sleep(0.2)
    ch.queue_declare(q, arguments={"x-expires": 400})     # a redeclare is a use
    time.sleep(0.3)
    assert ch.queue_declare(q, passive=True).method.queue == q
    time.sleep(0.5)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare(q, passive=True)
    assert e.value.reply_code == 404
    ch = c.channel()
    assert ch.queue_declare(busy, passive=True).method.consumer_count == 1
    ch.queue_delete(busy)
    c.close()


# -- length limits ------------------------------------------------------------------------

def test_max_length_drop_head_dead_letters_maxlen(ch):
    q, dlx, dlq = dead_letter_setup(ch, **{"x-max-length": 3})
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    assert wait_count(ch, dlq, 2) == 2
    assert [b for _, _, b in get_all(ch, q)] == [b"2", b"3", b"4"]
    dead = get_all(ch, dlq)
    assert [b for _, _, b in dead] == [b"0", b"1"]
    assert dead[0][1].headers["x-death"][0]["reason"] == "maxlen"


def test_max_length_bytes_counts_bodies(ch):
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-length-bytes": 25}).method.queue
    for i in range(4):
        ch.basic_publish("", q, b"%010d" % i)
    assert [b for _, _, b in get_all(ch, q)] == [b"%010d" % 2, b"%010d" % 3]


def test_reject_publish_nacks_confirmed_and_drops_unconfirmed(broker):
    c = connect(broker)
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-length": 2,
                                                         "x-overflow": "reject-publish"}).method.queue
    plain = c.channel()
    for i in range(3):
        plain.basic_publish("", q, b"plain%d" % i)
    assert wait_count(ch, q, 2) == 2
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"over")
    assert [b for _, _, b in get_all(ch, q)] == [b"plain0", b"plain1"]
    ch.basic_publish("", q, b"room again")
    assert [b for _, _, b in get_all(ch, q)] == [b"room again"]
    c.close()


def test_reject_publish_dlx_nacks_and_dead_letters(ch):
    q, dlx, dlq = dead_letter_setup(ch, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"in")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"out")
    dead = get_all(ch, dlq)
    assert [b for _, _, b in dead] == [b"out"]
    assert dead[0][1].headers["x-death"][0]["reason"] == "maxlen"


# -- dead-lettering -------------------------------------------------------------------------

def test_rejected_and_nacked_are_dead_lettered_with_routing_key(ch):
    q, dlx, dlq = dead_letter_setup(ch, **{"x-dead-letter-routing-key": "dl-key"})
    for body in (b"reject", b"nack", b"requeue"):
        ch.basic_publish("", q, body, pika.BasicProperties(headers={"CC": ["also"]}))
    m1, _, _ = ch.basic_get(q)
    ch.basic_reject(m1.delivery_tag, requeue=False)
    m2, _, _ = ch.basic_get(q)
    ch.basic_nack(m2.delivery_tag, requeue=False)
    m3, _, _ = ch.basic_get(q)
    ch.basic_nack(m3.delivery_tag, requeue=True)
    dead = get_all(ch, dlq)
    assert [b for _, _, b in dead] == [b"reject", b"nack"]
    m, p, _ = dead[0]
    assert m.routing_key == "dl-key"
    assert "CC" not in p.headers       # a dead-letter routing key replaces the CC keys, as RabbitMQ
    assert p.headers["x-death"][0]["reason"] == "rejected"
    assert p.headers["x-death"][0]["routing-keys"] == [q, "also"]
    assert ch.queue_declare(q, passive=True).method.message_count == 1


def test_x_death_counts_and_moves_to_front(ch):
    """a -> (reject) -> b -> (reject) -> a -> (reject) -> b: the entry for
    a/rejected is counted up and moved to the front, as RabbitMQ 3.10."""
    a, b = unique("a"), unique("b")
    to_a, to_b = unique("to-a"), unique("to-b")
    ch.exchange_declare(to_a, "fanout", auto_delete=True)
    ch.exchange_declare(to_b, "fanout", auto_delete=True)
    ch.queue_declare(a, exclusive=True, arguments={"x-dead-letter-exchange": to_b})
    ch.queue_declare(b, exclusive=True, arguments={"x-dead-letter-exchange": to_a})
    ch.queue_bind(a, to_a)
    ch.queue_bind(b, to_b)
    ch.basic_publish("", a, b"ping-pong")
    for q in (a, b, a):
        assert wait_count(ch, q, 1) == 1
        m, _, _ = ch.basic_get(q)
        ch.basic_reject(m.delivery_tag, requeue=False)
    assert wait_count(ch, b, 1) == 1
    _, p, _ = ch.basic_get(b, auto_ack=True)
    death = p.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in death] == [(a, "rejected", 2), (b, "rejected", 1)]
    assert death[0]["exchange"] == "" and death[0]["routing-keys"] == [a]
    assert p.headers["x-first-death-queue"] == a


def test_expiry_cycle_without_rejection_is_dropped(ch):
    q, back = unique("cycle"), unique("back")
    ch.exchange_declare(back, "fanout", auto_delete=True)
    ch.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": back})
    ch.queue_bind(q, back)
    ch.basic_publish("", q, b"round")
    time.sleep(0.5)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_missing_dead_letter_exchange_drops(ch):
    q = ch.queue_declare("", exclusive=True, arguments={"x-dead-letter-exchange": unique("none"),
                                                         "x-message-ttl": 10}).method.queue
    ch.basic_publish("", q, b"gone")
    assert wait_count(ch, q, 0) == 0


# -- priorities ---------------------------------------------------------------------------------

def test_priority_queue_order(ch):
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-priority": 5}).method.queue
    sent = [(0, b"a0"), (5, b"b5"), (1, b"c1"), (9, b"d9"), (5, b"e5"), (None, b"f-")]
    for prio, body in sent:
        ch.basic_publish("", q, body, pika.BasicProperties(priority=prio))
    assert wait_count(ch, q, 6) == 6
    # 9 is above x-max-priority: it counts as 5, after the 5s sent before it
    got = [b for _, _, b in get_all(ch, q, ack=False)]
    assert got == [b"b5", b"d9", b"e5", b"c1", b"a0", b"f-"]
    ch.basic_recover(requeue=True)
    again = get_all(ch, q)
    assert [b for _, _, b in again] == got          # requeued messages keep their place
    assert all(m.redelivered for m, _, _ in again)


def test_priority_zero_is_a_plain_queue(ch):
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-priority": 0}).method.queue
    for prio in (1, 9, 3):
        ch.basic_publish("", q, b"%d" % prio, pika.BasicProperties(priority=prio))
    assert [b for _, _, b in get_all(ch, q)] == [b"1", b"9", b"3"]

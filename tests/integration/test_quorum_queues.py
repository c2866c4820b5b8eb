"""Quorum queues as Celery and RabbitMQ use them, with pika: the declaration
rules and RabbitMQ 3.10's refusals (texts compared with Debian's
rabbitmq-server 3.10), the type in the API, RabbitMQ 4's delivery limit
(20 unset, off when negative) with dead-lettering of the poison message,
x-dead-letter-strategy, the global-QoS refusal, and TTLs past 2^31 - 1 ms
(Celery's native delayed delivery declares 134,217,728,000). Tests marked
`rabbitmq4` expect what RabbitMQ 4 does and 3.10 does not (LAVINMQ_TEST_URL
pointed at a 3.10 skips them)."""
import base64
import json
import time
import urllib.request

import pika
import pytest

from lavinmq.queue.kinds import queue_type
from lavinmq.queue.quorum import DEFAULT_DELIVERY_LIMIT
from tests.conftest import unique

Q = {"x-queue-type": "quorum"}
CELERY_DELAYED_TTL = 2 ** 27 * 1000     # kombu's celery_delayed_27
MAX_EXPIRY = 315_360_000_000            # RabbitMQ 3.10's bound (measured)


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


@pytest.fixture
def conn(broker):
    c = connect(broker)
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def rabbitmq4(broker):
    if broker.external:
        pytest.skip("RabbitMQ 4's behaviour (3.10 differs)")


def refusal(conn, name, **kw):
    """The channel error a queue.declare gets, as (code, text)."""
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare(name, **kw)
    return e.value.reply_code, e.value.reply_text


def api_queue(b, name):
    req = urllib.request.Request(f"{b.http_url}/api/queues/%2F/{name}")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def dead_letter_setup(ch, **args):
    q, dlx, dlq = unique("qq"), unique("dlx"), unique("dlq")
    ch.exchange_declare(dlx, "fanout", auto_delete=True)
    ch.queue_declare(dlq, exclusive=True)
    ch.queue_bind(dlq, dlx)
    ch.queue_declare(q, durable=True, arguments={**Q, "x-dead-letter-exchange": dlx, **args})
    return q, dlq


def reject_until_gone(ch, q, most=50):
    """Get and requeue q's one message until it is gone -> the x-delivery-count
    of each delivery (None on the first)."""
    counts = []
    for _ in range(most):
        m, p, _body = ch.basic_get(q)
        if m is None:
            break
        counts.append((p.headers or {}).get("x-delivery-count"))
        ch.basic_reject(m.delivery_tag, requeue=True)
    return counts


# -- declaration ----------------------------------------------------------------------------

def test_refusals_are_rabbitmqs(conn):
    name = unique("qq")
    where = f"for queue '{name}' in vhost '/'"
    assert refusal(conn, name, durable=False, arguments=Q) == (
        406, f"PRECONDITION_FAILED - invalid property 'non-durable' {where}")
    assert refusal(conn, name, durable=True, exclusive=True, arguments=Q) == (
        406, f"PRECONDITION_FAILED - invalid property 'exclusive-owner' {where}")
    # auto-delete is named first, then exclusive, as RabbitMQ checks them
    assert refusal(conn, name, durable=False, exclusive=True, auto_delete=True, arguments=Q) == (
        406, f"PRECONDITION_FAILED - invalid property 'auto-delete' {where}")
    for key, value in (("x-max-priority", 5), ("x-queue-mode", "lazy"), ("x-queue-version", 2),
                       ("x-max-age", "1D")):
        assert refusal(conn, name, durable=False, arguments={**Q, key: value}) == (
            406, f"PRECONDITION_FAILED - invalid arg '{key}' {where} of queue type rabbit_quorum_queue")
    # server-named: refused before anything else
    assert refusal(conn, "", durable=False, arguments={**Q, "x-max-priority": 5}) == (
        406, "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue")
    code, text = refusal(conn, name, durable=True, arguments={**Q, "x-dead-letter-strategy": "bogus"})
    assert code == 406 and "x-dead-letter-strategy" in text
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.queue_declare(name, passive=True)        # nothing was made


def test_declared_durable_with_celerys_arguments(broker, conn):
    """What kombu declares for native delayed delivery (celery_delayed_27)."""
    ch = conn.channel()
    name = unique("celery_delayed_27")
    args = {**Q, "x-message-ttl": CELERY_DELAYED_TTL, "x-dead-letter-exchange": unique("celery_delayed_26"),
            "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
    ch.queue_declare(name, durable=True, arguments=args)
    ch.queue_declare(name, durable=True, arguments=args)       # equivalent: fine
    for strategy in ("at-most-once", "at-least-once"):
        ch.queue_declare(unique("qq"), durable=True, arguments={**Q, "x-dead-letter-strategy": strategy})
    only = unique("qq")
    ch.queue_declare(only, durable=True, arguments=Q)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare(only, durable=True)        # without x-queue-type: not the same queue (as 3.10)
    assert e.value.reply_code == 406 and "x-queue-type" in e.value.reply_text
    conn.channel().queue_delete(only)
    if not broker.external:
        shape = api_queue(broker, name)
        assert (shape["type"], shape["durable"], shape["exclusive"], shape["auto_delete"]) == (
            "quorum", True, False, False)
    conn.channel().queue_delete(name)


def test_api_type_of_each_kind(api_broker):
    c = connect(api_broker)
    ch = c.channel()
    names = {kind: unique(kind) for kind in ("classic", "quorum", "stream")}
    for kind, name in names.items():
        ch.queue_declare(name, durable=True, arguments={} if kind == "classic" else {"x-queue-type": kind})
    for kind, name in names.items():
        assert api_queue(api_broker, name)["type"] == kind
        ch.queue_delete(name)
    c.close()
    assert [queue_type(a) for a in ({}, None, {"x-queue-type": b"quorum"}, {"x-queue-type": "mqtt"})] == [
        "classic", "classic", "quorum", "mqtt"]


@pytest.fixture
def api_broker(broker):
    if broker.external:
        pytest.skip("needs our broker's HTTP port")
    return broker


# -- delivery limit -----------------------------------------------------------------------

def test_explicit_delivery_limit_dead_letters_the_poison_message(conn):
    """Limit 2: three deliveries, then dead-lettered with reason delivery_limit
    (as RabbitMQ 3.10 does it; 3.10 also puts x-delivery-count 0 on the first)."""
    ch = conn.channel()
    q, dlq = dead_letter_setup(ch, **{"x-delivery-limit": 2})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"poison", pika.BasicProperties(delivery_mode=2))
    counts = reject_until_gone(ch, q)
    assert len(counts) == 3 and counts[1:] == [1, 2]
    m, p, body = ch.basic_get(dlq, auto_ack=True)
    assert body == b"poison"
    assert p.headers["x-death"][0]["reason"] == "delivery_limit"
    assert p.headers["x-first-death-reason"] == "delivery_limit"
    ch.queue_delete(q)


def test_delivery_limit_counts_requeues_by_channel_close(conn):
    ch = conn.channel()
    q, dlq = dead_letter_setup(ch, **{"x-delivery-limit": 1})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"crashy", pika.BasicProperties(delivery_mode=2))
    seen = 0
    for _ in range(5):
        other = conn.channel()
        m, _p, _body = other.basic_get(q)
        if m is None:
            break
        seen += 1
        other.close()       # the worker dies holding it: requeued, and counted
    assert seen == 2
    assert ch.basic_get(dlq, auto_ack=True)[2] == b"crashy"
    ch.queue_delete(q)


def test_default_delivery_limit_is_rabbitmq4s(conn, rabbitmq4):
    ch = conn.channel()
    q, dlq = dead_letter_setup(ch)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"poison", pika.BasicProperties(delivery_mode=2))
    counts = reject_until_gone(ch, q)
    assert len(counts) == DEFAULT_DELIVERY_LIMIT + 1 == 21
    assert counts == [None] + list(range(1, 21))
    assert ch.basic_get(dlq, auto_ack=True)[1].headers["x-death"][0]["reason"] == "delivery_limit"
    ch.queue_delete(q)


def test_negative_delivery_limit_turns_it_off_unless_a_policy_sets_one(broker, conn, rabbitmq4):
    ch = conn.channel()
    q, dlq = dead_letter_setup(ch, **{"x-delivery-limit": -1})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"forever", pika.BasicProperties(delivery_mode=2))
    assert len(reject_until_gone(ch, q, most=30)) == 30      # still there
    assert ch.basic_get(dlq)[0] is None
    # a policy's delivery-limit applies over the negative argument (RabbitMQ 4's resolution)
    from tests.integration.test_http_api import call
    policy = unique("pol")
    assert call(broker, "PUT", f"/api/policies/%2F/{policy}",
                {"pattern": f"^{q}$", "apply-to": "queues", "definition": {"delivery-limit": 40}})[0] in (201, 204)
    try:
        deadline = time.monotonic() + 5
        while api_queue(broker, q)["policy"] != policy and time.monotonic() < deadline:
            time.sleep(0.05)
        # counted from when a limit applies (RabbitMQ 4 counts from the first): at most 41 more
        counts = reject_until_gone(ch, q, most=60)
        assert 0 < len(counts) <= 41 and counts[-1] == len(counts) - 1 + counts[1] - 1
        assert ch.basic_get(dlq, auto_ack=True)[2] == b"forever"
    finally:
        call(broker, "DELETE", f"/api/policies/%2F/{policy}")
    ch.queue_delete(q)


def test_classic_queue_has_no_default_delivery_limit(conn):
    ch = conn.channel()
    q = unique("classic")
    ch.queue_declare(q, exclusive=True)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"x")
    assert len(reject_until_gone(ch, q, most=25)) == 25


# -- consumers ------------------------------------------------------------------------------

def test_global_qos_is_refused_on_consume(broker, conn):
    ch = conn.channel()
    q = unique("qq")
    ch.queue_declare(q, durable=True, arguments=Q)
    ch.basic_qos(prefetch_count=0, global_qos=True)     # no limit: fine
    ch.basic_consume(q, lambda *a: None)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=4, global_qos=False)    # per consumer: fine
    ch.basic_consume(q, lambda *a: None)
    ch.basic_qos(prefetch_count=4, global_qos=True)
    assert ch.basic_get(q)[0] is None                   # basic.get has no limiter: fine
    classic = unique("classic")
    ch.queue_declare(classic, exclusive=True)
    ch.basic_consume(classic, lambda *a: None)          # a classic queue takes it
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
        ch.basic_consume(q, lambda *a: None)
        conn.process_data_events(1)
    assert e.value.reply_code == 540
    assert e.value.reply_text == f"NOT_IMPLEMENTED - queue '{q}' in vhost '/' does not support global qos"
    c = connect(broker)
    c.channel().queue_delete(q)
    c.close()


# -- TTLs past 2^31 - 1 ms --------------------------------------------------------------------

@pytest.mark.parametrize("args", [{}, Q], ids=["classic", "quorum"])
def test_ttls_take_rabbitmqs_range(conn, args):
    ch = conn.channel()
    for key, value in (("x-message-ttl", CELERY_DELAYED_TTL), ("x-message-ttl", MAX_EXPIRY),
                       ("x-expires", CELERY_DELAYED_TTL), ("x-expires", MAX_EXPIRY)):
        name = unique("ttl")
        ch.queue_declare(name, durable=True, arguments={**args, key: value})
        ch.queue_delete(name)
    for key in ("x-message-ttl", "x-expires"):
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            ch.queue_declare(unique("ttl"), durable=True, arguments={**args, key: MAX_EXPIRY + 1})
        assert e.value.reply_code == 406 and key in e.value.reply_text


def test_long_ttls_keep_messages_and_short_ones_still_expire(conn):
    """A TTL past 2^32 ms is not cut to a small one on the way (a wrap to a
    short timer would expire the message at once)."""
    ch = conn.channel()
    long_q, short_q = unique("long"), unique("short")
    ch.queue_declare(long_q, exclusive=True, arguments={"x-message-ttl": 2 ** 32 + 50})
    ch.queue_declare(short_q, exclusive=True, arguments={"x-message-ttl": 50})
    ch.confirm_delivery()
    for q in (long_q, short_q):
        ch.basic_publish("", q, b"x")
    ch.basic_publish("", short_q, b"own", pika.BasicProperties(expiration=str(CELERY_DELAYED_TTL)))
    time.sleep(0.4)
    assert ch.queue_declare(long_q, passive=True).method.message_count == 1
    # the short queue TTL wins over the message's long expiration
    assert ch.queue_declare(short_q, passive=True).method.message_count == 0
    plain = unique("plain")
    ch.queue_declare(plain, exclusive=True)
    ch.basic_publish("", plain, b"own", pika.BasicProperties(expiration=str(CELERY_DELAYED_TTL)))
    time.sleep(0.2)
    m = ch.basic_get(plain, auto_ack=True)
    assert m[2] == b"own" and m[1].expiration == str(CELERY_DELAYED_TTL)

"""LavinMQ's delayed messages: x-delayed-message exchanges (with
x-delayed-type) and x-delayed-exchange: true on any type. A message with an
x-delay header (ms) is routed when its time comes, in order of due time;
durable ones survive a restart and a kill -9; the internal queue
amq.delayed.<exchange> shows them. Also exchange-level deduplication."""
import time

import pika
import pytest

from tests.conftest import unique
from tests.integration.test_http_api import call


@pytest.fixture
def own(broker):
    if broker.external:
        pytest.skip("LavinMQ's delayed exchange is not RabbitMQ's core")
    return broker


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def collect(conn, got, want, timeout=10):
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.01)
    return got


def test_delayed_messages_come_in_order_of_due_time(own):
    c = connect(own)
    ch = c.channel()
    ex, q = unique("delayed"), unique("q")
    ch.exchange_declare(ex, "x-delayed-message", arguments={"x-delayed-type": "direct"}, auto_delete=True)
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, ex, "k")
    got = []
    ch.basic_consume(q, lambda _c, m, p, body: got.append((time.monotonic(), body)), auto_ack=True)
    sent = time.monotonic()
    for delay in (600, 200, 400):
        ch.basic_publish(ex, "k", b"%d" % delay, pika.BasicProperties(headers={"x-delay": delay}))
    ch.basic_publish(ex, "k", b"now")                      # no x-delay: routed at once
    ch.basic_publish(ex, "k", b"zero", pika.BasicProperties(headers={"x-delay": 0}))
    collect(c, got, 5)
    assert [b for _, b in got] == [b"now", b"zero", b"200", b"400", b"600"]
    for (at, body) in got[2:]:
        late = (at - sent) * 1000 - int(body)
        assert -5 < late < 150, f"{body} arrived {late:.0f} ms after its time"
    # the broker's definition as LavinMQ keeps it, and the internal queue
    shape = call(own, "GET", f"/api/exchanges/%2F/{ex}")[1]
    assert shape["type"] == "direct" and shape["arguments"]["x-delayed-exchange"] is True
    ch.basic_publish(ex, "k", b"later", pika.BasicProperties(headers={"x-delay": 60000}))
    ch.queue_declare(q, passive=True)
    status, dq = call(own, "GET", f"/api/queues/%2F/amq.delayed.{ex}")
    assert status == 200 and dq["messages"] == 1
    # clients cannot use it as a queue
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        c.channel().basic_get(f"amq.delayed.{ex}")
    assert e.value.reply_code == 403
    c.close()


def test_delayed_exchange_argument_on_a_topic_exchange(own):
    c = connect(own)
    ch = c.channel()
    ex, q = unique("dtopic"), unique("q")
    ch.exchange_declare(ex, "topic", arguments={"x-delayed-exchange": True}, auto_delete=True)
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, ex, "a.#")
    ch.basic_publish(ex, "a.b", b"later", pika.BasicProperties(headers={"x-delay": 150}))
    ch.basic_publish(ex, "x.y", b"nowhere", pika.BasicProperties(headers={"x-delay": 100}))
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    time.sleep(0.4)
    m, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"later"
    assert ch.basic_get(q)[0] is None
    # a redeclare as x-delayed-message is equivalent
    ch.exchange_declare(ex, "x-delayed-message", arguments={"x-delayed-type": "topic"}, auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        c.channel().exchange_declare(unique("bad"), "x-delayed-message")
    assert e.value.reply_code == 406 and "x-delayed-type" in e.value.reply_text
    c.close()


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_delayed_messages_survive(fresh_broker, how):
    b = fresh_broker
    c = connect(b)
    ch = c.channel()
    ex, q = unique("dur"), unique("q")
    ch.exchange_declare(ex, "x-delayed-message", durable=True, arguments={"x-delayed-type": "fanout"})
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, ex)
    ch.confirm_delivery()
    published = time.monotonic()
    ch.basic_publish(ex, "", b"in five", pika.BasicProperties(delivery_mode=2, headers={"x-delay": 5000}))
    ch.basic_publish(ex, "", b"in two", pika.BasicProperties(delivery_mode=2, headers={"x-delay": 2000}))
    c.close()
    if how == "kill":
        b.kill()
        b.start()
    else:
        b.restart()
    c = connect(b)
    ch = c.channel()
    got = []
    ch.basic_consume(q, lambda _c, m, p, body: got.append((time.monotonic() - published, body)),
                     auto_ack=True)
    collect(c, got, 2, timeout=12)
    assert [body for _, body in got] == [b"in two", b"in five"]
    assert 1.9 < got[0][0] < 2.6 and 4.9 < got[1][0] < 5.6, got
    c.close()


def test_exchange_deduplication(own):
    c = connect(own)
    ch = c.channel()
    ex, q = unique("dedupx"), unique("q")
    ch.exchange_declare(ex, "fanout", auto_delete=True, arguments={
        "x-message-deduplication": True, "x-deduplication-header": "id"})
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, ex)
    ch.confirm_delivery()
    for key in ("a", "b", "a", "c", "b"):
        ch.basic_publish(ex, "", key.encode(), pika.BasicProperties(headers={"id": key}))
    bodies = []
    while True:
        m, _, body = ch.basic_get(q, auto_ack=True)
        if m is None:
            break
        bodies.append(body)
    assert bodies == [b"a", b"b", b"c"]
    c.close()

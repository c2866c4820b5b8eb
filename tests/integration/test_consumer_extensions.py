"""LavinMQ's consumer-side extensions, with pika: single active consumer,
delivery limit with x-delivery-count, consumer timeout, queue pause and
resume over HTTP."""
import time

import pika
import pytest

from tests.conftest import BrokerProcess, unique
from tests.integration.test_http_api import call


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def pump(conn, until, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    return until()


# -- single active consumer ---------------------------------------------------------------

def test_single_active_consumer_hands_over_in_subscription_order(broker):
    c = connect(broker)
    ch = c.channel()
    q = unique("sac")
    ch.queue_declare(q, exclusive=True, arguments={"x-single-active-consumer": True})
    got = {"a": [], "b": [], "c": []}
    chans = {}
    for name in ("a", "b", "c"):
        chans[name] = c.channel()
        chans[name].basic_consume(q, lambda _c, m, p, body, n=name: got[n].append(body), auto_ack=True,
                                  consumer_tag=name)
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    assert pump(c, lambda: len(got["a"]) == 5)
    assert got["b"] == got["c"] == []
    if not broker.external:
        consumers = {x["consumer_tag"]: x["active"] for x in
                     call(broker, "GET", f"/api/queues/%2F/{q}")[1]["consumer_details"]}
        assert consumers == {"a": True, "b": False, "c": False}
    chans["a"].basic_cancel("a")
    for i in range(5, 8):
        ch.basic_publish("", q, b"%d" % i)
    assert pump(c, lambda: len(got["b"]) == 3)
    assert got["c"] == []
    chans["b"].close()
    ch.basic_publish("", q, b"last")
    assert pump(c, lambda: got["c"] == [b"last"])
    c.close()


# -- delivery limit ---------------------------------------------------------------------------

def test_delivery_limit_counts_and_dead_letters(broker):
    if broker.external:
        pytest.skip("RabbitMQ 3.10 has delivery limits on quorum queues only")
    c = connect(broker)
    ch = c.channel()
    q, dlq = unique("limited"), unique("dlq")
    ch.queue_declare(dlq, exclusive=True)
    ch.queue_declare(q, exclusive=True, arguments={"x-delivery-limit": 2, "x-dead-letter-exchange": "",
                                                   "x-dead-letter-routing-key": dlq})
    ch.basic_publish("", q, b"poison", pika.BasicProperties(headers={"keep": "me"}))
    counts = []
    for _ in range(3):
        m, p, body = ch.basic_get(q)
        assert body == b"poison"
        counts.append((p.headers or {}).get("x-delivery-count"))
        assert p.headers["keep"] == "me"
        ch.basic_nack(m.delivery_tag, requeue=True)
    assert counts == [None, 1, 2]       # not on the first delivery, as LavinMQ
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    m, p, _ = ch.basic_get(dlq, auto_ack=True)
    assert p.headers["x-death"][0]["reason"] == "delivery_limit"
    c.close()


def test_delivery_limit_from_policy_without_dead_letter_drops(broker):
    if broker.external:
        pytest.skip("uses our HTTP API")
    c = connect(broker)
    ch = c.channel()
    prefix = unique("lim")
    q = prefix + ".q"
    ch.queue_declare(q, exclusive=True)
    name = unique("p")
    call(broker, "PUT", f"/api/policies/%2F/{name}", {"pattern": f"^{prefix}", "definition": {"delivery-limit": 0}})
    ch.basic_publish("", q, b"once")
    m, _, _ = ch.basic_get(q)
    ch.basic_reject(m.delivery_tag, requeue=True)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    call(broker, "DELETE", f"/api/policies/%2F/{name}")
    c.close()


# -- consumer timeout -----------------------------------------------------------------------------

def test_consumer_timeout_closes_channel_and_requeues(broker):
    if broker.external:
        pytest.skip("RabbitMQ 3.10 has no x-consumer-timeout argument")
    c = connect(broker)
    ch = c.channel()
    q = unique("slow")
    ch.queue_declare(q, exclusive=True, arguments={"x-consumer-timeout": 500})
    ch.basic_publish("", q, b"held")
    slow = c.channel()
    got = []
    slow.basic_consume(q, lambda _c, m, p, b: got.append(m))
    assert pump(c, lambda: got)
    closed = []
    slow._impl.add_on_close_callback(lambda chan, reason: closed.append(reason))
    assert pump(c, lambda: closed, timeout=4)
    assert closed[0].reply_code == 406 and "timed out" in closed[0].reply_text
    # requeued: another consumer gets it, redelivered
    m, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"held" and m.redelivered
    c.close()


def test_consumer_timeout_setting(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\nconsumer_timeout = 400\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        c = connect(b)
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"x")
        m, _, _ = ch.basic_get(q)
        closed = []
        ch._impl.add_on_close_callback(lambda chan, reason: closed.append(reason))
        assert pump(c, lambda: closed, timeout=4)
        assert closed[0].reply_code == 406
        c.close()
    finally:
        b.stop()


# -- pause and resume --------------------------------------------------------------------------------

def test_pause_and_resume_survive_restart(fresh_broker):
    b = fresh_broker
    c = connect(b)
    ch = c.channel()
    q = unique("pausable")
    ch.queue_declare(q, durable=True)
    assert call(b, "PUT", f"/api/queues/%2F/{q}/pause")[0] == 204
    assert call(b, "GET", f"/api/queues/%2F/{q}")[1]["state"] == "paused"
    got = []
    ch.basic_consume(q, lambda _c, m, p, body: got.append(body), auto_ack=True)
    ch.basic_publish("", q, b"waiting")
    assert not pump(c, lambda: got, timeout=0.5)
    c.close()
    b.restart()
    assert call(b, "GET", f"/api/queues/%2F/{q}")[1]["state"] == "paused"
    c = connect(b)
    ch = c.channel()
    ch.basic_consume(q, lambda _c, m, p, body: got.append(body), auto_ack=True)
    assert not pump(c, lambda: got, timeout=0.3)
    assert call(b, "PUT", f"/api/queues/%2F/{q}/resume")[0] == 204
    assert pump(c, lambda: got == [b"waiting"])
    c.close()
    b.restart()
    assert call(b, "GET", f"/api/queues/%2F/{q}")[1]["state"] == "running"

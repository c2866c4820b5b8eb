"""Issue 25 finding 9: a `consumer-timeout` policy seemed to have no
effect. It did not, for deliveries a consumer already held when the
policy came: they were only timed when the queue had a timeout at the
moment of delivery."""
import time

import pika
import pytest

from tests.security.conftest import call


@pytest.mark.parametrize("order", ["policy, then delivery", "delivery, then policy"])
def test_consumer_timeout_policy_takes_effect(make_broker, order):
    b = make_broker()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare("ct-q")

    def set_policy():
        assert call(b, "PUT", "/api/policies/%2F/ct", {"pattern": "^ct-", "apply-to": "queues",
                                                       "definition": {"consumer-timeout": 1000}})[0] == 201
        assert call(b, "GET", "/api/queues/%2F/ct-q")[1]["effective_policy_definition"] == {"consumer-timeout": 1000}

    if order.startswith("policy"):
        set_policy()
    got, closed = [], []
    ch.basic_consume("ct-q", lambda c, m, p, body: got.append(m.delivery_tag))
    ch._impl.add_on_close_callback(lambda c, reason: closed.append(reason))
    ch.basic_publish("", "ct-q", b"never acked")
    while not got:
        conn.process_data_events(0.05)
    if order.startswith("delivery"):
        set_policy()
    started = time.monotonic()
    while not closed and time.monotonic() - started < 10:
        conn.process_data_events(0.1)
    assert closed, "the unacked delivery was never timed out"
    assert closed[0].reply_code == 406 and "timed out" in closed[0].reply_text
    assert time.monotonic() - started < 4
    # the message went back to the queue
    assert conn.channel().queue_declare("ct-q", passive=True).method.message_count == 1
    conn.close()

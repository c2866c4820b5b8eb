"""A cluster leader's clean stop drains its clients before it hands over
(lavinmq/drain.py, lavinmq/clustering/node.py): the acks and confirmed
publishes it takes during the grace period reach the followers, so the
new leader neither redelivers the acked messages nor lacks the published
ones."""
import signal
import time

import pika

from tests.cluster.test_replication import consume, publish
from tests.integration.test_drain import Holder


def test_a_stopping_leader_takes_acks_and_publishes_before_it_hands_over(cluster):
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    publish(leader.url, "held", [b"m%d" % i for i in range(1000)])
    h = Holder(leader.url, "held", 1000)
    pub = pika.BlockingConnection(pika.URLParameters(leader.url))
    pch = pub.channel()
    pch.queue_declare("during", durable=True)
    pch.confirm_delivery()
    leader.proc.send_signal(signal.SIGTERM)
    h.pump_until(lambda: h.cancelled, timeout=5, what="basic.cancel")
    for i in range(100):
        pch.basic_publish("", "during", b"d%d" % i, pika.BasicProperties(delivery_mode=2))   # confirmed, or raises
    assert cluster.leader_uri() == leader.uri, "handed over before the drain ended"
    h.ack_all()
    h.pump_until(lambda: h.closed is not None, what="connection.close")
    assert leader.proc.wait(20) == 0
    new = cluster.wait_leader(other_than=leader)
    deadline = time.monotonic() + 10
    while True:
        try:
            got = consume(new.url, "held", 10)
            break
        except (pika.exceptions.AMQPError, OSError):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert got == [], "acks taken during the drain were lost in the hand-over"
    assert len(consume(new.url, "during", 1000)) == 100
    assert "drained in" in leader.log_text()

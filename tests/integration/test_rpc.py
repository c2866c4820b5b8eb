"""RPC as the client libraries' own examples do it: pika with direct
reply-to (amq.rabbitmq.reply-to), aio-pika's patterns.RPC (which rests on
per-message expiration, dead-lettering and a headers exchange)."""
import asyncio
import threading
import time

import aio_pika
import pika
import pytest
from aio_pika.patterns import RPC

from tests.conftest import unique


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def serve(url, queue, ready, stop):
    """A pika RPC server as in pika's examples: replies to reply_to."""
    c = pika.BlockingConnection(pika.URLParameters(url))
    ch = c.channel()
    ch.queue_declare(queue, exclusive=True)

    def on_request(chan, method, props, body):
        chan.basic_publish("", props.reply_to, b"re: " + body,
                           pika.BasicProperties(correlation_id=props.correlation_id))
        chan.basic_ack(method.delivery_tag)
    ch.basic_consume(queue, on_request)
    ready.set()
    while not stop.is_set():
        c.process_data_events(time_limit=0.05)
    c.close()


def test_pika_direct_reply_to(broker):
    queue = unique("rpc")
    ready, stop = threading.Event(), threading.Event()
    t = threading.Thread(target=serve, args=(broker.url, queue, ready, stop))
    t.start()
    try:
        assert ready.wait(10)
        c = connect(broker)
        ch = c.channel()
        replies = []
        ch.basic_consume("amq.rabbitmq.reply-to", lambda _c, m, p, body: replies.append((p, body)),
                         auto_ack=True)
        for i in range(3):
            ch.basic_publish("", queue, b"marco%d" % i,
                             pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id=str(i)))
        deadline = time.monotonic() + 10
        while len(replies) < 3 and time.monotonic() < deadline:
            c.process_data_events(time_limit=0.05)
        assert sorted(b for _, b in replies) == [b"re: marco0", b"re: marco1", b"re: marco2"]
        assert {p.correlation_id for p, _ in replies} == {"0", "1", "2"}
        c.close()
    finally:
        stop.set()
        t.join(10)


def test_direct_reply_to_rules(broker):
    c = connect(broker)
    ch = c.channel()
    # a passive declare answers, as RabbitMQ's
    assert ch.queue_declare("amq.rabbitmq.reply-to", passive=True).method.queue == "amq.rabbitmq.reply-to"
    # a reply consumer must not ack
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.basic_consume("amq.rabbitmq.reply-to", lambda *a: None, auto_ack=False)
    assert e.value.reply_code == 406
    # publishing with reply_to amq.rabbitmq.reply-to without consuming it first
    ch = c.channel()
    ch.basic_publish("", unique("nobody"), b"x", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare("", exclusive=True)
    assert e.value.reply_code == 406
    c.close()


def test_reply_to_a_gone_requester_is_returned(broker):
    c = connect(broker)
    requester = c.channel()
    got = []
    requester.basic_consume("amq.rabbitmq.reply-to", lambda *a: None, auto_ack=True)
    server_q = requester.queue_declare("", exclusive=True).method.queue
    requester.basic_publish("", server_q, b"q", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    m, p, _ = requester.basic_get(server_q, auto_ack=True)
    reply_to = p.reply_to
    assert reply_to.startswith("amq.rabbitmq.reply-to.")
    requester.close()
    replier = c.channel()
    replier.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        replier.basic_publish("", reply_to, b"too late", mandatory=True)
    c.close()


def test_message_properties_checks_and_timestamp(broker):
    c = connect(broker)
    ch = c.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.basic_publish("", unique("q"), b"x", pika.BasicProperties(expiration="soon"))
        ch.queue_declare("", exclusive=True)
    assert e.value.reply_code == 406 and "expiration" in e.value.reply_text
    c.close()


async def test_aio_pika_rpc_pattern(broker):
    conn = await aio_pika.connect_robust(broker.url)
    try:
        channel = await conn.channel()
        rpc = await RPC.create(channel)

        async def multiply(*, x, y):
            return x * y
        method = unique("multiply")
        await rpc.register(method, multiply, auto_delete=True)
        results = await asyncio.gather(*(rpc.call(method, kwargs={"x": i, "y": 3}) for i in range(5)))
        assert results == [0, 3, 6, 9, 12]
        # a call to a method nobody serves any more fails instead of hanging
        await rpc.unregister(multiply)
        with pytest.raises(Exception):
            await asyncio.wait_for(rpc.call(method, kwargs={"x": 1, "y": 1}, expiration=1), 10)
        await rpc.close()
    finally:
        await conn.close()

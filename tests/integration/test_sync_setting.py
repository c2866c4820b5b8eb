"""The sync setting end to end: with it (the default) confirms and
tx.commit-ok wait for the group-committed flush; with --no-sync they go out
once the messages are written. Both must confirm everything, in order, and
keep it across a restart."""
import asyncio

import aio_pika
import pika
import pytest

from tests.conftest import BrokerProcess, unique


def publish_confirmed_and_tx(url, queue, n):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", queue, b"c%d" % i, pika.BasicProperties(delivery_mode=2))
    tx = conn.channel()
    tx.tx_select()
    for i in range(10):
        tx.basic_publish("", queue, b"t%d" % i, pika.BasicProperties(delivery_mode=2))
    tx.tx_commit()
    conn.close()


def drain(url, queue):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    bodies = []
    while (m := ch.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(m[2])
    conn.close()
    return bodies


@pytest.mark.parametrize("args", [[], ["--no-sync"]], ids=["sync", "no-sync"])
def test_confirms_and_commits_survive_restart(tmp_path, args):
    b = BrokerProcess(tmp_path / "data", extra_args=args).start()
    try:
        q = unique("q")
        publish_confirmed_and_tx(b.url, q, 500)
        b.kill()        # SIGKILL: page cache survives, so both modes keep it
        b.start()
        assert drain(b.url, q) == [b"c%d" % i for i in range(500)] + [b"t%d" % i for i in range(10)]
    finally:
        b.stop()
    b.check_clean()


async def test_group_commit_many_publishers(broker):
    # many channels waiting on the same flushes: every publish is confirmed
    # exactly once and lands in the queue
    q = unique("q")
    conns = [await aio_pika.connect(broker.url) for _ in range(4)]
    try:
        setup = await conns[0].channel()
        await setup.declare_queue(q, durable=True)

        async def publisher(conn, k):
            ch = await conn.channel(publisher_confirms=True)
            await asyncio.gather(*(
                ch.default_exchange.publish(
                    aio_pika.Message(b"%d-%d" % (k, i), delivery_mode=aio_pika.DeliveryMode.PERSISTENT), q)
                for i in range(2000)))

        await asyncio.gather(*(publisher(c, k) for k, c in enumerate(conns) for _ in range(2)))
        declared = await setup.declare_queue(q, durable=True, passive=True)
        assert declared.declaration_result.message_count == 4 * 2 * 2000
        await declared.delete(if_unused=False, if_empty=False)
    finally:
        for c in conns:
            await c.close()

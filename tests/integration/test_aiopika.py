"""The broker through aio-pika (asyncio): confirms, consume/ack/reject,
transactions and exchange-to-exchange routing, as an asyncio app uses them."""
import asyncio

import aio_pika
import pytest

from tests.conftest import unique


@pytest.fixture
async def connection(broker):
    conn = await aio_pika.connect(broker.url)
    yield conn
    await conn.close()


async def test_publish_confirm_consume_ack(connection):
    ch = await connection.channel(publisher_confirms=True)
    q = await ch.declare_queue(unique(), auto_delete=True)
    for i in range(500):
        await ch.default_exchange.publish(aio_pika.Message(b"%d" % i, headers={"n": i}), routing_key=q.name)
    got = []
    async with q.iterator() as it:
        async for msg in it:
            got.append((msg.body, msg.headers["n"]))
            await msg.ack()
            if len(got) == 500:
                break
    assert got == [(b"%d" % i, i) for i in range(500)]


async def test_reject_requeue_redelivers(connection):
    ch = await connection.channel()
    q = await ch.declare_queue(unique(), auto_delete=True)
    await ch.default_exchange.publish(aio_pika.Message(b"again"), routing_key=q.name)
    first = await q.get(timeout=5)
    assert not first.redelivered
    await first.reject(requeue=True)
    second = await q.get(timeout=5)
    assert second.body == b"again" and second.redelivered
    await second.ack()
    assert await q.get(fail=False) is None


async def test_nack_without_requeue_drops(connection):
    ch = await connection.channel()
    q = await ch.declare_queue(unique(), auto_delete=True)
    await ch.default_exchange.publish(aio_pika.Message(b"drop"), routing_key=q.name)
    m = await q.get(timeout=5)
    await m.nack(requeue=False)
    assert await q.get(fail=False) is None


async def test_transaction(connection):
    ch = await connection.channel(publisher_confirms=False)
    q = await ch.declare_queue(unique(), auto_delete=True)
    tx = ch.transaction()
    await tx.select()
    await ch.default_exchange.publish(aio_pika.Message(b"tx"), routing_key=q.name)
    assert q.declaration_result.message_count == 0
    await tx.commit()
    m = await q.get(timeout=5)
    assert m.body == b"tx"
    await m.ack()
    await tx.commit()


async def test_topic_and_e2e(connection):
    ch = await connection.channel()
    src = await ch.declare_exchange(unique(), aio_pika.ExchangeType.TOPIC, auto_delete=True)
    dst = await ch.declare_exchange(unique(), aio_pika.ExchangeType.FANOUT, auto_delete=True)
    await dst.bind(src, routing_key="logs.#")
    q = await ch.declare_queue(unique(), auto_delete=True)
    await q.bind(dst)
    await src.publish(aio_pika.Message(b"one"), routing_key="logs.app.error")
    await src.publish(aio_pika.Message(b"two"), routing_key="metrics.cpu")
    m = await q.get(timeout=5)
    assert m.body == b"one"
    await m.ack()
    assert await q.get(fail=False) is None


async def test_mandatory_return(connection):
    ch = await connection.channel(publisher_confirms=True, on_return_raises=True)
    with pytest.raises(aio_pika.exceptions.DeliveryError) as e:
        await ch.default_exchange.publish(aio_pika.Message(b"nowhere"), routing_key=unique(), mandatory=True)
    assert e.value.message.body == b"nowhere"


async def test_prefetch_and_many_consumers(connection):
    ch = await connection.channel()
    await ch.set_qos(prefetch_count=10)
    q = await ch.declare_queue(unique(), auto_delete=True)
    seen = {1: 0, 2: 0}
    done = asyncio.Event()
    total = 400

    def make(n):
        async def cb(msg):
            seen[n] += 1
            await msg.ack()
            if sum(seen.values()) == total:
                done.set()
        return cb
    await q.consume(make(1))
    await q.consume(make(2))
    for i in range(total):
        await ch.default_exchange.publish(aio_pika.Message(b"x"), routing_key=q.name)
    await asyncio.wait_for(done.wait(), 10)
    assert seen[1] > 100 and seen[2] > 100       # round robin between the two

"""A consumer whose prefetch window filled up is refilled once a quarter of
it is free, or after REFILL_WAIT, not after every single ack: a client that
acks one message at a time (pika, aio-pika) then gets its deliveries in
batches, in one socket read, instead of one write per ack. It never waits
for more than that: a lone ack is answered after the timer."""
import asyncio

import pytest
from pamqp import commands, frame

from tests.helpers.inproc import close_connection, feed, open_connection
from tests.helpers.rawclient import publish_frames
from tests.unit.test_connection_core import frames, handshake


@pytest.fixture
async def conn(tmp_path):
    server, c = open_connection(tmp_path)
    yield c
    close_connection(server, c)


@pytest.fixture
async def still_clock():
    """The loop's clock held still: REFILL_WAIT (1 ms) never passes, so what
    a test sees is the quarter rule alone. Under emulation (CI's arm64 run)
    nine acks take longer than 1 ms and the timer refilled the window."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    loop.time = lambda: now
    yield
    del loop.time


async def settle():
    """Let the loop run the delivery passes the last read scheduled."""
    for _ in range(3):
        await asyncio.sleep(0)


def deliveries(c):
    return [f.delivery_tag for _, f in frames(c.t) if isinstance(f, commands.Basic.Deliver)]


def ack(c, tag):
    feed(c, frame.marshal(commands.Basic.Ack(delivery_tag=tag), 1))


async def consuming(c, prefetch, messages=300):
    handshake(c)
    feed(c, frame.marshal(commands.Queue.Declare(queue="q"), 1))
    feed(c, b"".join(publish_frames(1, "", "q", b"m%d" % i) for i in range(messages)))
    feed(c, frame.marshal(commands.Basic.Qos(prefetch_count=prefetch), 1)
         + frame.marshal(commands.Basic.Consume(queue="q", consumer_tag="c"), 1))
    await settle()
    return deliveries(c)


async def test_single_acks_are_answered_in_batches_of_a_quarter_window(conn, still_clock):
    got = await consuming(conn, 40)
    assert got == list(range(1, 41))
    for tag in range(1, 10):            # nine single acks, each its own read: 9 of 40 free
        ack(conn, tag)
        await settle()
        assert deliveries(conn) == []
    ack(conn, 10)                       # a quarter free: the window is filled again, in one go
    await settle()
    assert deliveries(conn) == list(range(41, 51))


async def test_a_lone_ack_is_answered_after_the_refill_wait(conn):
    await consuming(conn, 40)
    ack(conn, 1)
    await settle()
    assert deliveries(conn) == []
    got = []
    for _ in range(200):
        await asyncio.sleep(0.005)
        got += deliveries(conn)
        if got:
            break
    assert got == [41]


async def test_small_windows_refill_at_once(conn):
    got = await consuming(conn, 3)
    assert got == [1, 2, 3]
    ack(conn, 1)
    await settle()
    assert deliveries(conn) == [4]


async def test_a_window_not_yet_full_takes_new_messages_at_once(conn):
    got = await consuming(conn, 40, messages=10)
    assert got == list(range(1, 11))
    feed(conn, publish_frames(1, "", "q", b"late"))
    await settle()
    assert deliveries(conn) == [11]

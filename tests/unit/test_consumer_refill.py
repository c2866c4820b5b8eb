"""A consumer whose prefetch window filled up gets the next message as soon
as an ack frees room, in the delivery pass that read the ack, as LavinMQ
does: LavinMQ's own client sends most of its acks only once more
deliveries arrive, and a window held shut until a share of it was free
waited for a 1 ms timer on every refill (0.08x LavinMQ at prefetch 10).
Acks read together are answered together, in one write."""
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
    """The loop's clock held still: no timer can fire, so whatever a test
    sees was done in the passes the reads scheduled."""
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


async def test_each_lone_ack_is_answered_in_the_pass_that_read_it(conn, still_clock):
    got = await consuming(conn, 40)
    assert got == list(range(1, 41))
    for tag in range(1, 10):            # nine single acks, each its own read
        ack(conn, tag)
        await settle()
        assert deliveries(conn) == [40 + tag]


async def test_acks_read_together_are_answered_together(conn, still_clock):
    await consuming(conn, 40)
    before = conn.t.writes
    feed(conn, b"".join(frame.marshal(commands.Basic.Ack(delivery_tag=t), 1) for t in range(1, 11)))
    await settle()
    assert conn.t.writes - before == 1
    assert deliveries(conn) == list(range(41, 51))


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

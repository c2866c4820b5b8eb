"""The connection core fed bytes directly (no socket): handshake, publish
assembly across arbitrary read boundaries, confirms, errors."""

import pytest
from pamqp import commands, frame

from tests.helpers.inproc import close_connection, feed, open_connection
from tests.helpers.rawclient import publish_frames


def frames(transport):
    out = []
    data = bytes(transport.out)
    pos = 0
    while pos < len(data):
        n, ch, value = frame.unmarshal(data[pos:])
        out.append((ch, value))
        pos += n
    transport.out.clear()
    return out


@pytest.fixture
def conn(tmp_path):
    server, c = open_connection(tmp_path)
    yield c
    close_connection(server, c)


def handshake(c):
    feed(c, b"AMQP\x00\x00\x09\x01")
    assert isinstance(frames(c.t)[0][1], commands.Connection.Start)
    feed(c, frame.marshal(commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"), 0))
    tune = frames(c.t)[0][1]
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2048, 131072, 300)
    feed(c, frame.marshal(commands.Connection.TuneOk(100, 65536, 0), 0)
         + frame.marshal(commands.Connection.Open("/"), 0)
         + frame.marshal(commands.Channel.Open(), 1))
    kinds = [type(f) for _, f in frames(c.t)]
    assert kinds == [commands.Connection.OpenOk, commands.Channel.OpenOk]


async def test_publish_split_at_every_byte_boundary(conn):
    handshake(conn)
    feed(conn, frame.marshal(commands.Queue.Declare(queue="q"), 1)
         + frame.marshal(commands.Confirm.Select(), 1))
    assert [type(f) for _, f in frames(conn.t)] == [commands.Queue.DeclareOk, commands.Confirm.SelectOk]
    body = bytes(range(256)) * 300            # 76.8 kB: two body frames at frame_max 65536
    data = publish_frames(1, "", "q", body, frame_max=65536) * 3
    feed(conn, data, chunk=997)               # reads that cut frames anywhere
    acks = [f for _, f in frames(conn.t)]
    assert acks and isinstance(acks[-1], commands.Basic.Ack) and acks[-1].delivery_tag == 3
    q = conn.server.vhosts["/"].queues["q"]
    assert q.message_count == 3
    feed(conn, frame.marshal(commands.Basic.Get(queue="q", no_ack=True), 1))
    got = frames(conn.t)
    assert isinstance(got[0][1], commands.Basic.GetOk) and got[0][1].message_count == 2
    assert b"".join(f.value for _, f in got[2:]) == body


async def test_bad_frame_end_closes_with_501(conn):
    handshake(conn)
    feed(conn, b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00\x28\xff")
    close = frames(conn.t)[-1][1]
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 501


async def test_soft_error_closes_only_the_channel(conn):
    handshake(conn)
    feed(conn, frame.marshal(commands.Queue.Declare(queue="nope", passive=True), 1)
         + frame.marshal(commands.Channel.Open(), 2))
    got = frames(conn.t)
    assert isinstance(got[0][1], commands.Channel.Close) and got[0][1].reply_code == 404
    assert (got[1][0], type(got[1][1])) == (2, commands.Channel.OpenOk)
    # frames on the closing channel are ignored until close-ok
    feed(conn, frame.marshal(commands.Queue.Declare(queue="x"), 1)
         + frame.marshal(commands.Channel.CloseOk(), 1)
         + frame.marshal(commands.Channel.Open(), 1))
    assert [(ch, type(f)) for ch, f in frames(conn.t)] == [(1, commands.Channel.OpenOk)]


async def test_login_refused(conn):
    feed(conn, b"AMQP\x00\x00\x09\x01")
    frames(conn.t)
    feed(conn, frame.marshal(commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0bad"), 0))
    close = frames(conn.t)[0][1]
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 403

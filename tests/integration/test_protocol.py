"""Raw bytes on the wire: protocol header, malformed frames, channel rules.
Each case ends in the spec's close and never disturbs another client."""
import socket
import struct

import pytest
from pamqp import commands, frame

from tests.conftest import unique
from tests.helpers.rawclient import RawClient, publish_frames


def read_close(c):
    while True:
        got = c.read_frame()
        assert got is not None, "socket closed without connection.close"
        if isinstance(got[1], (commands.Connection.Close, commands.Channel.Close)):
            return got


def test_wrong_protocol_header_answered_with_ours(broker):
    s = socket.create_connection((broker.host, broker.port), timeout=5)
    s.sendall(b"AMQP\x00\x00\x09\x00")
    assert s.recv(8) == b"AMQP\x00\x00\x09\x01"
    try:
        assert s.recv(8) == b""
    except ConnectionResetError:
        pass        # RabbitMQ resets instead of closing
    s.close()


def test_http_request_gets_protocol_header(broker):
    s = socket.create_connection((broker.host, broker.port), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert s.recv(8) == b"AMQP\x00\x00\x09\x01"
    s.close()


@pytest.mark.parametrize("data,code", [
    (b"\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x33\x00", 501),            # bad frame-end
    (b"\x09\x00\x00\x00\x00\x00\x00\xce", 501),                             # unknown frame type
    (b"\x01\x00\x00\x00\x10\x00\x00\xce", 501),                             # frame above frame_max
    (b"\x02\x00\x01\x00\x00\x00\x0e" + b"\x00" * 14 + b"\xce", 505),        # header on closed channel
    (frame.marshal(commands.Basic.Qos(), 5), 504),                          # method on unopened channel
    (b"\x01\x00\x00\x00\x00\x00\x04\x00\x63\x00\x01\xce", 540),             # unknown class on channel 0
])
def test_malformed_frames_close_connection(broker, data, code):
    if broker.external and code == 540:
        pytest.skip("RabbitMQ drops the socket for an unknown class instead of closing with 540")
    c = RawClient(broker.host, broker.port)
    if data[:3] == b"\x01\x00\x00" and data[3:7] == b"\x00\x00\x00\x10":
        data = b"\x01\x00\x00" + struct.pack(">I", 200000) + b"\x00" * 16
    c.sendall(data)
    ch, close = read_close(c)
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == code
    c.send(0, commands.Connection.CloseOk())
    c.close()


def test_body_without_header_is_unexpected_frame(broker):
    c = RawClient(broker.host, broker.port)
    c.open_channel(1)
    c.sendall(b"\x03\x00\x01\x00\x00\x00\x03abc\xce")
    _, close = read_close(c)
    assert close.reply_code == 505
    c.close()


def test_truncated_method_is_syntax_error(broker):
    c = RawClient(broker.host, broker.port)
    c.open_channel(1)
    c.sendall(b"\x01\x00\x01\x00\x00\x00\x07\x00\x32\x00\x0a\x00\x00\x09\xce")   # queue.declare, name cut
    _, close = read_close(c)
    assert close.reply_code == 501
    c.close()


def test_channel_ids_up_to_65535(broker):
    # channel_max limits how many channels are open, not their ids
    c = RawClient(broker.host, broker.port)
    for ch in (5000, 65535):
        c.send(ch, commands.Channel.Open())
        assert isinstance(c.read_frame()[1], commands.Channel.OpenOk)
        c.send(ch, commands.Queue.Declare(queue="", exclusive=True))
        got_ch, ok = c.read_frame()
        assert got_ch == ch and isinstance(ok, commands.Queue.DeclareOk)
    c.close()


def test_message_larger_than_max_size_closes_channel(broker):
    if broker.external:
        pytest.skip("RabbitMQ waits for the whole body before refusing it")
    c = RawClient(broker.host, broker.port)
    c.open_channel(1)
    hdr = struct.pack(">HHQH", 60, 0, 200 * 1024 * 1024, 0)
    c.sendall(frame.marshal(commands.Basic.Publish(exchange="", routing_key="x"), 1)
              + struct.pack(">BHI", 2, 1, len(hdr)) + hdr + b"\xce"
              + b"\x03\x00\x01\x00\x00\x00\x03abc\xce")
    ch, close = read_close(c)
    assert (ch, close.reply_code) == (1, 406)
    # the connection still works on another channel
    c.open_channel(2)
    c.close()


def test_bad_client_does_not_affect_others(broker):
    good = RawClient(broker.host, broker.port)
    good.open_channel(1)
    q = unique()
    good.send(1, commands.Queue.Declare(queue=q, auto_delete=True))
    good.expect(commands.Queue.DeclareOk)
    for _ in range(20):
        bad = RawClient(broker.host, broker.port)
        bad.sendall(b"\x01\x00\x00\xff\xff\xff\xff" + b"\x00" * 64)
        bad.close()
    good.sendall(publish_frames(1, "", q, b"still here"))
    good.send(1, commands.Basic.Get(queue=q, no_ack=True))
    ok = good.expect(commands.Basic.GetOk)
    assert ok.message_count == 0
    good.close()

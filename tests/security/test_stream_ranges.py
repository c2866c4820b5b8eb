"""Issue 25 finding 9: numbers a tenant chose overflowed the stream code.
An x-stream-offset timestamp past 64 bits of milliseconds, or an interval
of "99999999999999999999Y", answered 541 (an internal error) instead of
406, and such a max-age was accepted as a policy and then broke every
policy of the streams it matched."""
import struct

import pika
import pytest
from pamqp import commands

from tests.helpers.rawclient import RawClient
from tests.security.conftest import call


def _consume(c, ch, queue, offset_value):
    args = b"\x0fx-stream-offset" + offset_value
    table = struct.pack(">I", len(args)) + args
    payload = struct.pack(">HH", 60, 20) + struct.pack(">HB", 0, len(queue)) + queue.encode() + b"\x00\x00" + table
    c.sendall(struct.pack(">BHI", 1, ch, len(payload)) + payload + b"\xce")


def test_huge_offsets_and_ages_are_refused_with_406(make_broker):
    b = make_broker()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare("s", durable=True, arguments={"x-queue-type": "stream"})
    for bad in ("99999999999999999999Y", "9999999999999D"):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            conn.channel().queue_declare("s2", durable=True, arguments={"x-queue-type": "stream", "x-max-age": bad})
        assert err.value.reply_code == 406 and "too large" in err.value.reply_text
    conn.close()
    c = RawClient(b.host, b.port)
    for i, value in enumerate((b"T" + struct.pack(">Q", 2 ** 64 - 1),               # a timestamp
                               b"S" + struct.pack(">I", 21) + b"99999999999999999999Y",   # an interval
                               b"L" + struct.pack(">Q", 2 ** 64 - 1)), start=1):    # an offset
        c.open_channel(i)
        c.send(i, commands.Basic.Qos(prefetch_count=10))
        c.expect(commands.Basic.QosOk)
        _consume(c, i, "s", value)
        got = c.read_frame()[1]
        assert isinstance(got, commands.Channel.Close) and got.reply_code == 406, got
        assert "out of range" in got.reply_text or "does not fit" in got.reply_text, got.reply_text
    c.close()
    # over HTTP too, and a policy with such an age is refused
    status, body = call(b, "POST", "/api/queues/%2F/s/stream", {"offset": 2 ** 70, "count": 1})
    assert status == 400 and "out of range" in body["reason"]
    status, body = call(b, "PUT", "/api/policies/%2F/ages", {"pattern": "^s$", "apply-to": "queues",
                                                             "definition": {"max-age": "99999999999999999999Y"}})
    assert status == 400 and "too large" in body["reason"]
    # and a sane policy still applies to the stream
    assert call(b, "PUT", "/api/policies/%2F/ages", {"pattern": "^s$", "apply-to": "queues",
                                                     "definition": {"max-age": "7D"}})[0] == 201
    assert call(b, "GET", "/api/queues/%2F/s")[1]["effective_policy_definition"] == {"max-age": "7D"}

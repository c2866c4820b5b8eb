"""The load generator's frame scanner: counts deliveries and confirms and
checks bodies without a Python object per frame."""
from pamqp import body, commands, frame, header

from lavinmq._core.perfscan import FrameScanner


def delivery(tag, data):
    return (frame.marshal(commands.Basic.Deliver("ctag", tag, False, "", "q"), 1)
            + frame.marshal(header.ContentHeader(0, len(data), commands.Basic.Properties()), 1)
            + frame.marshal(body.ContentBody(data), 1))


def test_counts_across_split_reads():
    data = b"".join(delivery(i, b"hello") for i in range(1, 101))
    data += frame.marshal(commands.Basic.Ack(delivery_tag=42, multiple=True), 1)
    data += frame.marshal(commands.Queue.DeclareOk("q", 0, 0), 1)
    s = FrameScanner()
    others = []
    for i in range(0, len(data), 37):
        others += s.feed(data[i:i + 37])
    assert (s.deliveries, s.last_delivery_tag, s.bodies, s.body_bytes) == (100, 100, 100, 500)
    assert s.confirms_acked_upto == 42
    assert [(ch, cid, mid) for ch, cid, mid, _ in others] == [(1, 50, 11)]


def test_verify_flags_a_wrong_body():
    s = FrameScanner()
    s.expected_body = b"hello"
    s.feed(delivery(1, b"hello") + delivery(2, b"hellO") + delivery(3, b"hell"))
    assert s.bad_bodies == 2

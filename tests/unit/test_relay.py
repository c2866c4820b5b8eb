"""lavinmq._core.relay: deliveries become publishes as bytes, confirms
become acks. Frames are built and read back with pamqp (an independent
codec), fed in reads of every size."""
import struct

import pytest
from pamqp import body, commands, frame, header

from lavinmq._core import debug
from lavinmq._core.codec import decode_table_bytes, encode_table_bytes
from lavinmq._core.relay import FrameReader, Relay
from lavinmq.errors import FrameError


def delivery(tag, data, exchange="ex", rk="rk", props=None, ch=1, redelivered=False, frame_max=131072):
    props = props or commands.Basic.Properties()
    out = [frame.marshal(commands.Basic.Deliver("ctag", tag, redelivered, exchange, rk), ch),
           frame.marshal(header.ContentHeader(0, len(data), props), ch)]
    step = frame_max - 8
    for i in range(0, len(data), step):
        out.append(frame.marshal(body.ContentBody(data[i:i + step]), ch))
    return b"".join(out)


def confirm(seq, multiple=False, nack=False, ch=1):
    method = commands.Basic.Nack(seq, multiple) if nack else commands.Basic.Ack(seq, multiple)
    return frame.marshal(method, ch)


def frames(data):
    out = []
    while data:
        n, ch, f = frame.unmarshal(data)
        out.append((ch, f))
        data = data[n:]
    return out


def messages(data):
    """Publishes in data -> [(channel, exchange, routing key, properties, body)]."""
    out = []
    for ch, f in frames(data):
        if isinstance(f, commands.Basic.Publish):
            out.append([ch, f.exchange, f.routing_key, None, b""])
        elif isinstance(f, header.ContentHeader):
            out[-1][3] = f.properties
        elif isinstance(f, body.ContentBody):
            out[-1][4] += f.value
    return [tuple(m) for m in out]


def acks(data):
    return [(f.delivery_tag, f.multiple) for _, f in frames(data) if isinstance(f, commands.Basic.Ack)]


def feed_in_pieces(reader, data, size):
    others = []
    for i in range(0, len(data), size):
        others += reader.feed(data[i:i + size])
    return others


@pytest.mark.parametrize("piece", [1, 7, 64, 1 << 20])
def test_deliveries_become_publishes_whatever_the_read_size(piece):
    r = Relay(1, 3, 131072, "on-confirm", dest_exchange=b"", dest_key=b"target")
    props = commands.Basic.Properties(content_type="text/plain", headers={"a": 1}, delivery_mode=2,
                                      message_id="m1")
    data = delivery(1, b"hello", props=props) + delivery(2, b"", exchange="x2") + delivery(3, b"x" * 300_000)
    data += frame.marshal(commands.Basic.QosOk(), 1)
    others = feed_in_pieces(r.source, data, piece)
    assert [(ch, cid, mid) for ch, cid, mid, _ in others] == [(1, 60, 11)]
    out = messages(r.take_dest())
    assert [(m[0], m[1], m[2], m[4]) for m in out] == [(3, "", "target", b"hello"), (3, "", "target", b""),
                                                       (3, "", "target", b"x" * 300_000)]
    assert out[0][3].content_type == "text/plain" and out[0][3].headers == {"a": 1}
    assert out[0][3].delivery_mode == 2 and out[0][3].message_id == "m1"
    assert r.messages == 3 and r.next_seq == 4 and r.outstanding == 3
    assert r.take_dest() == b""


def test_own_exchange_and_routing_key_kept_when_not_given():
    r = Relay(1, 1, 131072, "on-confirm")
    r.source.feed(delivery(1, b"a", exchange="orders", rk="eu.new"))
    assert [(m[1], m[2]) for m in messages(r.take_dest())] == [("orders", "eu.new")]
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"other")
    r.source.feed(delivery(1, b"a", exchange="orders", rk="eu.new"))
    assert [(m[1], m[2]) for m in messages(r.take_dest())] == [("other", "eu.new")]


def test_bodies_are_cut_to_the_destination_frame_max():
    r = Relay(1, 1, 131072, "no-ack", dest_exchange=b"", dest_key=b"q")
    r.set_dest_frame_max(4096)
    data = bytes(range(256)) * 100
    r.source.feed(delivery(1, data))
    out = r.take_dest()
    sizes = [len(f.value) for _, f in frames(out) if isinstance(f, body.ContentBody)]
    assert max(sizes) == 4096 - 8 and sum(sizes) == len(data)
    assert messages(out)[0][4] == data


def test_confirms_ack_the_source_in_order():
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")
    # delivery tags need not be the publish sequence numbers
    r.source.feed(b"".join(delivery(tag, b"m") for tag in (5, 6, 7, 9, 10)))
    r.take_dest()
    r.dest.feed(confirm(2, multiple=True))
    assert acks(r.take_source()) == [(6, True)]
    r.dest.feed(confirm(4) + confirm(5))       # 3 is not confirmed yet: nothing may be acked
    assert r.take_source() == b"" and r.confirmed_upto == 2
    r.dest.feed(confirm(3))
    assert acks(r.take_source()) == [(10, True)]
    assert r.outstanding == 0 and r.acked_tag == 10


def test_a_nack_stops_the_acks_before_it():
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")
    r.source.feed(b"".join(delivery(tag, b"m") for tag in range(1, 5)))
    r.dest.feed(confirm(1) + confirm(2, nack=True) + confirm(4, multiple=True))
    assert acks(r.take_source()) == [(1, True)]
    assert r.nacked == 1 and r.confirmed_upto == 1


def test_a_confirm_of_what_was_never_published_is_an_error():
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")
    r.source.feed(delivery(1, b"m"))
    with pytest.raises(FrameError):
        r.dest.feed(confirm(2))


def test_the_ring_grows_past_a_thousand_outstanding():
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")
    r.source.feed(b"".join(delivery(tag, b"m") for tag in range(1, 5001)))
    assert r.outstanding == 5000
    r.dest.feed(b"".join(confirm(seq) for seq in range(5000, 1, -1)))      # backwards: none contiguous
    assert r.take_source() == b""
    r.dest.feed(confirm(1))
    assert acks(r.take_source()) == [(5000, True)]


def test_on_publish_and_no_ack():
    r = Relay(1, 1, 131072, "on-publish", dest_exchange=b"", dest_key=b"q")
    r.source.feed(delivery(1, b"a") + delivery(2, b"b"))
    r.ack_published()
    assert acks(r.take_source()) == [(2, True)]
    r = Relay(1, 1, 131072, "no-ack", dest_exchange=b"", dest_key=b"q")
    r.source.feed(delivery(1, b"a"))
    assert r.take_source() == b"" and len(messages(r.take_dest())) == 1


def test_stop_after_moves_only_that_many():
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")
    r.stop_after = 2
    r.source.feed(delivery(1, b"a") + delivery(2, b"b") + delivery(3, b"c"))
    assert [m[4] for m in messages(r.take_dest())] == [b"a", b"b"]
    assert r.skipped == 1 and not r.done
    r.dest.feed(confirm(2, multiple=True))
    assert acks(r.take_source()) == [(2, True)]
    assert r.done


def test_other_channels_and_methods_go_up():
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")
    data = delivery(1, b"a", ch=2) + frame.marshal(commands.Channel.Close(404, "NOT_FOUND", 50, 10), 1)
    up = r.source.feed(data)
    assert [(ch, cid, mid) for ch, cid, mid, _ in up] == [(2, 60, 60), (1, 20, 40)]
    assert r.take_dest() == b""


def test_broken_frames_are_errors_not_crashes():
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")
    good = delivery(1, b"a")
    with pytest.raises(FrameError):
        r.source.feed(good[:-1] + b"\x00")          # frame end byte
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")
    with pytest.raises(FrameError):                 # a header without a delivery
        r.source.feed(frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), 1))
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")
    with pytest.raises(FrameError):                 # a frame far over frame_max is refused before it is read
        r.source.feed(struct.pack(">BHI", 3, 1, 1 << 30))
    with pytest.raises(FrameError):
        FrameReader().feed(b"\x09\x00\x00\x00\x00\x00\x00\xce")     # no such frame type


def received_from(uri, redelivered):
    return b"F" + encode_table_bytes({"uri": uri, "exchange": "up", "redelivered": redelivered})


def federation_relay(max_hops=0, collect=False):
    return Relay(1, 1, 131072, "on-confirm", dest_exchange=b"down", collect=collect,
                 received_from=(received_from("amqp://a", False), received_from("amqp://a", True)),
                 max_hops=max_hops)


@pytest.mark.parametrize("props", [
    commands.Basic.Properties(),
    commands.Basic.Properties(content_type="a/b", content_encoding="gzip", delivery_mode=2, message_id="m"),
    commands.Basic.Properties(headers={"k": "v", "n": 7}, priority=3),
    commands.Basic.Properties(headers={"k": "v", "x-received-from": [{"uri": "amqp://z"}], "z": 1.5}),
    commands.Basic.Properties(headers={"x-received-from": "not an array"}),
])
def test_received_from_is_appended_and_the_rest_kept(props):
    r = federation_relay()
    r.source.feed(delivery(1, b"body", props=props, redelivered=True))
    (_, ex, rk, got, data), = messages(r.take_dest())
    assert (ex, rk, data) == ("down", "rk", b"body")
    before = dict(props.headers or {})
    chain = before.pop("x-received-from", [])
    chain = chain if isinstance(chain, list) else []
    headers = dict(got.headers)
    assert headers.pop("x-received-from") == chain + [{"uri": "amqp://a", "exchange": "up", "redelivered": True}]
    assert headers == before
    for name in ("content_type", "content_encoding", "delivery_mode", "priority", "message_id"):
        assert getattr(got, name) == getattr(props, name)


def test_messages_at_max_hops_are_dropped_and_acked():
    r = federation_relay(max_hops=2)
    once = commands.Basic.Properties(headers={"x-received-from": [{"uri": "amqp://b"}]})
    twice = commands.Basic.Properties(headers={"x-received-from": [{"uri": "amqp://b"}, {"uri": "amqp://c"}]})
    r.source.feed(delivery(1, b"a", props=once) + delivery(2, b"b", props=twice) + delivery(3, b"c"))
    assert [m[4] for m in messages(r.take_dest())] == [b"a", b"c"]
    assert r.dropped == 1
    assert acks(r.take_source()) == [(2, False)]    # the dropped one, alone
    r.dest.feed(confirm(2, multiple=True))
    assert acks(r.take_source()) == [(3, True)]


def test_collect_mode_hands_up_whole_messages():
    r = federation_relay(collect=True)
    props = commands.Basic.Properties(content_type="text/plain")
    r.source.feed(delivery(7, b"x" * 200_000, props=props, frame_max=4096)[:-5])
    assert r.take_messages() == []
    r.source.feed(delivery(7, b"x" * 200_000, props=props, frame_max=4096)[-5:])
    (tag, redelivered, ex, rk, raw_props, data), = r.take_messages()
    assert (tag, redelivered, ex, rk, data) == (7, False, b"ex", b"rk", b"x" * 200_000)
    flags, = struct.unpack_from(">H", raw_props)
    assert flags & 0x8000 and flags & 0x2000          # content type kept, headers added
    table_at = 2 + 1 + len("text/plain")
    assert decode_table_bytes(raw_props[table_at:])["x-received-from"][0]["uri"] == "amqp://a"
    assert r.take_dest() == b""
    r.ack_upto(7)
    assert acks(r.take_source()) == [(7, True)]


def test_no_python_object_per_message():
    """DESIGN.md's rule on the shovel path: 100,000 messages through the
    relay, in reads of 500 deliveries and one confirm each, allocate per
    read, not per message."""
    reads = [b"".join(delivery(tag, b"0123456789abcdef") for tag in range(i * 500 + 1, i * 500 + 501))
             for i in range(220)]
    confirms = [confirm((i + 1) * 500, multiple=True) for i in range(220)]
    r = Relay(1, 1, 131072, "on-confirm", dest_exchange=b"", dest_key=b"q")

    def run(first, last):
        for i in range(first, last):
            r.source.feed(reads[i])
            r.take_dest()
            r.dest.feed(confirms[i])
            r.take_source()

    run(0, 20)      # warm-up: buffers grow to their size
    debug.count_allocations()
    before = debug.allocations()
    run(20, 220)
    per_message = (debug.allocations() - before) / 100_000
    assert r.messages == 110_000 and r.acked_tag == 110_000
    assert per_message < 0.02, f"{per_message:.4f} allocations per message"


def test_collect_mode_refuses_a_body_over_its_limit():
    r = Relay(1, 1, 131072, "on-confirm", collect=True)
    r.max_collect = 1000
    r.source.feed(delivery(1, b"x" * 1000))
    assert len(r.take_messages()) == 1
    with pytest.raises(FrameError, match="over 1000"):
        r.source.feed(delivery(2, b"x" * 1001))

import datetime
import decimal

import pytest
from hypothesis import given, settings, strategies as st
from pamqp import commands, frame, header

from lavinmq._core import codec
from lavinmq.errors import FrameError, SyntaxError_, NotImplemented_

field_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
              st.floats(allow_nan=False), st.text(max_size=20), st.binary(max_size=20)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=10), children, max_size=4)),
    max_leaves=20)


@given(st.dictionaries(st.text(max_size=30), field_values, max_size=8))
@settings(max_examples=300)
def test_table_round_trip(table):
    assert codec.decode_table_bytes(codec.encode_table_bytes(table)) == table


@given(st.dictionaries(st.text(max_size=30), field_values, max_size=8))
@settings(max_examples=200)
def test_table_decodes_like_pamqp(table):
    from pamqp import decode as pdecode
    data = codec.encode_table_bytes(table)
    _, theirs = pdecode.field_table(data)
    ours = codec.decode_table_bytes(data)

    def norm(v):
        if isinstance(v, (bytes, bytearray)):
            return bytes(v)
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v
    assert norm(ours) == norm(theirs)


def test_decodes_every_field_type():
    data = codec.encode_table_bytes({"d": decimal.Decimal("1.25"), "ts": datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)})
    out = codec.decode_table_bytes(data)
    assert out["d"] == decimal.Decimal("1.25")
    assert out["ts"] == 1577836800


def test_table_depth_is_bounded():
    t = {}
    for _ in range(100):
        t = {"x": t}
    data = codec.encode_table_bytes(t)
    with pytest.raises(FrameError):
        codec.decode_table_bytes(data)


def test_truncated_table_is_a_syntax_error():
    data = codec.encode_table_bytes({"key": "value"})
    with pytest.raises(FrameError):
        codec.decode_table_bytes(data[:-3])


@pytest.mark.parametrize("cmd,args", [
    (commands.Queue.Declare(queue="q", durable=True, arguments={"x-max-length": 1000}),
     (0, "q", False, True, False, False, False, {"x-max-length": 1000})),
    (commands.Basic.Consume(queue="q", consumer_tag="t", no_ack=True, exclusive=True),
     (0, "q", "t", False, True, True, False, {})),
    (commands.Exchange.Bind(destination="a", source="b", routing_key="rk"),
     (0, "a", "b", "rk", False, {})),
    (commands.Basic.Nack(delivery_tag=7, multiple=True, requeue=False), (7, True, False)),
])
def test_method_decode_matches_pamqp(cmd, args):
    raw = frame.marshal(cmd, 1)
    class_id, method_id = cmd.index >> 16, cmd.index & 0xFFFF
    assert codec.decode_method(class_id, method_id, raw[11:-1]) == args
    # and our encoding decodes back through pamqp to the same command
    ours = codec.encode_method_frame(1, class_id, method_id, args)
    _, _, decoded = frame.unmarshal(ours)
    assert type(decoded) is type(cmd) and vars(decoded) == vars(cmd)


def test_unknown_method():
    with pytest.raises(NotImplemented_):
        codec.decode_method(60, 999, b"")


def test_truncated_method_args():
    with pytest.raises(FrameError):
        codec.decode_method(50, 10, b"\x00\x00\x05ab")


def test_properties_wire_and_disk_forms():
    props = commands.Basic.Properties(
        content_type="application/json", content_encoding="gzip", headers={"h": [1, "two"]},
        delivery_mode=2, priority=5, correlation_id="c", reply_to="r", expiration="1000",
        message_id="m", timestamp=datetime.datetime(2021, 5, 6, tzinfo=datetime.timezone.utc),
        message_type="t", user_id="guest", app_id="app")
    wire = header.ContentHeader(0, 3, props).marshal()[12:]
    decoded = codec.decode_properties(wire)
    assert decoded["headers"] == {"h": [1, "two"]}
    assert decoded["delivery_mode"] == 2 and decoded["priority"] == 5
    assert decoded["timestamp"] == 1620259200
    disk = codec.convert_properties(wire, False)
    assert len(disk) == len(wire) and disk != wire
    assert codec.decode_properties(disk, True) == decoded
    assert codec.convert_properties(disk, True) == wire
    assert codec.decode_properties(codec.encode_properties(decoded)) == decoded
    assert codec.properties_length(wire) == len(wire)


def test_bad_property_flags():
    with pytest.raises(SyntaxError_):
        codec.properties_length(b"\x00\x01")
    with pytest.raises(SyntaxError_):
        codec.properties_length(b"\x80\x00\x05ab")

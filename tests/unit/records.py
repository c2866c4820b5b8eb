"""Build store records (LavinMQ's on-disk layout) for the unit tests."""
import struct

from lavinmq._core import codec


def record(body, exchange=b"amq.direct", routing_key=b"key", props=None, ts=1_700_000_000_000):
    p = codec.encode_properties(props or {}, True)
    return (struct.pack("<q", ts) + bytes([len(exchange)]) + exchange + bytes([len(routing_key)])
            + routing_key + p + struct.pack("<Q", len(body)) + body)

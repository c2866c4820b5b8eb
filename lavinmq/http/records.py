"""A message as the store keeps it (LavinMQ's record: ts, exchange, routing
key, properties, body size, body), built and read back for the API's
publish, get and stream reads, one request at a time."""
import struct
import time

from lavinmq._core import codec
from lavinmq.http.helpers import HTTPError

PROPERTY_TYPES = {"content_type": str, "content_encoding": str, "headers": dict, "delivery_mode": int,
                  "priority": int, "correlation_id": str, "reply_to": str, "expiration": str,
                  "message_id": str, "timestamp": int, "type": str, "user_id": str, "app_id": str}


def build_record(exchange, routing_key, props, body):
    """LavinMQ's store record: ts · exchange · routing key · properties · body size · body."""
    ex, rk = exchange.encode(), routing_key.encode()
    if len(rk) > 255:
        raise HTTPError(400, "routing_key is longer than 255 bytes")
    return (struct.pack("<q", int(time.time() * 1000)) + bytes([len(ex)]) + ex + bytes([len(rk)]) + rk
            + codec.encode_properties(props, True) + struct.pack("<Q", len(body)) + body)


def parse_record(rec):
    pos = 8
    exlen = rec[pos]
    exchange = rec[pos + 1:pos + 1 + exlen].decode(errors="replace")
    pos += 1 + exlen
    rklen = rec[pos]
    routing_key = rec[pos + 1:pos + 1 + rklen].decode(errors="replace")
    pos += 1 + rklen
    plen = codec.properties_length(rec[pos:], True)
    props = codec.decode_properties(rec[pos:pos + plen], True)
    pos += plen
    (size,) = struct.unpack_from("<Q", rec, pos)
    return exchange, routing_key, props, rec[pos + 8:pos + 8 + size]


def check_props(props):
    if not isinstance(props, dict):
        raise HTTPError(400, "properties must be an object")
    for key, value in props.items():
        kind = PROPERTY_TYPES.get(key)
        if kind is None or not isinstance(value, kind) or isinstance(value, bool):
            raise HTTPError(400, f"bad property {key!r}")
    return props

"""Codec: method decode/encode, field tables, property conversion.
Method decode and properties wire->disk are the gate's cases: bench_gate.py."""
import datetime

from pamqp import commands, frame, header

from lavinmq._core import codec

DECLARE = frame.marshal(commands.Queue.Declare(queue="orders", durable=True,
                                               arguments={"x-max-length": 1000}), 1)[11:-1]
TABLE = {"x-match": "all", "region": "eu", "priority": 5, "nested": {"a": [1, 2, 3]}}
TABLE_BYTES = codec.encode_table_bytes(TABLE)
PROPS_WIRE = header.ContentHeader(0, 16, commands.Basic.Properties(
    content_type="application/json", delivery_mode=2, headers={"trace": "abc", "n": 1},
    timestamp=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc))).marshal()[12:]


def test_encode_table(per_message):
    per_message(lambda n: [codec.encode_table_bytes(TABLE) for _ in range(n)])


def test_decode_table(per_message):
    per_message(lambda n: [codec.decode_table_bytes(TABLE_BYTES) for _ in range(n)])

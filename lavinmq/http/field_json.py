"""AMQP field-table values (arguments of queues, exchanges, bindings and
consumers; message headers) as JSON, the way RabbitMQ 3.10's management
API writes them, so that one client's argument cannot make a listing,
the UI or a definitions export fail for everyone.

What RabbitMQ 3.10.8 answers (checked against Debian's rabbitmq-server):

- a byte array (`x`), or a long string that is not UTF-8: its text when
  it is valid UTF-8, else "Not UTF-8, base64 is: <base64>";
- a decimal (`D`, scale and a 32-bit value): the JSON number
  "<scale>.<value>", with the value read as unsigned: 12345 at scale 2 is
  2.12345, -5 at scale 3 is 3.4294967291. Not the decimal's value, but what
  tools that compare against RabbitMQ see;
- floats as numbers. RabbitMQ cannot decode NaN or an infinity at all (it
  drops the connection); this broker refuses them in arguments
  (lavinmq.arguments), and any that are stored anyway (a message header,
  data from before) are written as the strings "NaN", "Infinity" and
  "-Infinity", never as bare NaN, which is not JSON.
"""
import base64
import decimal
import math

def json_table(table):
    """A field table ready for JSON: the same dict when nothing in it needs
    converting (the common case, checked without copying)."""
    if not table:
        return table if table is not None else {}
    for v in table.values():
        t = type(v)
        if t is not str and t is not int and t is not bool:
            return {str(k): json_value(x) for k, x in table.items()}
    return table


def json_value(v):
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return int(v)       # a Timestamp: its seconds, as RabbitMQ
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, (bytes, bytearray, memoryview)):
        raw = bytes(v)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "Not UTF-8, base64 is: " + base64.b64encode(raw).decode()
    if isinstance(v, decimal.Decimal):
        return _rabbit_decimal(v)
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    return str(v)


def _rabbit_decimal(d):
    if not d.is_finite():
        return str(d)
    _, _, exp = d.as_tuple()
    scale = max(0, -exp)
    value = int(d.scaleb(scale)) & 0xFFFFFFFF
    return float(f"{scale}.{value}")

"""Arguments of declarations, bindings and consumers: what may be stored.

Everything durable is written to definitions.amqp as the AMQP frame it came
in as, and read back at boot with the same codec limits as the wire. A
table that the codec cannot read back (nested too deep, integers past
int64, keys over 255 bytes, unknown value types) must be refused *before*
anything changes; otherwise the file holds a frame that cuts short every
definition after it at the next start.
"""
from lavinmq._core.codec import decode_table_bytes, encode_table_bytes
from lavinmq.errors import PreconditionFailed


def check_storable(arguments, class_id, method_id):
    """Raise 406 unless `arguments` survive an encode/decode round trip."""
    if not arguments:
        return
    if not isinstance(arguments, dict):
        raise PreconditionFailed("arguments must be a table", class_id, method_id)
    try:
        decode_table_bytes(encode_table_bytes(arguments))
    except Exception as exc:
        raise PreconditionFailed(f"invalid arguments: {_reason(exc)}", class_id, method_id) from None


def _reason(exc):
    text = str(exc) or type(exc).__name__
    return text[:200]

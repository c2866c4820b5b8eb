"""Arguments of declarations, bindings and consumers, and policy keys: one
table of what the broker knows, redeclare equivalence (numbers compared by
value, 10 == 10.0) and the shared empty table, used by queue.declare, exchange.declare,
basic.consume, bindings, the HTTP API, definitions import and policies.

A known argument with a wrong type or value is refused with 406 and a reply
text naming it, as LavinMQ's argument validators do; unknown arguments are
kept as they are (clients put their own keys there).

Everything durable is also written to definitions.amqp as the AMQP frame it
came in as, and read back at boot with the wire's codec limits. A table that
cannot be read back (nested too deep, integers past int64, keys over 255
bytes) must be refused *before* anything changes; otherwise the file holds a
frame that used to cut short every definition after it at the next start.
"""
import math
import re

from lavinmq._core.codec import decode_table_bytes, encode_table_bytes
from lavinmq.errors import PreconditionFailed

INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1
INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1
MAX_AGE = re.compile(r"\A(\d+)([YMDhms])\Z")
AGE_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "D": 86400, "M": 30 * 86400, "Y": 365 * 86400}
# A max-age or an x-stream-offset interval becomes milliseconds in 64 bits:
# "99999999999999999999Y" answered 541 (an overflow) and, as a policy, broke
# every policy of the streams it matched. 10,000 years is past any use.
MAX_AGE_SECONDS = 10_000 * 365 * 86400
# RabbitMQ's bound on x-message-ttl, x-expires and a message's expiration:
# 10 years in ms (3.10 takes 315,360,000,000 and refuses one more). Celery's
# native delayed delivery declares x-message-ttl up to 2^27 s (134,217,728,000
# ms). The core keeps TTLs and expiry times in 64 bits.
MAX_EXPIRY_MS = 315_360_000_000
DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")     # lavinmq/queue/quorum.py
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
# the kinds of queue (lavinmq/queue/kinds.py); quorum: lavinmq/queue/quorum.py,
# mqtt: an MQTT session (lavinmq/mqtt)
QUEUE_TYPES = ("classic", "quorum", "stream", "mqtt")
X_MATCH = ("all", "any", "all-with-x", "any-with-x")


class Arg:
    """One known argument: its type and bounds, and the policy key that
    sets the same thing (None if there is none)."""
    __slots__ = ("name", "kind", "lo", "hi", "choices", "policy")

    def __init__(self, name, kind, lo=None, hi=None, choices=None, policy=None):
        self.name, self.kind, self.lo, self.hi = name, kind, lo, hi
        self.choices, self.policy = choices, policy

    def check(self, value):
        """-> the value as the broker uses it, or raise ValueError with a
        reason that names the argument."""
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{self.name} header not an integer")
            if self.lo is not None and value < self.lo:
                raise ValueError(f"{self.name} header less than minimum value {self.lo}")
            if self.hi is not None and value > self.hi:
                raise ValueError(f"{self.name} header greater than maximum value {self.hi}")
            return value
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{self.name} header not a boolean")
            return value
        if self.kind == "any":
            return value
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode()
            except UnicodeDecodeError:
                raise ValueError(f"{self.name} header not a string") from None
        if not isinstance(value, str):
            raise ValueError(f"{self.name} header not a string")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{self.name} header must be one of {', '.join(self.choices)}, not '{value}'")
        if self.kind == "age":
            m = MAX_AGE.match(value)
            if not m:
                raise ValueError(f"{self.name} header format invalid (a number and one of Y M D h m s)")
            if int(m.group(1)) * AGE_UNIT_SECONDS[m.group(2)] > MAX_AGE_SECONDS:
                raise ValueError(f"{self.name} header too large (at most 10000Y)")
        return value


def _table(*args):
    return {a.name: a for a in args}


QUEUE_ARGS = _table(
    Arg("x-message-ttl", "int", 0, MAX_EXPIRY_MS, policy="message-ttl"),
    Arg("x-expires", "int", 1, MAX_EXPIRY_MS, policy="expires"),
    Arg("x-max-length", "int", 0, INT64_MAX, policy="max-length"),
    Arg("x-max-length-bytes", "int", 0, INT64_MAX, policy="max-length-bytes"),
    Arg("x-overflow", "str", choices=OVERFLOW_MODES, policy="overflow"),
    Arg("x-dead-letter-exchange", "str", policy="dead-letter-exchange"),
    Arg("x-dead-letter-routing-key", "str", policy="dead-letter-routing-key"),
    Arg("x-dead-letter-strategy", "str", choices=DEAD_LETTER_STRATEGIES, policy="dead-letter-strategy"),
    Arg("x-max-priority", "int", 0, 255),
    Arg("x-queue-type", "str", choices=QUEUE_TYPES),
    Arg("x-delivery-limit", "int", 0, INT64_MAX, policy="delivery-limit"),
    Arg("x-consumer-timeout", "int", 0, INT64_MAX, policy="consumer-timeout"),
    Arg("x-single-active-consumer", "bool"),
    Arg("x-message-deduplication", "bool"),
    Arg("x-cache-size", "int", 0, INT32_MAX),
    Arg("x-cache-ttl", "int", 0, INT64_MAX),
    Arg("x-deduplication-header", "str"),
    Arg("x-max-age", "age", policy="max-age"),
    Arg("x-queue-mode", "str", choices=("default", "lazy")),
)

EXCHANGE_ARGS = _table(
    Arg("alternate-exchange", "str", policy="alternate-exchange"),
    Arg("x-alternate-exchange", "str"),
    Arg("x-delayed-type", "str"),
    Arg("x-delayed-exchange", "bool", policy="delayed-message"),     # LavinMQ's policy key
    Arg("x-message-deduplication", "bool"),
    Arg("x-cache-size", "int", 0, INT32_MAX),
    Arg("x-cache-ttl", "int", 0, INT64_MAX),
    Arg("x-deduplication-header", "str"),
    Arg("hash-header", "str"),
    Arg("hash-property", "str"),
    # persistent exchanges (AvalancheMQ's): how many messages and how many
    # ms to keep; either makes the exchange keep them, 0 is no limit
    Arg("x-persist-messages", "int", 0, INT64_MAX),
    Arg("x-persist-ms", "int", 0, INT64_MAX),
)

# a queue binding's request for a persistent exchange's stored messages;
# other binding keys are the bindings' own (header names to match ...)
BINDING_ARGS = _table(
    Arg("x-head", "int", INT64_MIN, INT64_MAX),
    Arg("x-tail", "int", INT64_MIN, INT64_MAX),
    Arg("x-from", "int", 0, INT64_MAX),
)

CONSUMER_ARGS = _table(
    Arg("x-priority", "int", INT32_MIN, INT32_MAX),
    Arg("x-cancel-on-ha-failover", "bool"),
    Arg("x-stream-match-unfiltered", "bool"),
    Arg("x-stream-automatic-offset-tracking", "bool"),
)

# policy keys that have no x-argument of their own; the "any" ones are
# RabbitMQ's, accepted so that its exports import, with no effect here
EXTRA_POLICY_KEYS = _table(
    Arg("federation-upstream", "str"),
    Arg("federation-upstream-set", "str"),
    Arg("queue-mode", "str", choices=("default", "lazy")),
    Arg("max-in-memory-length", "int", 0, INT64_MAX),
    Arg("max-in-memory-bytes", "int", 0, INT64_MAX),
    Arg("queue-version", "int", 1, 2),
    *(Arg(k, "any") for k in ("ha-mode", "ha-params", "ha-sync-mode", "ha-sync-batch-size",
                              "ha-promote-on-shutdown", "ha-promote-on-failure", "queue-master-locator",
                              "queue-leader-locator", "initial-cluster-size", "stream-max-segment-size-bytes")),
)


def _fail(reason, class_id, method_id):
    raise PreconditionFailed(reason, class_id, method_id)


def _validate(table, arguments, class_id, method_id):
    check_storable(arguments, class_id, method_id)
    if not arguments:
        return
    for key, value in arguments.items():
        spec = table.get(key)
        if spec is not None and value is not None:
            try:
                spec.check(value)
            except ValueError as exc:
                _fail(str(exc), class_id, method_id)


# a quorum queue's x-delivery-limit may be negative: no limit (RabbitMQ 4)
QUORUM_QUEUE_ARGS = dict(QUEUE_ARGS, **_table(Arg("x-delivery-limit", "int", INT64_MIN, INT64_MAX,
                                                   policy="delivery-limit")))


def validate_queue(arguments, class_id=50, method_id=10, kind="classic"):
    """kind: the queue's type (lavinmq.queue.kinds.queue_type)."""
    _validate(QUORUM_QUEUE_ARGS if kind == "quorum" else QUEUE_ARGS, arguments, class_id, method_id)
    if arguments and arguments.get("x-dead-letter-routing-key") is not None \
            and arguments.get("x-dead-letter-exchange") is None:
        _fail("x-dead-letter-exchange required if x-dead-letter-routing-key is defined",
              class_id, method_id)


# set by the broker only: the user an MQTT session belongs to (lavinmq.mqtt.session)
BROKER_QUEUE_ARGS = ("x-mqtt-owner",)


def check_client_queue(arguments, class_id=50, method_id=10):
    """A client's declare (AMQP, the HTTP API) may not set what only the
    broker sets; definitions the administrator imports may."""
    if arguments:
        for key in BROKER_QUEUE_ARGS:
            if key in arguments:
                _fail(f"{key} is set by the broker only", class_id, method_id)


def validate_exchange(arguments, class_id=40, method_id=10):
    _validate(EXCHANGE_ARGS, arguments, class_id, method_id)


def validate_consumer(arguments, class_id=60, method_id=20):
    _validate(CONSUMER_ARGS, arguments, class_id, method_id)


def validate_binding(exchange_type, arguments, class_id, method_id):
    """Headers bindings: x-match must be a mode the broker knows. Other keys
    are header names to match, x- prefixed or not. x-head, x-tail and x-from
    (persistent exchanges): an integer, one of them at most."""
    _validate(BINDING_ARGS, arguments, class_id, method_id)
    asked = [k for k in BINDING_ARGS if arguments and arguments.get(k) is not None]
    if len(asked) > 1:
        _fail(f"only one of x-head, x-tail and x-from can be given, not {' and '.join(asked)}",
              class_id, method_id)
    if arguments and exchange_type == "headers" and "x-match" in arguments:
        mode = arguments["x-match"]
        if isinstance(mode, (bytes, bytearray)):
            mode = bytes(mode).decode(errors="replace")
        if mode not in X_MATCH:
            _fail(f"x-match must be one of {', '.join(X_MATCH)}, not '{mode}'", class_id, method_id)


POLICY_KEYS = {a.policy: a for t in (QUEUE_ARGS, EXCHANGE_ARGS) for a in t.values() if a.policy}
POLICY_KEYS.update(EXTRA_POLICY_KEYS)


def validate_policy_definition(definition):
    """-> the definition, or raise ValueError naming the first bad key."""
    if not isinstance(definition, dict) or not definition:
        raise ValueError("a policy definition must be a non-empty object")
    for key, value in definition.items():
        spec = POLICY_KEYS.get(key)
        if spec is None:
            raise ValueError(f"unknown policy key '{key}'")
        spec.check(value)
    if "dead-letter-routing-key" in definition and "dead-letter-exchange" not in definition:
        raise ValueError("dead-letter-exchange required if dead-letter-routing-key is defined")
    return definition


def check_storable(arguments, class_id, method_id):
    """Raise 406 unless `arguments` survive an encode/decode round trip."""
    if not arguments:
        return
    if not isinstance(arguments, dict):
        _fail("arguments must be a table", class_id, method_id)
    try:
        decode_table_bytes(encode_table_bytes(arguments))
    except Exception as exc:
        _fail(f"invalid arguments: {(str(exc) or type(exc).__name__)[:200]}", class_id, method_id)
    # RabbitMQ cannot even decode NaN or an infinity (it drops the
    # connection); stored here they would reach every API listing
    where = _non_finite(arguments)
    if where is not None:
        _fail(f"invalid arguments: {where[:200]} is NaN or infinite", class_id, method_id)


def _non_finite(value, path=""):
    """The path of the first NaN or infinite number in a field value, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "value")
    if isinstance(value, dict):
        for k, v in value.items():
            found = _non_finite(v, f"{path}.{k}" if path else str(k))
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _non_finite(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


# -- redeclare equivalence, and the empty table ---------------------------------


class _Empty(dict):
    """An empty table that refuses to change: shared by every queue without
    arguments or policies (three dicts a queue, 19 MB for 100,000 queues).
    A dict, so that the API serialises it as one."""
    __slots__ = ()

    def _refuse(self, *args, **kwargs):
        raise TypeError("the shared empty table cannot change: make a dict")

    __setitem__ = __delitem__ = setdefault = update = pop = popitem = clear = __ior__ = _refuse


EMPTY = _Empty()


def _norm(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode()
        except UnicodeDecodeError:
            return bytes(v)
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def args_equal(a, b):
    """None when equivalent, else the name of the first differing key."""
    a = a or {}
    b = b or {}
    for key in sorted(set(a) | set(b)):
        if _norm(a.get(key)) != _norm(b.get(key)):
            return key
    return None


def check_equivalent(kind, name, vhost, flags, mine_args, their_args, class_id):
    """Raise 406 for the first flag (name, current, requested) or argument
    that differs from what the existing queue/exchange has."""
    where = f"for {kind} '{name}' in vhost '{vhost}'"
    for flag, mine, theirs in flags:
        if mine != theirs:
            raise PreconditionFailed(f"inequivalent arg '{flag}' {where}: received "
                                     f"'{str(theirs).lower()}' but current is '{str(mine).lower()}'",
                                     class_id, 10)
    diff = args_equal(mine_args, their_args)
    if diff is not None:
        raise PreconditionFailed(f"inequivalent arg '{diff}' {where}", class_id, 10)

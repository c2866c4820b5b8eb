"""Stream queues (`x-queue-type: stream`): the control half over
`_core.stream.StreamQueue` — declaration rules, retention settings, and
consumers' arguments (x-stream-offset, filters, offset tracking), as LavinMQ
and RabbitMQ streams over AMQP 0-9-1."""
import datetime
import os
import re
import time

import orjson

from lavinmq._core.codec import Timestamp
from lavinmq._core.stream import StreamConsumer, StreamQueue as CoreStreamQueue
from lavinmq.queue.kinds import queue_type
from lavinmq.queue.stream_geo import GEO_KEYS, parse_geo
from lavinmq._core.stream_store import StreamStore
from lavinmq.arguments import MAX_AGE_SECONDS, check_equivalent
from lavinmq.errors import PreconditionFailed

# arguments that mean nothing to a stream (LavinMQ refuses the same ones)
INVALID_ARGUMENTS = (
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-expires", "x-delivery-limit",
    "x-overflow", "x-single-active-consumer", "x-max-priority",
)
SEGMENT_SIZE_ARG = "x-stream-max-segment-size-bytes"     # RabbitMQ's name
MIN_SEGMENT_SIZE = 4096

# "7D", "30m": LavinMQ's and RabbitMQ's retention and offset intervals
_INTERVAL = re.compile(r"\A(\d+)([YMDhms])\Z")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "D": 86400, "M": 30 * 86400, "Y": 365 * 86400}
MAX_TIMESTAMP = MAX_AGE_SECONDS         # seconds: an x-stream-offset timestamp up to the year ~12000
OFFSET_RANGE = (-(2 ** 63), 2 ** 64 - 1)    # what the store's offsets are


def is_stream(arguments):
    return queue_type(arguments) == "stream"


def parse_interval(value):
    """'7D' -> seconds, or None if value is not an interval."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    m = _INTERVAL.match(value)
    if not m:
        return None
    return int(m.group(1)) * _UNIT_SECONDS[m.group(2)]


def _non_negative_int(arguments, key, class_id, method_id):
    v = arguments.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise PreconditionFailed(f"invalid arg '{key}': must be a non-negative integer", class_id, method_id)
    return v


def check_declare(durable, exclusive, auto_delete, arguments, class_id=50, method_id=10):
    """Raise 406 for what a stream cannot be."""
    if not durable:
        raise PreconditionFailed("a stream must be durable", class_id, method_id)
    if exclusive:
        raise PreconditionFailed("a stream cannot be exclusive", class_id, method_id)
    if auto_delete:
        raise PreconditionFailed("a stream cannot be auto-delete", class_id, method_id)
    arguments = arguments or {}
    for key in INVALID_ARGUMENTS:
        if key in arguments:
            raise PreconditionFailed(f"invalid arg '{key}' for a stream", class_id, method_id)
    _non_negative_int(arguments, "x-max-length", class_id, method_id)
    _non_negative_int(arguments, "x-max-length-bytes", class_id, method_id)
    if SEGMENT_SIZE_ARG in arguments:
        size = _non_negative_int(arguments, SEGMENT_SIZE_ARG, class_id, method_id)
        if not MIN_SEGMENT_SIZE <= size < 2 ** 31:
            raise PreconditionFailed(f"invalid arg '{SEGMENT_SIZE_ARG}': must be between "
                                     f"{MIN_SEGMENT_SIZE} and 2147483647", class_id, method_id)
    if "x-max-age" in arguments and parse_interval(arguments["x-max-age"]) is None:
        raise PreconditionFailed("invalid arg 'x-max-age': must be a number and a unit of Y, M, D, h, m "
                                 "or s, such as 7D", class_id, method_id)


def open_stream(vhost, name, store_dir, arguments, syncer=None):
    """Create or load the stream's store and queue (its policy is applied
    by the vhost, as for every queue)."""
    arguments = arguments or {}
    size = arguments.get(SEGMENT_SIZE_ARG) or vhost.segment_size
    store = StreamStore(store_dir, size, f"'{name}' in vhost '{vhost.name}'", syncer)
    return StreamQueue(vhost, name, store, arguments)


class StreamQueue(CoreStreamQueue):
    is_stream = True
    queue_type = "stream"
    durable = True
    exclusive = False
    exclusive_owner = None
    auto_delete = False

    def __init__(self, vhost, name, store, arguments):
        super().__init__(name, vhost, store)
        self.arguments = arguments or {}
        self.had_consumers = False
        self.policy_limits = {}
        self._apply_limits()

    # -- retention ---------------------------------------------------------------

    def _apply_limits(self):
        """Effective retention: the stricter of the argument and the policy."""
        def pick(arg, policy_key, parse=lambda v: v):
            values = [parse(v) for v in (self.arguments.get(arg), self.policy_limits.get(policy_key))
                      if v is not None]
            values = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
            return min(values) if values else None
        self.set_retention(pick("x-max-length", "max-length"), pick("x-max-length-bytes", "max-length-bytes"),
                           pick("x-max-age", "max-age", parse_interval))

    def set_retention(self, max_length=None, max_length_bytes=None, max_age_seconds=None):
        """Retention in effect (None: no limit); whole segments beyond it go now."""
        self.store.max_length = max_length or 0
        self.store.max_length_bytes = max_length_bytes or 0
        # (a definition from before the bound may hold more: cut to it)
        self.store.max_age_ms = min(max_age_seconds or 0, MAX_AGE_SECONDS) * 1000
        if not self.closed:
            self.store.apply_retention(int(time.time() * 1000))

    def apply_effective(self, policy, operator_policy, definition, settings):
        """For a policy module that resolves arguments and policies itself:
        settings maps policy keys (max-length, max-length-bytes, max-age) to
        what applies. The other keys mean nothing to a stream."""
        self.policy = policy.name if policy else None
        self.operator_policy = operator_policy.name if operator_policy else None
        self.effective_policy_definition = definition
        self.settings = settings
        age = settings.get("max-age")
        self.set_retention(settings.get("max-length"), settings.get("max-length-bytes"),
                           age if isinstance(age, int) else parse_interval(age))

    def apply_policy(self, definition):
        """A policy's max-length, max-length-bytes and max-age keys (the
        others mean nothing to a stream). definition None clears it."""
        definition = definition or {}
        self.policy_limits = {k: definition[k] for k in ("max-length", "max-length-bytes", "max-age")
                              if k in definition}
        self._apply_limits()

    # -- declaration -------------------------------------------------------------

    def check_equivalent(self, durable, auto_delete, arguments):
        # exclusivity is checked by the vhost (405), as for every queue
        check_equivalent("queue", self.name, self.vhost.name,
                         (("durable", True, durable), ("auto_delete", False, auto_delete)),
                         self.arguments, arguments, 50)

    def touch(self):
        """Streams have no x-expires: a use changes nothing."""

    def stop(self):
        self.stop_timers()

    # -- consumers ---------------------------------------------------------------

    def new_consumer(self, channel, tag, no_ack, exclusive, arguments):
        """basic.consume on a stream: a consumer with its own cursor."""
        arguments = arguments or {}
        if no_ack:
            raise PreconditionFailed("stream consumers must acknowledge messages (no_ack=false)", 60, 20)
        if exclusive:
            raise PreconditionFailed("stream consumers cannot be exclusive", 60, 20)
        # a channel without basic.qos has the broker's default prefetch, which
        # counts (LavinMQ); only an explicit basic.qos(0) leaves no limit
        if not channel.prefetch_consumer:
            raise PreconditionFailed("stream consumers must have a prefetch limit", 60, 20)
        if channel.prefetch_global:
            raise PreconditionFailed("stream consumers do not support a global prefetch limit", 60, 20)
        if "x-priority" in arguments:
            raise PreconditionFailed("x-priority is not supported by stream consumers", 60, 20)
        values, pairs, geo, match_all, match_unfiltered = parse_filters(arguments)
        spec = arguments.get("x-stream-offset")
        track = spec is None and not tag.startswith("amq.ctag-")
        auto = arguments.get("x-stream-automatic-offset-tracking")
        if auto is not None:
            if isinstance(auto, bytes):
                auto = auto.decode("utf-8", "replace")
            if isinstance(auto, str):
                auto = auto.lower() == "true"
            if not isinstance(auto, bool):
                raise PreconditionFailed("x-stream-automatic-offset-tracking must be a boolean", 60, 20)
            track = auto
        position = self.resolve_offset(spec)
        stored = self.store.tracked.get(tag) if track else None
        if stored is not None:
            position = self.store.locate(max(stored, 0))
        with_ts = arguments.get("x-stream-timestamp", False)
        if not isinstance(with_ts, bool):
            raise PreconditionFailed("x-stream-timestamp must be a boolean", 60, 20)
        c = StreamConsumer(channel, tag, self, False, False, 0, arguments)
        c.seek(*position)
        c.with_timestamp = with_ts
        c.track_offset = track
        if stored is not None:
            c.committed = stored
        elif track:
            # a tracked consumer resumes from where it first subscribed,
            # even if it never acked anything
            c.committed = position[2]
            self.store.save_offsets([(tag, position[2])])
        if values or pairs or geo:
            c.set_filters(values, pairs, match_all, match_unfiltered, geo)
        return c

    def resolve_offset(self, spec):
        """x-stream-offset -> (segment, position, offset)."""
        st = self.store
        if spec is None:        # LavinMQ: a consumer without x-stream-offset reads from the start
            return st.first_position()
        if isinstance(spec, bytes):
            spec = spec.decode("utf-8", "replace")
        if isinstance(spec, Timestamp):
            if int(spec) > MAX_TIMESTAMP:
                raise PreconditionFailed(f"x-stream-offset timestamp {int(spec)} is out of range", 60, 20)
            return st.locate_time(int(spec) * 1000)
        if isinstance(spec, datetime.datetime):
            return st.locate_time(int(spec.timestamp() * 1000))
        if isinstance(spec, bool) or (not isinstance(spec, (int, str))):
            raise PreconditionFailed("x-stream-offset must be first, last, next, an offset, a timestamp "
                                     "or an interval such as 1h", 60, 20)
        if isinstance(spec, int):
            if not OFFSET_RANGE[0] <= spec <= OFFSET_RANGE[1]:
                raise PreconditionFailed(f"x-stream-offset {spec} is out of range", 60, 20)
            if spec < 0:        # the last -spec messages (LavinMQ)
                return st.locate(max(st.last_offset + spec + 1, 0))
            return st.locate(spec)
        if spec == "first":
            return st.first_position()
        if spec == "last":
            return st.last_position()
        if spec == "next":
            return st.end_position()
        seconds = parse_interval(spec)
        if seconds is None:
            raise PreconditionFailed(f"x-stream-offset '{spec}' is not first, last, next, an offset, "
                                     f"a timestamp or an interval such as 1h", 60, 20)
        if seconds > MAX_AGE_SECONDS:
            raise PreconditionFailed(f"x-stream-offset '{spec[:40]}' is out of range (at most 10000Y)", 60, 20)
        return st.locate_time(int((time.time() - seconds) * 1000))

    def add_consumer(self, consumer):
        self.had_consumers = True
        super().add_consumer(consumer)

    # -- management API ----------------------------------------------------------

    def stream_details(self):
        st = self.store
        return {
            "type": "stream",
            "first_offset": st.first_offset,
            "last_offset": st.last_offset,
            "first_timestamp": st.first_timestamp,
            "last_timestamp": st.last_timestamp,
            "segments": st.segment_count,
            "message_bytes": st.bytes,
            "message_bytes_ready": st.bytes,
            "consumer_offsets": dict(st.tracked),
            "effective_arguments": {
                "max-length": st.max_length or None, "max-length-bytes": st.max_length_bytes or None,
                "max-age-seconds": (st.max_age_ms // 1000) or None,
            },
        }

    def read(self, spec, count):
        """[(offset, record bytes)] from x-stream-offset spec (HTTP API)."""
        return self.read_from(*self.resolve_offset(spec), count)

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"<StreamQueue {self.name!r} messages={self.message_count} consumers={self.consumer_count}>"


def consumer_details(c):
    """Per-consumer offsets for the API: where its cursor is, what it was
    last given, where a reconnect resumes if it is tracked."""
    return {"offset": c.offset, "last_delivered_offset": c.last_delivered or None,
            "automatic_offset_tracking": c.track_offset,
            "committed_offset": c.committed if c.track_offset and c.committed else None,
            "filtered": c.filtered}


def _text(v):
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    if isinstance(v, bool):
        return b"true" if v else b"false"
    if isinstance(v, int):
        return str(int(v)).encode()
    raise PreconditionFailed("x-stream-filter values must be strings, numbers or booleans", 60, 20)


def parse_filters(arguments):
    """x-stream-filter (a string of comma-separated values, a list, or a
    table of header = value pairs and geo filters, as LavinMQ),
    x-filter-match-type and x-stream-match-unfiltered -> (values, pairs, geo,
    match_all, match_unfiltered)."""
    values, pairs, geo = [], [], []

    def add(f, depth=0):
        if depth > 4:
            raise PreconditionFailed("x-stream-filter nested too deep", 60, 20)
        if isinstance(f, (str, bytes)):
            for part in _text(f).split(b","):
                part = part.strip()
                if part:
                    values.append(part)
        elif isinstance(f, dict):
            for k, v in f.items():
                if k == "x-stream-filter":
                    add(v, depth + 1)
                elif k in GEO_KEYS:
                    geo.append(parse_geo(k, v))
                else:
                    pairs.append((_text(k), _text(v)))
        elif isinstance(f, (list, tuple)):
            for x in f:
                add(x, depth + 1)
        elif f is not None:
            raise PreconditionFailed("x-stream-filter must be a string, a table or an array", 60, 20)

    add(arguments.get("x-stream-filter"))
    match = arguments.get("x-filter-match-type", "all")
    if isinstance(match, bytes):
        match = match.decode("utf-8", "replace")
    if not isinstance(match, str) or match.lower() not in ("all", "any"):
        raise PreconditionFailed("x-filter-match-type must be 'any' or 'all'", 60, 20)
    unfiltered = arguments.get("x-stream-match-unfiltered", False)
    if not isinstance(unfiltered, bool):
        raise PreconditionFailed("x-stream-match-unfiltered must be a boolean", 60, 20)
    return values, pairs, geo, match.lower() == "all", unfiltered

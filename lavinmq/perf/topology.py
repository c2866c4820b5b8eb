"""What `lavinmqperf throughput` declares and publishes beyond one queue:
several queues (`--queues`, LavinMQ's `--queue-pattern`), an exchange of a
given type with bindings (`--exchange-type`, `--bindings`), and messages that
cycle over many routing keys and header sets (`--routing-keys`,
`--properties` with `{i}`)."""
import asyncio
import struct

import orjson

from lavinmq._core.codec import encode_method_frame, encode_properties


class TopologyError(ValueError):
    pass


def queue_names(opts):
    """The queues publishers and consumers spread over."""
    if getattr(opts, "queue_pattern", None):
        if "%" not in opts.queue_pattern:
            raise TopologyError("--queue-pattern must contain '%'")
        lo, hi = opts.queue_pattern_from, opts.queue_pattern_to
        if lo < 1 or hi < lo:
            raise TopologyError("--queue-pattern-from must be >= 1 and <= --queue-pattern-to")
        return [opts.queue_pattern.replace("%", str(i), 1) for i in range(lo, hi + 1)]
    n = getattr(opts, "queues", 1) or 1
    if n < 1:
        raise TopologyError("--queues must be at least 1")
    if n == 1:
        return [opts.queue]
    return [f"{opts.queue}-{i}" for i in range(1, n + 1)]


def spread_queues(opts):
    return len(queue_names(opts)) > 1


def routing_keys(opts):
    """The routing keys publishers cycle over, in order."""
    spec = getattr(opts, "routing_keys", None)
    if spec is None:
        if spread_queues(opts) and opts.routing_key is None:
            return queue_names(opts)        # round robin over the queues, as LavinMQ's --queue-pattern
        return [opts.routing_key if opts.routing_key is not None else opts.queue]
    pattern, _, count = spec.rpartition(":")
    if not pattern:
        pattern = opts.routing_key if opts.routing_key is not None else opts.queue
        if "{i}" not in pattern:
            pattern += ".{i}"
    try:
        n = int(count)
    except ValueError:
        raise TopologyError(f"--routing-keys: {spec!r} is not N or PATTERN:N") from None
    if n < 1:
        raise TopologyError("--routing-keys needs at least one key")
    if "{i}" not in pattern:
        raise TopologyError("--routing-keys: the pattern needs {i}")
    return [pattern.replace("{i}", str(i)) for i in range(n)]


def _substitute(value, i, queue=None):
    if isinstance(value, str):
        value = value.replace("{i}", str(i))
        return value.replace("{queue}", queue) if queue is not None else value
    if isinstance(value, dict):
        return {k: _substitute(v, i, queue) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, i, queue) for v in value]
    return value


def properties(opts, i):
    """Message properties for variant i: `{i}` in string values is replaced."""
    props = orjson.loads(opts.properties) if getattr(opts, "properties", None) else {}
    if not isinstance(props, dict):
        raise TopologyError("--properties must be a JSON object")
    props = _substitute(props, i)
    if opts.persistent:
        props["delivery_mode"] = 2
    return props


def _varies(opts):
    return bool(getattr(opts, "properties", None)) and "{i}" in opts.properties


def bindings(opts, queue):
    """(routing key, arguments) pairs binding `queue` to the exchange."""
    if not opts.exchange:
        return []
    spec = getattr(opts, "bindings", None)
    if spec is None:
        if opts.routing_key is not None and not spread_queues(opts):
            return [(opts.routing_key, {})]
        return [(queue, {})]
    try:
        items = orjson.loads(spec)
    except orjson.JSONDecodeError as exc:
        raise TopologyError(f"--bindings is not JSON: {exc}") from None
    if isinstance(items, dict):
        items = [items]
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise TopologyError("--bindings: each binding is an object {key, args, count}")
        count = int(item.get("count", 1))
        for i in range(count):
            out.append((_substitute(item.get("key", ""), i, queue), _substitute(item.get("args") or {}, i, queue)))
    return out


def message_variants(opts, body, channel=1, frame_max=131072):
    """The basic.publish frames of every message variant, in publish order."""
    keys = routing_keys(opts)
    n = len(keys)
    fixed = None if _varies(opts) else encode_properties(properties(opts, 0))
    return [publish_frames(channel, opts.exchange, keys[i], body,
                           fixed if fixed is not None else encode_properties(properties(opts, i)), frame_max)
            for i in range(n)]


def publish_frames(channel, exchange, routing_key, body, props=b"\x00\x00", frame_max=131072):
    """One basic.publish (method, header, body frames) as bytes; props is a
    wire-form property list."""
    out = [encode_method_frame(channel, 60, 40, (0, exchange, routing_key, False, False))]
    hdr = struct.pack(">HHQ", 60, 0, len(body)) + props
    out.append(struct.pack(">BHI", 2, channel, len(hdr)) + hdr + b"\xce")
    step = frame_max - 8
    for i in range(0, len(body), step):
        chunk = body[i:i + step]
        out.append(struct.pack(">BHI", 3, channel, len(chunk)) + chunk + b"\xce")
    return b"".join(out)


class MessageCycle:
    """Message variants laid end to end, written in slices: publishing n
    messages is one or two transport writes, whatever the variant count."""

    def __init__(self, variants, min_count=1000):
        # whole rounds of the variants, enough for a full batch per write
        variants = variants * -(-min_count // len(variants))
        self.blob = b"".join(variants) * 2
        self.offsets = [0]
        for v in variants * 2:
            self.offsets.append(self.offsets[-1] + len(v))
        self.count = len(variants)
        self.pos = 0
        self.view = memoryview(self.blob)

    def take(self, n):
        """-> bytes-like of the next n messages (n <= count)."""
        start = self.offsets[self.pos]
        end = self.offsets[self.pos + n]
        self.pos = (self.pos + n) % self.count
        return self.view[start:end]


async def declare(client, opts):
    """Exchange, queues and bindings, pipelined: every call is sent before
    the replies are awaited."""
    ch = 1
    waits = []
    if opts.exchange and getattr(opts, "exchange_type", None):
        args = orjson.loads(opts.exchange_args) if getattr(opts, "exchange_args", None) else {}
        waits.append(client.wait(ch, (40, 11)))
        client.send(ch, 40, 10, (0, opts.exchange, opts.exchange_type, False, False, False, False, False, args))
    qargs = orjson.loads(opts.queue_args) if opts.queue_args else {}
    for q in queue_names(opts) if opts.queue else []:
        # a named queue is durable, as LavinMQ's lavinmqperf declares it
        waits.append(client.wait(ch, (50, 11)))
        client.send(ch, 50, 10, (0, q, False, True, False, False, False, qargs))
        for key, args in bindings(opts, q):
            waits.append(client.wait(ch, (50, 21)))
            client.send(ch, 50, 20, (0, q, opts.exchange, key, False, args))
    await _all(waits)


async def _all(waits):
    """Await every reply; after a failure (the channel is closed) the rest
    are collected too, then the first error is raised."""
    results = await asyncio.gather(*waits, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r


async def delete(client, queues=(), exchanges=()):
    """Remove what a run declared (benchmarks/compare.py between runs)."""
    waits = []
    for q in queues:
        waits.append(client.wait(1, (50, 41)))
        client.send(1, 50, 40, (0, q, False, False, False))
    for x in exchanges:
        waits.append(client.wait(1, (40, 21)))
        client.send(1, 40, 20, (0, x, False, False))
    await _all(waits)

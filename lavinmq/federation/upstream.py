"""Federation upstreams and upstream sets: the values of the
`federation-upstream` and `federation-upstream-set` parameters, with
LavinMQ's keys and defaults (docs/federation.md), checked once when set."""
import dataclasses
from dataclasses import dataclass

from lavinmq.client.uri import URIError, parse

ACK_MODES = ("on-confirm", "on-publish", "no-ack")
# keys an upstream set's entry may override, besides "upstream"
OVERRIDABLE = ("uri", "prefetch-count", "reconnect-delay", "ack-mode", "exchange", "queue", "max-hops",
               "expires", "message-ttl", "consumer-tag")


class UpstreamError(ValueError):
    pass


@dataclass(frozen=True)
class Upstream:
    name: str
    uris: tuple
    exchange: str = None            # None: the downstream exchange's own name
    queue: str = None               # None: the downstream queue's own name
    prefetch_count: int = 1000
    reconnect_delay: float = 1.0    # seconds
    ack_mode: str = "on-confirm"
    max_hops: int = 1
    expires: int = None             # ms, x-expires of the upstream queue (exchange federation)
    message_ttl: int = None         # ms, x-message-ttl of the upstream queue
    consumer_tag: str = None

    @property
    def tag(self):
        return self.consumer_tag or f"federation-link-{self.name}"


def _int(value, key, lo, hi=2 ** 63 - 1):
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise UpstreamError(f"{key} must be an integer from {lo} to {hi}")
    return value


def _str(value, key):
    if not isinstance(value, str) or len(value.encode("utf-8", "surrogateescape")) > 255:
        raise UpstreamError(f"{key} must be a string of at most 255 bytes")
    return value


def _fields(value):
    """The keys an upstream and a set entry share -> Upstream field values."""
    out = {}
    if "uri" in value:
        uris = value["uri"]
        if isinstance(uris, str):
            uris = [uris]
        if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
            raise UpstreamError("uri must be an AMQP URI or a non-empty list of them")
        for u in uris:
            try:
                parse(u)
            except URIError as exc:
                raise UpstreamError(f"uri: {exc}") from None
        out["uris"] = tuple(uris)
    for key, field in (("exchange", "exchange"), ("queue", "queue"), ("consumer-tag", "consumer_tag")):
        if value.get(key) is not None:
            out[field] = _str(value[key], key) or None
    if value.get("prefetch-count") is not None:
        out["prefetch_count"] = _int(value["prefetch-count"], "prefetch-count", 0, 65535)
    if value.get("reconnect-delay") is not None:
        delay = value["reconnect-delay"]
        if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not 0 <= delay <= 86400:
            raise UpstreamError("reconnect-delay must be a number of seconds from 0 to 86400")
        out["reconnect_delay"] = float(delay)
    if value.get("ack-mode") is not None:
        if value["ack-mode"] not in ACK_MODES:
            raise UpstreamError(f"ack-mode must be one of {', '.join(ACK_MODES)}")
        out["ack_mode"] = value["ack-mode"]
    if value.get("max-hops") is not None:
        out["max_hops"] = _int(value["max-hops"], "max-hops", 1, 2 ** 31 - 1)
    if value.get("expires") is not None:
        out["expires"] = _int(value["expires"], "expires", 1, 2 ** 31 - 1)
    if value.get("message-ttl") is not None:
        out["message_ttl"] = _int(value["message-ttl"], "message-ttl", 0, 2 ** 31 - 1)
    return out


def check_upstream(name, value):
    """A federation-upstream value -> Upstream; UpstreamError says what is wrong."""
    if not isinstance(value, dict):
        raise UpstreamError("an upstream's value must be an object")
    if "uri" not in value:
        raise UpstreamError("Field 'uri' is required")
    return Upstream(name=name, **_fields(value))


def check_set(value):
    """A federation-upstream-set value -> [(upstream name, overrides)]."""
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise UpstreamError("an upstream set must be a list of objects")
    out = []
    for entry in value:
        name = entry.get("upstream")
        if not isinstance(name, str) or not name:
            raise UpstreamError("every entry of an upstream set needs 'upstream': the name of an upstream")
        out.append((name, _fields({k: v for k, v in entry.items() if k in OVERRIDABLE})))
    return out


def with_overrides(upstream, overrides):
    return dataclasses.replace(upstream, **overrides) if overrides else upstream

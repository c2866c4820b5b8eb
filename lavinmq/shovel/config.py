"""A shovel's definition: the value of a `shovel` parameter, with LavinMQ's
keys (docs/shovels.md) and RabbitMQ's older spellings of two of them,
checked once when it is set, so that a running shovel never meets a value
it cannot use."""
from dataclasses import dataclass, field

from lavinmq.client.uri import URIError, parse

ACK_MODES = ("on-confirm", "on-publish", "no-ack")
DEFAULT_PREFETCH = 1000
DEFAULT_RECONNECT_DELAY = 5.0       # seconds, as LavinMQ
# other keys (RabbitMQ's add-forward-headers, publish-properties ...) are
# ignored, as LavinMQ ignores them: an export from RabbitMQ carries them


class ShovelConfigError(ValueError):
    pass


@dataclass
class ShovelConfig:
    src_uris: list
    dest_uris: list
    src_queue: str = None
    src_exchange: str = None
    src_exchange_key: str = None
    src_prefetch_count: int = DEFAULT_PREFETCH
    src_delete_after: object = "never"      # "never", "queue-length" or a message count
    src_consumer_args: dict = field(default_factory=dict)
    dest_queue: str = None
    dest_exchange: str = None
    dest_exchange_key: str = None
    ack_mode: str = "on-confirm"
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY

    @property
    def http(self):
        return self.dest_uris[0].startswith(("http://", "https://"))


def _uris(value, key, http_ok):
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(u, str) for u in value):
        raise ShovelConfigError(f"{key} must be a URI or a non-empty list of URIs")
    kinds = set()
    for uri in value:
        if http_ok and uri.startswith(("http://", "https://")):
            _http_uri(uri, key)
            kinds.add("http")
            continue
        try:
            parse(uri)
        except URIError as exc:
            raise ShovelConfigError(f"{key}: {exc}") from None
        kinds.add("amqp")
    if len(kinds) > 1:
        raise ShovelConfigError(f"{key}: the URIs must all be AMQP or all be HTTP")
    return list(value)


def _http_uri(uri, key):
    import urllib.parse
    try:
        parts = urllib.parse.urlsplit(uri)
        parts.port
    except ValueError as exc:
        raise ShovelConfigError(f"{key}: bad URI: {exc}") from None
    if not parts.hostname:
        raise ShovelConfigError(f"{key}: an HTTP URI needs a host")


def _str(value, key, optional=True):
    v = value.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise ShovelConfigError(f"{key} must be a string")
    if len(v.encode("utf-8", "surrogateescape")) > 255:
        raise ShovelConfigError(f"{key} is longer than 255 bytes")
    return v


def _int(value, key, default, lo, hi):
    v = value.get(key, default)
    if isinstance(v, str) and v.isdigit():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ShovelConfigError(f"{key} must be an integer from {lo} to {hi}")
    return v


def check(value):
    """A parameter value -> ShovelConfig; ShovelConfigError names what is wrong."""
    if not isinstance(value, dict):
        raise ShovelConfigError("a shovel's value must be an object")
    for key in ("src-protocol", "dest-protocol"):
        if value.get(key, "amqp091") != "amqp091":
            raise ShovelConfigError(f"{key}: only amqp091 is supported")
    if "src-uri" not in value or "dest-uri" not in value:
        raise ShovelConfigError("Fields 'src-uri' and 'dest-uri' are required")
    cfg = ShovelConfig(_uris(value["src-uri"], "src-uri", False), _uris(value["dest-uri"], "dest-uri", True))
    cfg.src_queue = _str(value, "src-queue")
    cfg.src_exchange = _str(value, "src-exchange")
    cfg.src_exchange_key = _str(value, "src-exchange-key")
    if cfg.src_queue is None and cfg.src_exchange is None:
        raise ShovelConfigError("Shovel source requires a queue or an exchange")
    if cfg.src_queue is not None and cfg.src_exchange is not None:
        raise ShovelConfigError("give src-queue or src-exchange, not both")
    prefetch_key = "src-prefetch-count" if "src-prefetch-count" in value else "prefetch-count"
    cfg.src_prefetch_count = _int(value, prefetch_key, DEFAULT_PREFETCH, 0, 65535)
    delete_key = "src-delete-after" if "src-delete-after" in value else "delete-after"
    delete_after = value.get(delete_key, "never")
    if isinstance(delete_after, str) and delete_after.isdigit():
        delete_after = int(delete_after)
    if delete_after not in ("never", "queue-length") and (
            not isinstance(delete_after, int) or isinstance(delete_after, bool) or delete_after < 1):
        raise ShovelConfigError(f"{delete_key} must be never, queue-length or a message count")
    cfg.src_delete_after = delete_after
    args = value.get("src-consumer-args", {})
    if not isinstance(args, dict):
        raise ShovelConfigError("src-consumer-args must be an object")
    cfg.src_consumer_args = args
    cfg.dest_queue = _str(value, "dest-queue")
    cfg.dest_exchange = _str(value, "dest-exchange")
    cfg.dest_exchange_key = _str(value, "dest-exchange-key")
    if not cfg.http and cfg.dest_queue is None and cfg.dest_exchange is None:
        raise ShovelConfigError("Shovel destination requires a queue or an exchange")
    if cfg.dest_queue is not None and cfg.dest_exchange is not None:
        raise ShovelConfigError("give dest-queue or dest-exchange, not both")
    ack_mode = value.get("ack-mode", "on-confirm")
    if ack_mode not in ACK_MODES:
        raise ShovelConfigError(f"ack-mode must be one of {', '.join(ACK_MODES)}")
    cfg.ack_mode = ack_mode
    delay = value.get("reconnect-delay", DEFAULT_RECONNECT_DELAY)
    if isinstance(delay, str):
        try:
            delay = float(delay)
        except ValueError:
            pass
    if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not 0 <= delay <= 86400:
        raise ShovelConfigError("reconnect-delay must be a number of seconds from 0 to 86400")
    cfg.reconnect_delay = float(delay)
    return cfg


def check_access(cfg, user):
    """As LavinMQ: a URI without a host is this broker, used with the
    internal user's rights, so the user who defines the shovel must hold
    those rights on what it names. Remote URIs carry their own credentials."""
    if user is None or user.is_administrator:
        return
    for uri in cfg.src_uris:
        u = parse(uri)
        if not u.local:
            continue
        name = cfg.src_queue if cfg.src_queue is not None else cfg.src_exchange
        if not (user.can_read(u.vhost, name) and user.can_configure(u.vhost, name)):
            raise PermissionError(f"{user.name} can't access '{name}' in vhost '{u.vhost}'")
    if cfg.http:
        return
    for uri in cfg.dest_uris:
        u = parse(uri)
        if not u.local:
            continue
        if cfg.dest_exchange is not None and not (user.can_write(u.vhost, cfg.dest_exchange)
                                                  and user.can_configure(u.vhost, cfg.dest_exchange)):
            raise PermissionError(f"{user.name} can't access exchange '{cfg.dest_exchange}' in vhost '{u.vhost}'")
        if cfg.dest_queue is not None and not user.can_configure(u.vhost, cfg.dest_queue):
            raise PermissionError(f"{user.name} can't access queue '{cfg.dest_queue}' in vhost '{u.vhost}'")

"""MQTT topic filters: validation (MQTT 3.1.1, 4.7), their binding keys on
amq.topic, and matching of topic names against them (for retained
messages; routing is amq.topic's trie).

The mapping is RabbitMQ's MQTT plugin's: '/' and '.' are swapped, '+'
becomes '*', '#' stays. `a/#` also matches `a`, as the specification says,
and so does the binding key `a.#` in a topic exchange. A filter level that is
a literal '*' would become a wildcard on amq.topic: such a filter is refused
(SUBACK 0x80) rather than matching more than asked for."""

MAX_KEY = 255       # a binding key is an AMQP short string


class BadFilter(ValueError):
    pass


def check_filter(f):
    """f: bytes from SUBSCRIBE (UTF-8 already checked) -> its levels, or
    BadFilter."""
    if not f:
        raise BadFilter("empty topic filter")
    levels = f.split(b"/")
    for i, level in enumerate(levels):
        if b"#" in level and (level != b"#" or i != len(levels) - 1):
            raise BadFilter("'#' must be a whole level and the last one")
        if b"+" in level and level != b"+":
            raise BadFilter("'+' must be a whole level")
        if level == b"*":
            raise BadFilter("a level '*' has no form on amq.topic (it would match any level)")
    return levels


def swap(b):
    return b.translate(SWAP)


SWAP = bytes.maketrans(b"/.", b"./")


def binding_key(f):
    """MQTT filter bytes -> binding key str on amq.topic (BadFilter if it
    cannot be one)."""
    levels = check_filter(f)
    key = b".".join(b"*" if lv == b"+" else lv.translate(SWAP) for lv in levels)
    if len(key) > MAX_KEY:
        raise BadFilter(f"topic filter of {len(key)} bytes: at most {MAX_KEY} are supported")
    return key.decode("utf-8", "surrogateescape")


def filter_of(key):
    """A binding key made by binding_key() -> the MQTT filter (str)."""
    return "/".join("+" if w == "*" else w.translate(STR_SWAP) for w in key.split("."))


STR_SWAP = str.maketrans("/.", "./")


def matches(filter_levels, topic):
    """Does the topic name (bytes) match the filter's levels (bytes list)?
    Wildcards at the first level do not match topics beginning with '$'."""
    t = topic.split(b"/")
    if topic[:1] == b"$" and filter_levels[0] in (b"+", b"#"):
        return False
    for i, level in enumerate(filter_levels):
        if level == b"#":
            return True
        if i >= len(t):
            return False
        if level != b"+" and level != t[i]:
            return False
    return len(t) == len(filter_levels)

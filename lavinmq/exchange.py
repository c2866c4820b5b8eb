"""Exchange types. Bindings live here in plain Python structures; the Cython
base class (`_core.routing.Exchange`) caches the resolved queue tuple per
routing key, so `resolve` runs once per distinct key, not once per message."""
from lavinmq._core.queue import Queue as CoreQueue
from lavinmq._core.routing import Exchange as CoreExchange
from lavinmq.errors import CommandInvalid


def freeze(value):
    """A hashable, order-independent form of binding arguments."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


class Binding:
    __slots__ = ("source", "destination", "routing_key", "arguments", "key")

    def __init__(self, source, destination, routing_key, arguments):
        self.source = source
        self.destination = destination
        self.routing_key = routing_key
        self.arguments = arguments or {}
        self.key = (destination, routing_key, freeze(self.arguments))


class Exchange(CoreExchange):
    type = ""

    def __init__(self, vhost, name, durable=True, auto_delete=False, internal=False, arguments=None):
        self.vhost = vhost
        self.name = name
        self.name_bytes = name.encode("utf-8", "surrogateescape")
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments or {}
        self.version = vhost.routing_version
        self.bindings = {}          # Binding.key -> Binding

    # -- bindings ------------------------------------------------------------

    def bind(self, destination, routing_key, arguments):
        b = Binding(self, destination, routing_key, arguments)
        if b.key in self.bindings:
            return False
        self.bindings[b.key] = b
        self._add(b)
        self.version.bump()
        return True

    def unbind(self, destination, routing_key, arguments):
        b = self.bindings.pop((destination, routing_key, freeze(arguments or {})), None)
        if b is None:
            return False
        self._remove(b)
        self.version.bump()
        return True

    def remove_destination(self, destination):
        for key in [k for k in self.bindings if k[0] is destination]:
            self._remove(self.bindings.pop(key))
        self.version.bump()

    def _add(self, binding):
        pass

    def _remove(self, binding):
        pass

    # -- routing -------------------------------------------------------------

    def match(self, routing_key, headers):
        """Destinations (queues and exchanges) directly bound for this message."""
        raise NotImplementedError

    def resolve(self, routing_key, headers):
        queues = {}
        cacheable = self._collect(routing_key, headers, queues, set())
        return tuple(queues), cacheable

    def _collect(self, routing_key, headers, queues, seen):
        seen.add(self)
        cacheable = self.cacheable
        for dest in self.match(routing_key, headers):
            if isinstance(dest, CoreQueue):
                if not dest.closed:
                    queues[dest] = None
            elif dest not in seen:
                if isinstance(dest, HeadersExchange):
                    cacheable = False
                    if headers is None:
                        return False   # the caller must route again with headers
                cacheable = dest._collect(routing_key, headers, queues, seen) and cacheable
        return cacheable

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"

    def __hash__(self):
        return id(self)


class DirectExchange(Exchange):
    type = "direct"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.by_key = {}

    def _add(self, b):
        self.by_key.setdefault(b.routing_key, {})[b.key] = b.destination

    def _remove(self, b):
        dests = self.by_key.get(b.routing_key)
        if dests is not None:
            dests.pop(b.key, None)
            if not dests:
                del self.by_key[b.routing_key]

    def match(self, routing_key, headers):
        return tuple(self.by_key.get(routing_key, {}).values())


class FanoutExchange(Exchange):
    type = "fanout"

    def match(self, routing_key, headers):
        return tuple(b.destination for b in self.bindings.values())


def topic_matches(pattern, words):
    """AMQP topic matching: '*' is exactly one word, '#' zero or more."""
    # dynamic programming over (pattern index, word index)
    reachable = {0}
    for i, p in enumerate(pattern):
        nxt = set()
        for j in reachable:
            if p == "#":
                nxt.update(range(j, len(words) + 1))
            elif j < len(words) and (p == "*" or p == words[j]):
                nxt.add(j + 1)
        reachable = nxt
        if not reachable:
            return False
    return len(words) in reachable


class TopicExchange(Exchange):
    type = "topic"

    def match(self, routing_key, headers):
        words = routing_key.split(".")
        out = []
        for b in self.bindings.values():
            if topic_matches(b.routing_key.split("."), words):
                out.append(b.destination)
        return out


class HeadersExchange(Exchange):
    type = "headers"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cacheable = False

    def match(self, routing_key, headers):
        headers = headers or {}
        return [b.destination for b in self.bindings.values() if headers_match(b.arguments, headers)]


def headers_match(args, headers):
    mode = args.get("x-match", "all")
    with_x = mode in ("all-with-x", "any-with-x")
    wanted = [(k, v) for k, v in args.items()
              if k != "x-match" and (with_x or not k.startswith("x-"))]
    if mode in ("any", "any-with-x"):
        return any(_header_equal(headers, k, v) for k, v in wanted)
    return all(_header_equal(headers, k, v) for k, v in wanted)


def _header_equal(headers, key, value):
    if key not in headers:
        return False
    return value is None or headers[key] == value


class DefaultExchange(Exchange):
    """The nameless exchange: the routing key names the queue."""
    type = "direct"

    def match(self, routing_key, headers):
        q = self.vhost.queues.get(routing_key)
        return (q,) if q is not None else ()


EXCHANGE_TYPES = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
}


def exchange_class(type_name, class_id=40, method_id=10):
    try:
        return EXCHANGE_TYPES[type_name]
    except KeyError:
        raise CommandInvalid(f"unknown exchange type '{type_name}'", class_id, method_id) from None

"""Consistent-hash exchange (`x-consistent-hash`), as LavinMQ and RabbitMQ's
plugin: the binding key is the destination's weight; the routing key picks
one destination, or instead a header (`hash-header`, LavinMQ's `x-hash-on`)
or a property (`hash-property`). `x-algorithm`: `jump` (default: even spread,
adding a binding moves only its share) or `ring` (LavinMQ's ring)."""
from lavinmq._core.routing import PROPERTY_INDEX, ConsistentHashMatcher
from lavinmq.errors import PreconditionFailed
from lavinmq.exchange.base import Exchange, bind_error

MAX_WEIGHT = 1_000_000


def _string_argument(exchange, arguments, key):
    value = arguments.get(key)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "surrogateescape")
    if not isinstance(value, str) or not value:
        raise PreconditionFailed(f"invalid arg '{key}' for exchange '{exchange}': expected a non-empty string",
                                 40, 10)
    return value


class ConsistentHashExchange(Exchange):
    type = "x-consistent-hash"

    def make_matcher(self):
        args = self.arguments
        header = _string_argument(self.name, args, "hash-header") or _string_argument(self.name, args, "x-hash-on")
        prop = _string_argument(self.name, args, "hash-property")
        if header is not None and prop is not None:
            raise PreconditionFailed(f"exchange '{self.name}': hash-header and hash-property cannot both be set",
                                     40, 10)
        if prop is not None:
            prop = prop.replace("-", "_")
            if prop not in PROPERTY_INDEX or prop == "headers":
                raise PreconditionFailed(f"exchange '{self.name}': unknown hash-property '{prop}'", 40, 10)
        # an unknown x-algorithm falls back to the default, as LavinMQ does
        algorithm = "ring" if args.get("x-algorithm") == "ring" else "jump"
        return ConsistentHashMatcher(algorithm, header, prop)

    @staticmethod
    def weight(destination, routing_key):
        if not routing_key.isdigit() or not routing_key.isascii():
            raise bind_error(destination, "Routing key must to be a number")
        weight = int(routing_key)
        if weight > MAX_WEIGHT:
            raise bind_error(destination, f"Routing key (weight) must not exceed {MAX_WEIGHT}")
        return weight

    def _add(self, b, matcher=None):
        weight = self.weight(b.destination, b.routing_key)
        m = self.matcher if matcher is None else matcher     # another: a replay's filter
        try:
            m.add(b.destination, b.destination.name.encode("utf-8", "surrogateescape"), weight,
                  self.is_exchange(b.destination))
        except ValueError as exc:
            raise bind_error(b.destination, str(exc)) from None

    def _remove(self, b):
        self.matcher.remove(b.destination, int(b.routing_key))

    def replay_matcher(self, binding):
        # which destination a message hashes to depends on every binding
        m = self.make_matcher()
        for b in self.bindings.values():
            self._add(b, m)
        self._add(binding, m)
        return m

    def unbind(self, destination, routing_key, arguments):
        self.weight(destination, routing_key)       # LavinMQ refuses a bad weight on unbind too
        return super().unbind(destination, routing_key, arguments)

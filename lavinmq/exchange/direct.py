"""Direct exchange: the routing key equals the binding key (one hash table
lookup per message)."""
from lavinmq._core.routing import DirectMatcher
from lavinmq.exchange.base import Exchange, encode_key


class DirectExchange(Exchange):
    type = "direct"

    def make_matcher(self):
        return DirectMatcher()

    def _add(self, b, matcher=None):
        m = self.matcher if matcher is None else matcher     # another: a replay's filter
        m.add(encode_key(b.routing_key), b.destination, self.is_exchange(b.destination))

    def _remove(self, b):
        self.matcher.remove(encode_key(b.routing_key), b.destination)

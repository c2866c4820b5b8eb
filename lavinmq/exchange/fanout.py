"""Fanout exchange: every bound destination gets every message."""
from lavinmq._core.routing import FanoutMatcher
from lavinmq.exchange.base import Exchange


class FanoutExchange(Exchange):
    type = "fanout"

    def make_matcher(self):
        return FanoutMatcher()

    def _add(self, b, matcher=None):
        m = self.matcher if matcher is None else matcher     # another: a replay's filter
        m.add(b.destination, self.is_exchange(b.destination))

    def _remove(self, b):
        self.matcher.remove(b.destination)

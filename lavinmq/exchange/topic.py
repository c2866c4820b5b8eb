"""Topic exchange: binding keys with `*` (one word) and `#` (zero or more
words), matched by a trie walk in Cython (lavinmq/_core/_match_topic.pxi)."""
from lavinmq._core.routing import TopicMatcher
from lavinmq.exchange.base import Exchange, encode_key


class TopicExchange(Exchange):
    type = "topic"

    def make_matcher(self):
        return TopicMatcher()

    def _add(self, b, matcher=None):
        m = self.matcher if matcher is None else matcher     # another: a replay's filter
        m.add(encode_key(b.routing_key), b.destination, self.is_exchange(b.destination))

    def _remove(self, b):
        self.matcher.remove(encode_key(b.routing_key), b.destination)

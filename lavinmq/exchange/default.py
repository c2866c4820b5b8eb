"""The nameless exchange: the routing key names the queue. The vhost tells
it about every queue declared and deleted."""
from lavinmq._core.routing import DefaultMatcher
from lavinmq.exchange.base import Exchange, encode_key


class DefaultExchange(Exchange):
    type = "direct"

    def make_matcher(self):
        return DefaultMatcher()

    def queue_added(self, queue):
        self.matcher.add(encode_key(queue.name), queue)

    def queue_removed(self, queue):
        self.matcher.remove(encode_key(queue.name), queue)

    def _add(self, b, matcher=None):
        raise AssertionError("the default exchange has no bindings")

    def _remove(self, b):
        pass

"""Headers exchange: bindings match on message headers (`x-match` all, any,
all-with-x, any-with-x), compiled once per binding in Cython."""
from lavinmq._core.routing import HeadersMatcher, parse_x_match
from lavinmq.exchange.base import Exchange, bind_error


class HeadersExchange(Exchange):
    type = "headers"

    def make_matcher(self):
        return HeadersMatcher()

    def _add(self, b, matcher=None):
        try:
            parse_x_match(b.arguments)
        except ValueError as exc:
            raise bind_error(b.destination, str(exc)) from None
        m = self.matcher if matcher is None else matcher     # another: a replay's filter
        m.add(b.key, b.arguments, b.destination, self.is_exchange(b.destination))

    def _remove(self, b):
        self.matcher.remove(b.key)

"""x-federation-upstream: the helper exchange a downstream broker's
exchange federation link declares on its upstream (LavinMQ's and RabbitMQ's
name). It routes as fanout to the link's queue; the downstream drops what
has already gone max-hops hops (x-received-from), as LavinMQ does."""
from lavinmq.exchange.fanout import FanoutExchange


class FederationUpstreamExchange(FanoutExchange):
    type = "x-federation-upstream"

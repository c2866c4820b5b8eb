"""Exchange types, one per module, each over its Cython matcher
(lavinmq/_core/routing.pyx and its _match_*.pxi files)."""
from lavinmq.errors import PreconditionFailed
from lavinmq.exchange.base import Binding, Exchange, freeze
from lavinmq.exchange.consistent_hash import ConsistentHashExchange
from lavinmq.exchange.default import DefaultExchange
from lavinmq.exchange.direct import DirectExchange
from lavinmq.exchange.fanout import FanoutExchange
from lavinmq.exchange.federation_upstream import FederationUpstreamExchange
from lavinmq.exchange.headers import HeadersExchange
from lavinmq.exchange.topic import TopicExchange

EXCHANGE_TYPES = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
    "x-consistent-hash": ConsistentHashExchange,
    "x-federation-upstream": FederationUpstreamExchange,
}

# every type a declare accepts, as /api/overview lists them (exchange_types)
# and the UI offers them: the routing types above, and x-delayed-message,
# which declares a delaying exchange of its x-delayed-type (lavinmq.vhost)
DECLARABLE_TYPES = {
    "direct": "AMQP direct exchange, as per the AMQP specification",
    "fanout": "AMQP fanout exchange, as per the AMQP specification",
    "headers": "AMQP headers exchange, as per the AMQP specification",
    "topic": "AMQP topic exchange, as per the AMQP specification",
    "x-consistent-hash": "Consistent hashing exchange: one destination per message, by weight",
    "x-delayed-message": "Delays each message by its x-delay header (ms), then routes it as its x-delayed-type",
    "x-federation-upstream": "Federation upstream helper exchange: a downstream's exchange link declares it here",
}

__all__ = ["Binding", "DECLARABLE_TYPES", "ConsistentHashExchange", "DefaultExchange", "DirectExchange", "EXCHANGE_TYPES",
           "Exchange", "FanoutExchange", "HeadersExchange", "TopicExchange", "exchange_class", "freeze"]


def exchange_class(type_name, class_id=40, method_id=10):
    """An unknown type closes the channel with 406, as LavinMQ (RabbitMQ
    3.10 closes the connection with 503); pika's acceptance tests expect 406."""
    try:
        return EXCHANGE_TYPES[type_name]
    except KeyError:
        raise PreconditionFailed(f"unknown exchange type '{type_name}'", class_id, method_id) from None

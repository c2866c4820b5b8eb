"""Exchange types, one per module, each over its Cython matcher
(lavinmq/_core/routing.pyx and its _match_*.pxi files)."""
from lavinmq.errors import CommandInvalid
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

__all__ = ["Binding", "ConsistentHashExchange", "DefaultExchange", "DirectExchange", "EXCHANGE_TYPES",
           "Exchange", "FanoutExchange", "HeadersExchange", "TopicExchange", "exchange_class", "freeze"]


def exchange_class(type_name, class_id=40, method_id=10):
    try:
        return EXCHANGE_TYPES[type_name]
    except KeyError:
        raise CommandInvalid(f"unknown exchange type '{type_name}'", class_id, method_id) from None

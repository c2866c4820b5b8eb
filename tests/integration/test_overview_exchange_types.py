"""/api/overview's exchange_types lists every type a client can declare
(issue 31 item 6): each one listed declares over AMQP, and a type the
broker does not have is refused (so the list is the broker's, not a guess)."""
import pika
import pytest

from lavinmq.exchange import DECLARABLE_TYPES, EXCHANGE_TYPES
from tests.conftest import unique
from tests.integration.test_http_api import call


def test_every_listed_type_declares(broker):
    if broker.external:
        pytest.skip("our broker's HTTP API")
    status, overview = call(broker, "GET", "/api/overview")
    assert status == 200
    listed = [t["name"] for t in overview["exchange_types"]]
    assert set(listed) == set(EXCHANGE_TYPES) | {"x-delayed-message"} == set(DECLARABLE_TYPES)
    assert all(t["enabled"] and t["description"] for t in overview["exchange_types"])
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        for kind in listed:
            name = unique(kind)
            args = {"x-delayed-type": "direct"} if kind == "x-delayed-message" else None
            ch.exchange_declare(name, kind, durable=False, auto_delete=False, arguments=args)
            ch.exchange_delete(name)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:     # as LavinMQ: 406
            ch.exchange_declare(unique("x"), "x-no-such-type")
        assert info.value.reply_code == 406
    finally:
        if conn.is_open:
            conn.close()

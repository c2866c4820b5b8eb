"""Connection and channel errors where LavinMQ 2.9 answers otherwise than
RabbitMQ 3.10, followed as LavinMQ (its spec/connection_spec.cr and
amqp/client.cr): a heartbeat frame on a channel other than 0 closes the
connection with 505 UNEXPECTED_FRAME, and an unknown exchange type closes
the channel with 406 PRECONDITION_FAILED, which pika's acceptance suite
expects too."""
import pika
import pytest
from pamqp import commands

from tests.conftest import unique
from tests.helpers.rawclient import RawClient


def test_heartbeat_on_a_channel_other_than_0_is_an_unexpected_frame(broker):
    """It used to close the connection with 501 FRAME_ERROR."""
    c = RawClient(broker.host, broker.port)
    try:
        c.open_channel(1)
        c.sendall(b"\x08\x00\x01\x00\x00\x00\x00\xce")     # heartbeat, channel 1, size 0
        close = c.expect(commands.Connection.Close)
        assert close.reply_code == 505 and close.reply_text.startswith("UNEXPECTED_FRAME")
        assert (close.class_id, close.method_id) == (0, 0)
        c.send(0, commands.Connection.CloseOk())
    finally:
        c.close()
    # on channel 0 it is a heartbeat, as ever
    c = RawClient(broker.host, broker.port)
    try:
        c.sendall(b"\x08\x00\x00\x00\x00\x00\x00\xce")
        c.open_channel(1)
    finally:
        c.close()


def test_unknown_exchange_type_closes_the_channel_with_406(broker):
    """It used to close the connection with 503 COMMAND_INVALID (RabbitMQ 3.10)."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.exchange_declare(unique("x"), "x-no-such-type")
        assert info.value.reply_code == 406 and "unknown exchange type 'x-no-such-type'" in info.value.reply_text
        assert conn.is_open
        conn.channel().exchange_declare(unique("x"), "direct", auto_delete=True)
    finally:
        conn.close()

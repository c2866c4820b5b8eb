"""What RabbitMQ's clients expect, each reproduced from what the client
library sends: passive declares of exclusive queues, cascading auto-delete,
close handshakes that cross, frame_max slack, idempotent unbinds, the
default exchange, update-secret, and arguments the broker knows."""
import socket
import struct
import time

import pika
import pytest
from pamqp import body as pbody, commands, frame, header

from tests.conftest import unique
from tests.helpers.rawclient import RawClient


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def closed_with(fn):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        fn()
    return e.value.reply_code, e.value.reply_text


# -- 1. passive declare of an exclusive queue by its owner ------------------------

def test_passive_declare_of_own_exclusive_queue(broker):
    owner = connect(broker)
    ch = owner.channel()
    q = ch.queue_declare(unique("excl"), exclusive=True).method.queue
    # pika (and aio-pika, kombu, amqp091-go) send exclusive=0 with passive=1
    assert ch.queue_declare(q, passive=True).method.queue == q
    other = connect(broker)
    code, _ = closed_with(lambda: other.channel().queue_declare(q, passive=True))
    assert code == 405
    # a redeclare that differs in exclusivity is a lock conflict, as RabbitMQ's strict check
    code, text = closed_with(lambda: owner.channel().queue_declare(q, exclusive=False))
    assert code == 405 and "exclusive property value does not match" in text
    other.close()
    owner.close()


# -- 2. cascading auto-delete -------------------------------------------------------

def test_cascading_auto_delete_survives_restart(fresh_broker):
    b = fresh_broker
    c = connect(b)
    ch = c.channel()
    inner, outer, q = unique("inner"), unique("outer"), unique("q")
    ch.exchange_declare(inner, "fanout", durable=True, auto_delete=True)
    ch.exchange_declare(outer, "fanout", durable=True, auto_delete=True)
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, inner)
    ch.exchange_bind(inner, outer)     # outer -> inner -> q
    ch.queue_delete(q)                 # inner loses its last binding, then outer does
    for ex in (inner, outer):
        code, _ = closed_with(lambda: c.channel().exchange_declare(ex, passive=True))
        assert code == 404
    assert c.is_open
    c.close()
    b.restart()
    c = connect(b)
    for ex in (inner, outer):
        code, _ = closed_with(lambda: c.channel().exchange_declare(ex, passive=True))
        assert code == 404
    c.close()
    assert "dictionary changed size" not in b.log_text()


# -- 3. close handshakes -------------------------------------------------------------

def test_close_twice_gets_no_reset(broker):
    """Two Close() calls racing in one client: the second close frame
    arrives after our close-ok. The socket must end with an orderly EOF,
    never a reset."""
    c = RawClient(broker.host, broker.port)
    c.send(0, commands.Connection.Close(200, "bye", 0, 0), commands.Connection.Close(200, "bye", 0, 0))
    _, ok = c.read_frame()
    assert isinstance(ok, commands.Connection.CloseOk)
    time.sleep(0.2)
    c.sock.sendall(b"\x08\x00\x00\x00\x00\x00\x00\xce")    # a late heartbeat is discarded too
    c.sock.settimeout(5)
    try:
        while c.sock.recv(100):     # RabbitMQ answers the second close with close-ok too
            pass
    except ConnectionResetError:
        pytest.fail("the broker reset the connection after close-ok")
    except socket.timeout:
        assert broker.external, "the broker kept the socket open after close-ok"   # RabbitMQ waits for us
    c.sock.close()


def test_crossing_channel_close_is_not_a_connection_error(broker):
    c = RawClient(broker.host, broker.port)
    c.send(1, commands.Channel.Open())
    c.expect(commands.Channel.OpenOk)
    # the server closes channel 1 (404) while the client closes it too
    c.send(1, commands.Basic.Get(queue=unique("missing")), commands.Channel.Close(200, "client close", 0, 0))
    got = [c.read_frame() for _ in range(2)]
    kinds = {type(f) for _, f in got}
    assert kinds == {commands.Channel.Close, commands.Channel.CloseOk}, got
    c.send(1, commands.Channel.CloseOk())
    # the connection is fine and channel 1 can be opened again
    c.send(1, commands.Channel.Open())
    c.expect(commands.Channel.OpenOk)
    c.send(1, commands.Queue.Declare(queue="", exclusive=True))
    c.expect(commands.Queue.DeclareOk)
    c.close()


# -- 4. frame_max slack ----------------------------------------------------------------

def publish_frames(ch, queue, payload):
    hdr = header.ContentHeader(0, len(payload), commands.Basic.Properties())
    return (frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), ch)
            + frame.marshal(hdr, ch)
            + struct.pack(">BHI", 3, ch, len(payload)) + payload + b"\xce")


def test_body_frames_of_frame_max_bytes_are_accepted(broker):
    """amqpstorm and rabbitpy cut bodies into frame_max-byte payloads (8
    more than the spec allows); RabbitMQ accepts them, so do we."""
    c = RawClient(broker.host, broker.port, frame_max=4096)
    q = unique("big")
    c.send(1, commands.Channel.Open())
    c.expect(commands.Channel.OpenOk)
    c.send(1, commands.Queue.Declare(queue=q, exclusive=True))
    c.expect(commands.Queue.DeclareOk)
    c.sendall(publish_frames(1, q, b"a" * 4096))
    c.send(1, commands.Basic.Get(queue=q, no_ack=True))
    c.expect(commands.Basic.GetOk)
    # one byte more is an error that names the right numbers
    c.sendall(publish_frames(1, q, b"b" * 4097))
    while True:
        ch, f = c.read_frame()
        if isinstance(f, commands.Connection.Close):
            break
    assert f.reply_code == 501
    assert "4097" in f.reply_text and "4088" in f.reply_text    # payload against the payload limit
    c.close()


# -- 5. idempotent unbinds ---------------------------------------------------------------

def test_unbind_of_missing_things_is_ok(broker):
    c = connect(broker)
    ch = c.channel()
    q = unique("q")
    ch.queue_declare(q, exclusive=True)
    ch.queue_unbind(q, "amq.direct", "never-bound")
    ch.queue_unbind(q, unique("no-exchange"), "k")
    ch.queue_unbind(unique("no-queue"), "amq.direct", "k")
    ch.exchange_unbind(unique("no-dest"), "amq.fanout", "k")
    ch.exchange_unbind("amq.topic", unique("no-src"), "k")
    assert ch.is_open
    c.close()


# -- 7. the default exchange ----------------------------------------------------------------

def test_passive_declare_of_default_exchange_is_refused(broker):
    c = connect(broker)
    code, _ = closed_with(lambda: c.channel().exchange_declare("", passive=True))
    assert code == 403
    c.close()


# -- 8. update-secret --------------------------------------------------------------------------

def test_update_secret_accepted_for_password_users(broker):
    """RabbitMQ 3.10 (Debian's rabbitmq-server, run on its own ports) answers
    update-secret-ok to a password user, whatever the secret, and the
    connection goes on; pika's update_secret() relies on it."""
    c = connect(broker)
    ch = c.channel()
    for secret in ("guest", "not-the-password", ""):
        c.update_secret(secret, "rotate")
        assert c.is_open
        ch.queue_declare("", exclusive=True)
    c.close()


# -- 9. arguments the broker knows, checked as LavinMQ does -------------------------------------

BAD_QUEUE_ARGS = [
    ({"x-max-length": "abc"}, "x-max-length"),
    ({"x-message-ttl": -1}, "x-message-ttl"),
    ({"x-max-priority": 300}, "x-max-priority"),
    ({"x-overflow": "bogus"}, "x-overflow"),
    ({"x-dead-letter-routing-key": "k"}, "x-dead-letter-routing-key"),
    ({"x-queue-type": "bogus"}, "x-queue-type"),
    ({"x-expires": 0}, "x-expires"),
    ({"x-single-active-consumer": "yes"}, "x-single-active-consumer"),
]


@pytest.mark.parametrize("arguments,named", BAD_QUEUE_ARGS, ids=[n for _, n in BAD_QUEUE_ARGS])
def test_bad_queue_arguments(broker, arguments, named):
    c = connect(broker)
    code, text = closed_with(lambda: c.channel().queue_declare(unique("q"), arguments=arguments))
    assert code == 406 and named in text
    c.close()


def test_bad_exchange_consumer_and_binding_arguments(broker):
    c = connect(broker)
    code, text = closed_with(lambda: c.channel().exchange_declare(
        unique("x"), "direct", arguments={"alternate-exchange": 5}))
    assert code == 406 and "alternate-exchange" in text
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    code, text = closed_with(lambda: ch.basic_consume(q, lambda *a: None, arguments={"x-priority": "high"}))
    assert code == 406 and "x-priority" in text
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    code, text = closed_with(lambda: ch.queue_bind(q, "amq.headers", arguments={"x-match": "bogus"}))
    assert code == 406 and "x-match" in text
    # good values of the same arguments are accepted
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-length": 10, "x-overflow": "reject-publish",
                                                        "x-dead-letter-exchange": "",
                                                        "x-dead-letter-routing-key": "k"}).method.queue
    ch.queue_bind(q, "amq.headers", arguments={"x-match": "any", "a": 1})
    ch.basic_consume(q, lambda *a: None, arguments={"x-priority": 5})
    c.close()

"""Issue 41 rows 2 and 6: what an MQTT CONNECT may do to queues and
sessions that are not its user's.

Row 2: a clean-session CONNECT deleted any queue named `mqtt.<client id>`,
an AMQP queue too, with no permission check: guest's durable `mqtt.guestq`
with 3 confirmed messages was gone after alice connected as `guestq`."""
import pika
import pytest

from tests.mqtt.conftest import Client, Raw
from tests.security.conftest import add_user, call, make_broker  # noqa: F401 (a fixture)


def _confirmed_queue(b, name, messages=3, arguments=None):
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(name, durable=True, arguments=arguments)
    for i in range(messages):
        ch.basic_publish("", name, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    conn.close()


def _depth(b, name):
    status, q = call(b, "GET", f"/api/queues/%2F/{name}")
    return q["messages"] if status == 200 else None


def _connack(b, client_id, user, password, clean=True):
    raw = Raw(b)
    try:
        return raw.login(client_id=client_id, user=user, password=password, clean=clean)[1]
    finally:
        raw.close()


@pytest.fixture
def broker(make_broker):  # noqa: F811
    b = make_broker(mqtt=True)
    add_user(b, "alice", "pw", tags="", perms=(".*", ".*", ".*"))
    add_user(b, "carol", "pw", tags="", perms=("^carol\\.", ".*", ".*"))
    return b


@pytest.mark.parametrize("clean", [True, False])
def test_an_amqp_queue_is_never_an_mqtt_session(broker, clean):
    _confirmed_queue(broker, "mqtt.guestq")
    assert _depth(broker, "mqtt.guestq") == 3
    # identifier rejected: the client id names a queue that is not a session
    assert _connack(broker, "guestq", "alice", "pw", clean=clean) == 2
    assert _depth(broker, "mqtt.guestq") == 3
    # its owner may not turn it into one either
    assert _connack(broker, "guestq", "guest", "guest", clean=clean) == 2
    assert _depth(broker, "mqtt.guestq") == 3


def test_taking_over_a_session_queue_needs_the_configure_right(broker):
    # a session queue (x-queue-type mqtt) declared over AMQP by guest, with messages
    _confirmed_queue(broker, "mqtt.guestsession", arguments={"x-queue-type": "mqtt"})
    # carol may configure only carol.*: not authorized, and the queue stays
    assert _connack(broker, "guestsession", "carol", "pw") == 5
    assert _connack(broker, "guestsession", "carol", "pw", clean=False) == 5
    assert _depth(broker, "mqtt.guestsession") == 3
    # her own client ids work
    assert _connack(broker, "carol.phone", "carol", "pw", clean=False) == 0
    assert _connack(broker, "carol.phone", "carol", "pw", clean=True) == 0
    # alice may configure anything: she could delete it over AMQP as well
    assert _connack(broker, "guestsession", "alice", "pw") == 0
    assert _depth(broker, "mqtt.guestsession") is None


def test_a_refused_connect_leaves_the_connected_client_alone(broker):
    c = Client(broker, "guest-device", user="guest", password="guest")
    assert c.subscribe("news/#", 1) == [1]
    assert _connack(broker, "guest-device", "carol", "pw") == 5
    assert c.disconnected.empty()
    assert _depth(broker, "mqtt.guest-device") == 0
    c.disconnect()


def test_a_queue_declared_after_the_connect_is_not_taken_as_the_session(broker):
    c = Client(broker, "late", user="alice", password="pw")
    _confirmed_queue(broker, "mqtt.late")
    # the session's queue is made at the first SUBSCRIBE: it is guest's queue now
    c.c.subscribe("news/#", 1)
    assert c.disconnected.get(timeout=5) is not None
    assert _depth(broker, "mqtt.late") == 3
    status, bindings = call(broker, "GET", "/api/queues/%2F/mqtt.late/bindings")
    assert [x["source"] for x in bindings] == [""]

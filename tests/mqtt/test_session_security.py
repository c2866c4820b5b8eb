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
    # not authorized (no configure right); with client_id_validation = owner
    # (the default since row 6) refused sooner: the session is guest's
    assert _connack(broker, "guest-device", "carol", "pw") in (2, 5)
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


# -- row 6: MQTT's permission model by default -----------------------------------------------------

def _guest_queue_on_amq_topic(b, name, key="#"):
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare(name, durable=True)
    ch.queue_bind(name, "amq.topic", key)
    conn.close()


@pytest.fixture
def limited(broker):
    """dave may use only names starting with dave. (configure, write and read)."""
    add_user(broker, "dave", "pw", tags="", perms=("^dave\\.", "^dave\\.", "^dave\\."))
    return broker


def test_a_limited_user_reads_and_writes_nothing_of_amq_topic(limited):
    b = limited
    _guest_queue_on_amq_topic(b, "guest-inbox")
    spy = Client(b, "dave.spy", user="dave", password="pw")
    assert spy.rc == 0
    assert spy.subscribe("#", 1) == [0x80]
    writer = Client(b, "dave.writer", user="dave", password="pw", will=("guest/alarm", b"will", 1))
    writer.publish("guest/alarm", b"forged", qos=0, wait=False)
    assert writer.disconnected.get(timeout=5) is not None       # the publish closed it; no will
    guest = Client(b, "guest-reader", user="guest", password="guest")
    guest.subscribe("#", 1)
    guest.publish("guest/ok", b"fine", qos=1)
    assert guest.get().payload == b"fine"
    guest.nothing()
    assert _depth(b, "guest-inbox") == 1
    spy.disconnect()
    guest.disconnect()


def test_another_user_cannot_take_over_a_persistent_session(broker):
    alice = Client(broker, "shared-id", clean=False, user="alice", password="pw")
    assert alice.subscribe("alice/inbox", 1) == [1]
    alice.disconnect()
    pub = Client(broker, "pub", user="guest", password="guest")
    pub.publish("alice/inbox", b"for alice only", qos=1)
    pub.disconnect()
    # guest may configure everything, but the session is alice's
    assert _connack(broker, "shared-id", "guest", "guest", clean=False) == 2
    assert _connack(broker, "shared-id", "guest", "guest", clean=True) == 2
    # while alice is connected too
    alice = Client(broker, "shared-id", clean=False, user="alice", password="pw")
    assert alice.session_present
    assert alice.get().payload == b"for alice only"
    assert _connack(broker, "shared-id", "guest", "guest", clean=False) == 2
    assert alice.disconnected.empty()
    alice.disconnect()
    # a clean session's client id is its user's while it is connected
    bob = Client(broker, "clean-id", user="alice", password="pw")
    assert _connack(broker, "clean-id", "guest", "guest") == 2
    bob.disconnect()


def test_a_session_owner_cannot_be_forged_over_amqp_or_http(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare("mqtt.forged", arguments={"x-queue-type": "mqtt", "x-mqtt-owner": "alice"})
    assert e.value.reply_code == 406
    conn.close()
    status, _ = call(broker, "PUT", "/api/queues/%2F/mqtt.forged2",
                     {"arguments": {"x-queue-type": "mqtt", "x-mqtt-owner": "alice"}})
    assert status == 400


def test_lavinmqs_keys_give_its_behaviour_back(make_broker):  # noqa: F811
    b = make_broker("[mqtt]\npermission_check_enabled = false\nclient_id_validation = none\n", mqtt=True)
    add_user(b, "alice", "pw", tags="")
    add_user(b, "dave", "pw", tags="", perms=("^dave\\.", "^dave\\.", "^dave\\."))
    spy = Client(b, "dave.spy", user="dave", password="pw")
    assert spy.subscribe("#", 1) == [1]
    alice = Client(b, "shared-id", clean=False, user="alice", password="pw")
    assert alice.subscribe("alice/inbox", 1) == [1]
    alice.disconnect()
    pub = Client(b, "pub", user="guest", password="guest")
    pub.publish("alice/inbox", b"for alice only", qos=1)
    pub.disconnect()
    assert spy.get().payload == b"for alice only"      # read without read on amq.topic
    # guest takes over alice's session, and gets what was queued for her
    thief = Client(b, "shared-id", clean=False, user="guest", password="guest")
    assert thief.session_present
    assert thief.get().payload == b"for alice only"
    thief.disconnect()
    spy.disconnect()

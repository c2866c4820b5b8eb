"""Retained messages, and what a restart keeps: persistent sessions with
their subscriptions and queued QoS 1 messages, and retained messages."""
import os

from tests.conftest import unique
from tests.mqtt.conftest import Client, Raw, packet, subscribe_packet
from tests.mqtt.test_sessions import queues


def test_retained_message_on_subscribe(mqtt_broker):
    base = unique("ret")
    live = Client(mqtt_broker, unique("live"))
    assert live.subscribe(base + "/#", 1) == [1]
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(base + "/a", b"old", qos=1, retain=True)
    pub.publish(base + "/a", b"new", qos=1, retain=True)       # replaces it
    pub.publish(base + "/b/c", b"deep", qos=0, retain=True)
    pub.publish(base + "/x", b"not retained", qos=1)
    # a subscription that already existed gets them with retain clear
    got = live.take(4)
    assert [(m.payload, m.retain) for m in got] == [(b"old", False), (b"new", False), (b"deep", False),
                                                   (b"not retained", False)]
    late = Client(mqtt_broker, unique("late"))
    assert late.subscribe(base + "/+", 1) == [1]
    m = late.get()
    assert (m.topic, m.payload, m.retain) == (base + "/a", b"new", True)
    late.nothing()
    assert late.subscribe(base + "/#", 0) == [0]
    got = sorted((m.topic, m.payload, m.retain, m.qos) for m in late.take(2))
    assert got == [(base + "/a", b"new", True, 0), (base + "/b/c", b"deep", True, 0)]
    # an empty retained message clears the topic, and is not delivered as retained
    pub.publish(base + "/a", b"", qos=1, retain=True)
    pub.publish(base + "/b/c", b"", qos=1, retain=True)
    fresh = Client(mqtt_broker, unique("fresh"))
    assert fresh.subscribe(base + "/#", 1) == [1]
    fresh.nothing()
    for c in (live, pub, late, fresh):
        c.disconnect()


def test_restart_keeps_persistent_sessions_and_retained_messages(fresh_mqtt_broker):
    b = fresh_mqtt_broker
    cid, topic = unique("dev"), unique("plant")
    c = Client(b, cid, clean=False)
    assert c.subscribe([(topic + "/+/temp", 1), (topic + "/alarm", 2)]) == [1, 2]
    c.disconnect()
    pub = Client(b, unique("pub"))
    for i in range(100):
        pub.publish(f"{topic}/{i % 3}/temp", b"t%d" % i, qos=1, wait=False)
    pub.publish(topic + "/alarm", b"fire", qos=2)
    pub.publish(topic + "/config", b"setting=1", qos=1, retain=True)
    pub.disconnect()
    # one message is delivered and left unacknowledged when the broker goes down
    raw = Raw(b)
    assert raw.login(client_id=cid, clean=False) == b"\x01\x00"
    first, body = raw.read_packet()
    assert first & 0xf0 == 0x30 and body.endswith(b"t0")
    b.restart()
    raw.close()
    c = Client(b, cid, clean=False)
    assert c.session_present
    got = c.take(101)
    assert [m.payload for m in got] == [b"t%d" % i for i in range(100)] + [b"fire"]
    assert [m.qos for m in got[-2:]] == [1, 2]
    c.nothing()
    # the subscriptions came back with the session
    again = Client(b, unique("pub"))
    again.publish(topic + "/9/temp", b"after restart", qos=1)
    assert c.get().payload == b"after restart"
    newcomer = Client(b, unique("new"))
    assert newcomer.subscribe(topic + "/config", 1) == [1]
    m = newcomer.get()
    assert (m.payload, m.retain) == (b"setting=1", True)
    for x in (c, again, newcomer):
        x.disconnect()
    # LavinMQ's layout: the vhost's directory has mqtt_retained_store/index and <md5>.msg bodies
    vhost_dirs = [d for d in os.listdir(b.data_dir) if len(d) == 40]
    stores = [os.path.join(b.data_dir, d, "mqtt_retained_store") for d in vhost_dirs]
    store = next(s for s in stores if os.path.exists(os.path.join(s, "index")))
    assert open(os.path.join(store, "index"), "rb").read() == f"{topic}/config\n".encode()
    assert [open(os.path.join(store, f), "rb").read() for f in os.listdir(store) if f.endswith(".msg")] == [b"setting=1"]
    b.stop()
    b.check_clean()


def test_restart_forgets_clean_sessions(fresh_mqtt_broker):
    b = fresh_mqtt_broker
    cid = unique("clean")
    raw = Raw(b)
    assert raw.login(client_id=cid, clean=True) == b"\x00\x00"
    raw.send(subscribe_packet(1, ("x/#", 1)))
    assert raw.read_packet() == (0x90, b"\x00\x01\x01")
    assert f"mqtt.{cid}" in queues(b)
    raw.send(packet(0xe0, b""))
    assert raw.closed()
    b.restart()
    assert f"mqtt.{cid}" not in queues(b)
    b.stop()
    b.check_clean()

"""MQTT 3.1.1 with paho-mqtt: connect and login, publish and subscribe at
QoS 0 and 1, wildcards as the specification has them, and what a bad
packet does (closes only its own connection)."""
import base64
import json
import struct
import urllib.request

import pytest

from tests.conftest import unique
from tests.mqtt.conftest import (
    Client, Raw, connect_packet, mstr, packet, publish_packet, subscribe_packet, wait_for,
)


def api(broker, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(broker.http_url + path, data=data, method=method, headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(),
        "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


def test_connect_and_pubsub_qos0(mqtt_broker):
    sub = Client(mqtt_broker, unique("sub"))
    assert sub.rc == 0 and not sub.session_present
    assert sub.subscribe("sensors/+/temp", 0) == [0]
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish("sensors/kitchen/temp", b"21.5")
    pub.publish("sensors/kitchen/humidity", b"40")      # no match
    m = sub.get()
    assert (m.topic, m.payload, m.qos, m.retain) == ("sensors/kitchen/temp", b"21.5", 0, False)
    sub.nothing()
    pub.disconnect()
    sub.disconnect()


def test_qos1_in_order_and_acked(mqtt_broker):
    topic = unique("q1") + "/data"
    sub = Client(mqtt_broker, unique("sub"))
    assert sub.subscribe(topic, 1) == [1]
    pub = Client(mqtt_broker, unique("pub"))
    infos = [pub.publish(topic, b"m%d" % i, qos=1, wait=False) for i in range(2000)]
    for info in infos:
        info.wait_for_publish(10)
    got = sub.take(2000)
    assert [m.payload for m in got] == [b"m%d" % i for i in range(2000)]
    assert {m.qos for m in got} == {1}
    pub.disconnect()
    sub.disconnect()


def test_delivered_qos_is_the_lower_of_publish_and_subscription(mqtt_broker):
    base = unique("qos")
    s0 = Client(mqtt_broker, unique("s0"))
    s1 = Client(mqtt_broker, unique("s1"))
    assert s0.subscribe(base + "/#", 0) == [0]
    assert s1.subscribe(base + "/#", 1) == [1]
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(base + "/a", b"one", qos=1)
    pub.publish(base + "/a", b"zero", qos=0)
    assert [(m.payload, m.qos) for m in s0.take(2)] == [(b"one", 0), (b"zero", 0)]
    assert [(m.payload, m.qos) for m in s1.take(2)] == [(b"one", 1), (b"zero", 0)]
    for c in (s0, s1, pub):
        c.disconnect()


def test_overlapping_subscriptions_get_one_message_at_the_highest_qos(mqtt_broker):
    base = unique("ov")
    sub = Client(mqtt_broker, unique("sub"))
    assert sub.subscribe([(base + "/#", 0), (base + "/a/+", 1)]) == [0, 1]
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(base + "/a/b", b"both", qos=1)
    pub.publish(base + "/c", b"one", qos=1)
    assert [(m.topic, m.qos) for m in sub.take(2)] == [(base + "/a/b", 1), (base + "/c", 0)]
    sub.nothing()
    pub.disconnect()
    sub.disconnect()


@pytest.mark.parametrize("filt,matching,other", [
    ("a/#", ["a", "a/b", "a/b/c", "a/"], ["b", "ab"]),           # '#' includes the parent level
    ("a/+", ["a/b", "a/"], ["a", "a/b/c"]),                       # '+' matches an empty level
    ("+/+", ["a/b", "/b"], ["a", "a/b/c"]),
    ("/#", ["/", "/a", "/a/b"], ["a"]),
    ("#", ["a", "a/b", "/"], []),
    ("a.b/c", ["a.b/c"], ["a/b/c", "a.b.c"]),                      # '.' is an ordinary character
    ("a/+/c", ["a/x.y/c"], ["a/x/y/c"]),
])
def test_wildcards_as_the_specification(mqtt_broker, filt, matching, other):
    base = unique("w")
    sub = Client(mqtt_broker, unique("sub"))
    assert sub.subscribe(f"{base}/{filt}", 0) == [0]
    pub = Client(mqtt_broker, unique("pub"))
    for t in other + matching:
        pub.publish(f"{base}/{t}", t.encode(), qos=1)
    got = [m.payload.decode() for m in sub.take(len(matching))]
    assert got == matching
    sub.nothing()
    pub.disconnect()
    sub.disconnect()


def test_dollar_topics_are_not_matched_by_leading_wildcards(mqtt_broker):
    sub = Client(mqtt_broker, unique("sub"))
    assert sub.subscribe([("#", 0), ("+/x", 0)]) == [0, 0]
    sys_sub = Client(mqtt_broker, unique("sys"))
    name = unique("SYS")
    assert sys_sub.subscribe(f"${name}/#", 0) == [0]
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(f"${name}/x", b"dollar", qos=1)
    assert sys_sub.get().payload == b"dollar"
    # the wildcard subscriber sees no '$' topic (only what else flows by)
    wait_for(lambda: sub.messages.empty() or all(not m.topic.startswith("$") for m in list(sub.messages.queue)),
             what="no $ topic")
    assert all(not m.topic.startswith("$") for m in list(sub.messages.queue))
    for c in (sub, sys_sub, pub):
        c.disconnect()


def test_unsubscribe(mqtt_broker):
    base = unique("u")
    sub = Client(mqtt_broker, unique("sub"))
    assert sub.subscribe([(base + "/a", 1), (base + "/b", 1)]) == [1, 1]
    sub.unsubscribe(base + "/a")
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(base + "/a", b"a", qos=1)
    pub.publish(base + "/b", b"b", qos=1)
    assert sub.get().payload == b"b"
    sub.nothing()
    pub.disconnect()
    sub.disconnect()


def test_login(mqtt_broker):
    bad = Client(mqtt_broker, unique("c"), password="wrong", connect=False)
    bad.c.connect("127.0.0.1", mqtt_broker.mqtt_port)
    bad.c.loop_start()
    _, rc = bad.connack.get(timeout=10)
    assert rc.value == 134 or int(rc) == 4 or rc.is_failure      # bad user name or password
    bad.c.loop_stop()
    raw = Raw(mqtt_broker)
    assert raw.login(user=None, password=None) == b"\x00\x05"      # no credentials: not authorized
    assert raw.closed()
    raw = Raw(mqtt_broker)
    assert raw.login(user="guest", password="nope") == b"\x00\x04"
    assert raw.closed()
    raw = Raw(mqtt_broker)
    assert raw.login(user="no-such-vhost:guest") == b"\x00\x05"
    assert raw.closed()
    raw = Raw(mqtt_broker)
    assert raw.login(level=5) == b"\x00\x01"                      # MQTT 5: unacceptable protocol level
    assert raw.closed()
    raw = Raw(mqtt_broker)
    assert raw.login(level=3, name="MQIsdp") == b"\x00\x00"        # MQTT 3.1 is served too
    raw.close()


def test_vhost_in_the_user_name(mqtt_broker):
    vhost = unique("vh")
    api(mqtt_broker, "PUT", f"/api/vhosts/{vhost}")
    api(mqtt_broker, "PUT", f"/api/permissions/{vhost}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    inside = Client(mqtt_broker, unique("in"), user=f"{vhost}:guest")
    outside = Client(mqtt_broker, unique("out"))
    assert inside.subscribe("t/#", 1) == [1]
    assert outside.subscribe("t/#", 1) == [1]
    pub = Client(mqtt_broker, unique("pub"), user=f"{vhost}:guest")
    pub.publish("t/1", b"in the vhost", qos=1)
    assert inside.get().payload == b"in the vhost"
    outside.nothing()
    queues = {q["name"]: q for q in api(mqtt_broker, "GET", f"/api/queues/{vhost}")}
    session = queues[f"mqtt.{inside.c._client_id.decode()}"]
    assert session["type"] == "mqtt" and session["durable"] is False and session["consumers"] == 1
    for c in (inside, outside, pub):
        c.disconnect()


def test_bad_packets_close_only_their_connection(mqtt_broker):
    topic = unique("bad")
    watcher = Client(mqtt_broker, unique("watch"))
    assert watcher.subscribe(topic, 1) == [1]
    cases = [
        b"\x30\xff\xff\xff\xff\x01",                           # remaining length of five bytes
        publish_packet(topic + "/+", b"x"),                    # wildcard in a topic name
        publish_packet(topic, b"x", qos=3),
        publish_packet(topic, b"x", qos=1, pid=0),
        packet(0x30, mstr(b"a\xff\xfeb") + b"x"),              # topic not UTF-8
        packet(0x30, mstr(b"a\x00b") + b"x"),                  # U+0000 in a topic
        packet(0x80, struct.pack(">H", 1) + mstr("x") + b"\x01"),   # SUBSCRIBE with flags 0000
        packet(0x82, struct.pack(">H", 1) + mstr("x") + b"\x05"),   # QoS 5 requested
        packet(0x62, b"\x00\x01\x00"),                         # PUBREL with three bytes
        packet(0xf0, b""),                                     # reserved type 15
        connect_packet(),                                      # a second CONNECT
    ]
    for data in cases:
        raw = Raw(mqtt_broker)
        assert raw.login(client_id=unique("raw")) == b"\x00\x00"
        raw.send(data)
        assert raw.closed(), data
    raw = Raw(mqtt_broker)
    raw.send(publish_packet("x", b"y"))         # anything before CONNECT
    assert raw.closed()
    # the watcher and its session did not notice
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(topic, b"still here", qos=1)
    assert watcher.get().payload == b"still here"
    pub.disconnect()
    watcher.disconnect()
    assert "Traceback" not in mqtt_broker.log_text()


def test_ping_and_raw_qos1_exchange(mqtt_broker):
    topic = unique("raw")
    raw = Raw(mqtt_broker)
    assert raw.login(client_id=unique("raw")) == b"\x00\x00"
    raw.send(b"\xc0\x00")
    assert raw.read_packet() == (0xd0, b"")
    raw.send(subscribe_packet(7, (topic, 1)))
    assert raw.read_packet() == (0x90, b"\x00\x07\x01")
    raw.send(publish_packet(topic, b"hello", qos=1, pid=99))
    got = {}
    for _ in range(2):
        first, body = raw.read_packet()
        got[first & 0xf0] = (first, body)
    assert got[0x40] == (0x40, b"\x00\x63")                   # PUBACK 99
    first, body = got[0x30]
    assert first == 0x32                                      # QoS 1, not DUP, not retained
    tlen = struct.unpack(">H", body[:2])[0]
    assert body[2:2 + tlen].decode() == topic and body[4 + tlen:] == b"hello"
    pid = body[2 + tlen:4 + tlen]
    raw.send(packet(0x40, pid))                               # PUBACK: the session's queue is empty again
    raw.send(b"\xe0\x00")                                     # DISCONNECT
    assert raw.closed()


def test_packet_size_limit(tmp_path):
    from tests.conftest import BrokerProcess
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[mqtt]\nmax_packet_size = 1024\n")
    b = BrokerProcess(tmp_path / "data", mqtt=True, extra_args=["-c", str(ini)]).start()
    try:
        sub = Client(b, unique("sub"))
        assert sub.subscribe("big/#", 1) == [1]
        raw = Raw(b)
        assert raw.login(client_id=unique("raw")) == b"\x00\x00"
        raw.send(publish_packet("big/ok", b"x" * 900, qos=1, pid=1))
        assert raw.read_packet() == (0x40, b"\x00\x01")
        raw.send(publish_packet("big/no", b"x" * 1100, qos=1, pid=2)[:200])   # refused from its header on
        assert raw.closed()
        raw.close()
        assert sub.get().payload == b"x" * 900
        sub.nothing()
        sub.disconnect()
        assert "larger than max_packet_size 1024" in b.log_text()
    finally:
        assert b.stop() == 0
    b.check_clean()

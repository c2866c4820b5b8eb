"""Sessions (clean and persistent), takeover, wills, keepalive and QoS 2,
with paho-mqtt and raw sockets."""
import struct
import time

from tests.conftest import unique
from tests.mqtt.conftest import (
    Client, Raw, packet, publish_packet, subscribe_packet, wait_for,
)
from tests.mqtt.test_basic import api


def queues(broker):
    return {q["name"]: q for q in api(broker, "GET", "/api/queues/%2F")}


def test_persistent_session_keeps_subscriptions_and_qos1_messages(mqtt_broker):
    cid, topic = unique("persist"), unique("ps") + "/t"
    c = Client(mqtt_broker, cid, clean=False)
    assert not c.session_present
    assert c.subscribe(topic, 1) == [1]
    c.disconnect()
    q = queues(mqtt_broker)[f"mqtt.{cid}"]
    assert (q["durable"], q["auto_delete"], q["consumers"], q["type"]) == (True, False, 0, "mqtt")
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(topic, b"kept", qos=1)
    pub.publish(topic, b"not kept: QoS 0 while away", qos=0)
    pub.publish(topic, b"kept too", qos=2)
    pub.disconnect()
    c = Client(mqtt_broker, cid, clean=False)
    assert c.session_present
    assert [(m.payload, m.qos) for m in c.take(2)] == [(b"kept", 1), (b"kept too", 1)]
    c.nothing()
    c.disconnect()
    c = Client(mqtt_broker, cid, clean=True)       # a clean session ends the persistent one
    assert not c.session_present
    c.disconnect()
    wait_for(lambda: f"mqtt.{cid}" not in queues(mqtt_broker), what="session queue deleted")


def test_clean_session_is_gone_after_disconnect(mqtt_broker):
    cid, topic = unique("clean"), unique("cs") + "/t"
    c = Client(mqtt_broker, cid, clean=True)
    assert c.subscribe(topic, 1) == [1]
    q = queues(mqtt_broker)[f"mqtt.{cid}"]
    assert (q["durable"], q["auto_delete"], q["consumers"]) == (False, True, 1)
    c.disconnect()
    wait_for(lambda: f"mqtt.{cid}" not in queues(mqtt_broker), what="clean session deleted")
    c = Client(mqtt_broker, cid, clean=False)
    assert not c.session_present
    c.disconnect()


def test_unacked_qos1_is_redelivered_with_dup_on_reconnect(mqtt_broker):
    cid, topic = unique("redeliver"), unique("rd") + "/t"
    raw = Raw(mqtt_broker)
    assert raw.login(client_id=cid, clean=False) == b"\x00\x00"
    raw.send(subscribe_packet(1, (topic, 1)))
    assert raw.read_packet() == (0x90, b"\x00\x01\x01")
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(topic, b"unacked", qos=1)
    first, body = raw.read_packet()
    assert first == 0x32                    # QoS 1, DUP clear
    raw.close()                             # gone without PUBACK
    time.sleep(0.2)
    raw = Raw(mqtt_broker)
    assert raw.login(client_id=cid, clean=False) == b"\x01\x00"        # session present
    first, body = raw.read_packet()
    assert first == 0x3a and body.endswith(b"unacked")                   # QoS 1, DUP set
    raw.send(packet(0x40, body[2 + len(topic):4 + len(topic)]))
    raw.send(b"\xe0\x00")
    assert raw.closed()
    pub.disconnect()
    Client(mqtt_broker, cid, clean=True).disconnect()


def test_takeover_closes_the_old_connection_and_keeps_the_session(mqtt_broker):
    cid, topic = unique("take"), unique("tk") + "/t"
    will_topic = unique("will")
    watcher = Client(mqtt_broker, unique("watch"))
    assert watcher.subscribe(will_topic, 1) == [1]
    first = Client(mqtt_broker, cid, clean=False, will=(will_topic, b"first is gone", 1))
    assert first.subscribe(topic, 1) == [1]
    second = Client(mqtt_broker, cid, clean=False)
    assert second.session_present
    first.disconnected.get(timeout=5)           # the broker closed it
    assert watcher.get().payload == b"first is gone"
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(topic, b"to the new one", qos=1)
    assert second.get().payload == b"to the new one"
    first.nothing(0.2)
    for c in (second, pub, watcher):
        c.disconnect()
    first.c.loop_stop()
    Client(mqtt_broker, cid, clean=True).disconnect()


def test_will_on_abrupt_disconnect_only(mqtt_broker):
    will_topic = unique("will")
    watcher = Client(mqtt_broker, unique("watch"))
    assert watcher.subscribe(will_topic + "/#", 1) == [1]
    polite = Client(mqtt_broker, unique("polite"), will=(will_topic + "/polite", b"never", 1))
    polite.disconnect()
    rude = Client(mqtt_broker, unique("rude"), will=(will_topic + "/rude", b"rude left", 1, True))
    rude.drop()
    m = watcher.get()
    assert (m.topic, m.payload, m.qos, m.retain) == (will_topic + "/rude", b"rude left", 1, False)
    watcher.nothing()
    # the will was retained (its retain flag): a new subscriber gets it with retain set
    late = Client(mqtt_broker, unique("late"))
    assert late.subscribe(will_topic + "/#", 1) == [1]
    m = late.get()
    assert (m.topic, m.payload, m.retain) == (will_topic + "/rude", b"rude left", True)
    Client(mqtt_broker, unique("clear")).publish(will_topic + "/rude", b"", qos=1, retain=True)
    late.disconnect()
    watcher.disconnect()


def test_keepalive_closes_a_silent_client_and_publishes_its_will(mqtt_broker):
    will_topic = unique("ka")
    watcher = Client(mqtt_broker, unique("watch"))
    assert watcher.subscribe(will_topic, 0) == [0]
    raw = Raw(mqtt_broker)
    started = time.monotonic()
    assert raw.login(client_id=unique("silent"), keepalive=1,
                     will=(will_topic, b"timed out", 0, False)) == b"\x00\x00"
    assert raw.closed(timeout=6)
    took = time.monotonic() - started
    assert 1.4 < took < 4.0, took               # 1.5 keepalive periods, checked every second
    assert watcher.get().payload == b"timed out"
    # a client that pings stays
    raw = Raw(mqtt_broker)
    assert raw.login(client_id=unique("pinger"), keepalive=1) == b"\x00\x00"
    for _ in range(4):
        time.sleep(0.5)
        raw.send(b"\xc0\x00")
        assert raw.read_packet() == (0xd0, b"")
    raw.send(b"\xe0\x00")
    assert raw.closed()
    watcher.disconnect()


def test_qos2_from_the_client_is_routed_once(mqtt_broker):
    topic = unique("q2in")
    sub = Client(mqtt_broker, unique("sub"))
    assert sub.subscribe(topic, 2) == [2]
    raw = Raw(mqtt_broker)
    assert raw.login(client_id=unique("raw")) == b"\x00\x00"
    raw.send(publish_packet(topic, b"exactly once", qos=2, pid=5))
    assert raw.read_packet() == (0x50, b"\x00\x05")                 # PUBREC
    raw.send(publish_packet(topic, b"exactly once", qos=2, pid=5, dup=True))
    assert raw.read_packet() == (0x50, b"\x00\x05")                 # PUBREC again, not routed again
    raw.send(packet(0x62, b"\x00\x05"))                            # PUBREL
    assert raw.read_packet() == (0x70, b"\x00\x05")                 # PUBCOMP
    raw.send(publish_packet(topic, b"a new one", qos=2, pid=5))    # the id is free again
    assert raw.read_packet() == (0x50, b"\x00\x05")
    m = sub.get()
    assert (m.payload, m.qos) == (b"exactly once", 2)
    assert sub.get().payload == b"a new one"
    sub.nothing()
    raw.send(packet(0x62, b"\x00\x05"))
    assert raw.read_packet() == (0x70, b"\x00\x05")
    raw.close()
    sub.disconnect()


def test_qos2_to_the_client_with_pubrec_pubrel_pubcomp(mqtt_broker):
    cid, topic = unique("q2out"), unique("q2out")
    raw = Raw(mqtt_broker)
    assert raw.login(client_id=cid, clean=False) == b"\x00\x00"
    raw.send(subscribe_packet(1, (topic, 2)))
    assert raw.read_packet() == (0x90, b"\x00\x01\x02")
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(topic, b"two", qos=2)
    first, body = raw.read_packet()
    assert first == 0x34
    pid = body[2 + len(topic):4 + len(topic)]
    raw.send(packet(0x50, pid))                                    # PUBREC: the broker lets go
    assert raw.read_packet() == (0x62, pid)                        # PUBREL
    raw.close()                                                    # ... but PUBCOMP never came
    time.sleep(0.2)
    raw = Raw(mqtt_broker)
    assert raw.login(client_id=cid, clean=False) == b"\x01\x00"
    assert raw.read_packet() == (0x62, pid)                        # PUBREL again, not the message
    raw.send(packet(0x70, pid))                                    # PUBCOMP
    pub.publish(topic, b"next", qos=2)
    first, body = raw.read_packet()
    assert first == 0x34 and body.endswith(b"next")
    raw.close()
    pub.disconnect()
    Client(mqtt_broker, cid, clean=True).disconnect()
    assert int(queues(mqtt_broker).get(f"mqtt.{cid}", {"messages": 0})["messages"]) == 0


def test_paho_qos2_end_to_end(mqtt_broker):
    topic = unique("q2")
    sub = Client(mqtt_broker, unique("sub"))
    assert sub.subscribe(topic, 2) == [2]
    pub = Client(mqtt_broker, unique("pub"))
    for i in range(200):
        pub.publish(topic, b"%d" % i, qos=2, wait=False)
    got = sub.take(200)
    assert [m.payload for m in got] == [b"%d" % i for i in range(200)] and {m.qos for m in got} == {2}
    sub.nothing()
    pub.disconnect()
    sub.disconnect()


def test_client_ids(fresh_mqtt_broker, tmp_path):
    b = fresh_mqtt_broker
    raw = Raw(b)
    assert raw.login(client_id="", clean=False) == b"\x00\x02"     # an empty id needs a clean session
    assert raw.closed()
    c = Client(b, "", clean=True)
    assert c.rc == 0
    topic = unique("anon")
    assert c.subscribe(topic, 1) == [1]
    sessions = [n for n in queues(b) if n.startswith("mqtt.")]
    assert len(sessions) == 1 and len(sessions[0]) > 20          # an id was assigned
    c.disconnect()
    raw = Raw(b)
    assert raw.login(client_id="x" * 251) == b"\x00\x02"          # mqtt.<id> must be a queue name
    assert raw.closed()


def test_client_id_validation_and_permission_checks(tmp_path):
    from tests.conftest import BrokerProcess
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[mqtt]\nclient_id_validation = username\npermission_check_enabled = true\n")
    b = BrokerProcess(tmp_path / "data", mqtt=True, extra_args=["-c", str(ini)]).start()
    try:
        api(b, "PUT", "/api/users/reader", {"password": "pw", "tags": ""})
        # may read amq.topic and write its session queue, may not write amq.topic
        api(b, "PUT", "/api/permissions/%2F/reader", {"configure": "^mqtt\\.", "write": "^mqtt\\.reader$",
                                                       "read": "^amq\\.topic$"})
        raw = Raw(b)
        assert raw.login(client_id="someone-else", user="reader", password="pw") == b"\x00\x02"
        assert raw.closed()
        reader = Client(b, "reader", user="reader", password="pw")
        assert reader.subscribe("news/#", 1) == [1]
        guest = Client(b, "guest")
        guest.publish("news/today", b"read all about it", qos=1)
        assert reader.get().payload == b"read all about it"
        raw = Raw(b)
        assert raw.login(client_id="reader", user="reader", password="pw") == b"\x00\x00"   # takes over
        raw.send(publish_packet("news/x", b"no write permission", qos=1, pid=1))
        assert raw.closed()
        assert "no write permission on amq.topic" in b.log_text()
        api(b, "PUT", "/api/permissions/%2F/reader", {"configure": "", "write": "", "read": ""})
        c = Client(b, "reader", user="reader", password="pw")
        assert c.subscribe("news/#", 1) == [0x80]
        c.disconnect()
        guest.disconnect()
    finally:
        assert b.stop() == 0
    b.check_clean()

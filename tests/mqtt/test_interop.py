"""MQTT and AMQP clients exchange messages through amq.topic, as with
RabbitMQ's MQTT plugin: topic `a/b` is routing key `a.b` (and `.` is `/`),
`+` is `*`, `#` is `#`. And Debian's mosquitto clients against the broker."""
import shutil
import subprocess
import time

import pika
import pytest

from tests.conftest import unique
from tests.mqtt.conftest import Client


@pytest.fixture
def channel(mqtt_broker):
    conn = pika.BlockingConnection(pika.URLParameters(mqtt_broker.url))
    yield conn.channel()
    conn.close()


def get(ch, queue, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return method, props, body
        time.sleep(0.02)
    raise AssertionError(f"nothing in {queue}")


def test_mqtt_to_amqp(mqtt_broker, channel):
    base = unique("iot")
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q, "amq.topic", f"{base}.*.temp")
    pub = Client(mqtt_broker, unique("dev"))
    pub.publish(f"{base}/kitchen/temp", b"21.5", qos=1)
    pub.publish(f"{base}/kitchen/humidity", b"40", qos=1)
    pub.publish(f"{base}/hall/temp", b"19", qos=0)
    pub.publish(f"{base}/v1.2/temp", b"dots", qos=1)        # '.' in a level: '/' in the routing key
    method, props, body = get(channel, q)
    assert (method.exchange, method.routing_key, body) == ("amq.topic", f"{base}.kitchen.temp", b"21.5")
    assert props.headers == {"x-mqtt-publish-qos": 1} and props.delivery_mode == 2
    method, props, body = get(channel, q)
    assert (method.routing_key, body, props.delivery_mode) == (f"{base}.hall.temp", b"19", 1)
    assert props.headers == {"x-mqtt-publish-qos": 0}
    method, props, body = get(channel, q)
    assert (method.routing_key, body) == (f"{base}.v1/2.temp", b"dots")
    assert channel.basic_get(q, auto_ack=True)[0] is None
    pub.disconnect()


def test_amqp_to_mqtt(mqtt_broker, channel):
    base = unique("cmd")
    s1 = Client(mqtt_broker, unique("s1"))
    s0 = Client(mqtt_broker, unique("s0"))
    assert s1.subscribe(f"{base}/+", 1) == [1]
    assert s0.subscribe(f"{base}/#", 0) == [0]
    channel.basic_publish("amq.topic", f"{base}.open", b"door")
    channel.basic_publish("amq.topic", f"{base}.v1/2", b"dotted")
    channel.basic_publish("amq.topic", f"{base}.q0", b"asked for 0",
                          pika.BasicProperties(headers={"x-mqtt-publish-qos": 0}))
    # an AMQP message is QoS 1 unless it says otherwise (RabbitMQ's rule)
    assert [(m.topic, m.payload, m.qos) for m in s1.take(3)] == [
        (f"{base}/open", b"door", 1), (f"{base}/v1.2", b"dotted", 1), (f"{base}/q0", b"asked for 0", 0)]
    assert [(m.topic, m.qos) for m in s0.take(3)] == [(f"{base}/open", 0), (f"{base}/v1.2", 0), (f"{base}/q0", 0)]
    channel.basic_publish("amq.topic", "", b"no topic")      # an empty routing key has no MQTT topic
    s0.nothing()
    s1.disconnect()
    s0.disconnect()


def test_request_reply_between_protocols(mqtt_broker, channel):
    """An AMQP service answers MQTT devices: consume from amq.topic,
    publish the reply back to the device's topic."""
    base = unique("rpc")
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q, "amq.topic", f"{base}.request.#")
    device = Client(mqtt_broker, unique("device"))
    assert device.subscribe(f"{base}/reply/+", 1) == [1]
    device.publish(f"{base}/request/dev1", b"2+2", qos=1)
    method, _, body = get(channel, q)
    device_id = method.routing_key.rsplit(".", 1)[1]
    channel.basic_publish("amq.topic", f"{base}.reply.{device_id}", str(eval(body)).encode())
    m = device.get()
    assert (m.topic, m.payload) == (f"{base}/reply/dev1", b"4")
    device.disconnect()


needs_mosquitto = pytest.mark.skipif(not shutil.which("mosquitto_pub"),
                                     reason="mosquitto-clients is not installed (./dev test installs it)")


@needs_mosquitto
def test_mosquitto_clients(mqtt_broker):
    base = unique("mosq")
    common = ["-h", "127.0.0.1", "-p", str(mqtt_broker.mqtt_port), "-u", "guest", "-P", "guest", "-V", "mqttv311"]
    subprocess.run(["mosquitto_pub", *common, "-t", f"{base}/retained", "-m", "kept", "-q", "1", "-r"],
                   check=True, timeout=10)
    sub = subprocess.Popen(["mosquitto_sub", *common, "-t", f"{base}/#", "-q", "2", "-C", "4", "-v",
                            "-i", unique("msub")], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    for qos in (0, 1, 2):
        subprocess.run(["mosquitto_pub", *common, "-t", f"{base}/q{qos}", "-m", f"qos {qos}", "-q", str(qos)],
                       check=True, timeout=10)
    out, _ = sub.communicate(timeout=10)
    assert out.splitlines() == [f"{base}/retained kept", f"{base}/q0 qos 0", f"{base}/q1 qos 1",
                                f"{base}/q2 qos 2"]
    bad = subprocess.run(["mosquitto_pub", *common[:-2], "-P", "wrong", "-t", "x", "-m", "x"],
                         capture_output=True, text=True, timeout=10)
    assert bad.returncode != 0
    subprocess.run(["mosquitto_pub", *common, "-t", f"{base}/retained", "-n", "-r"], check=True, timeout=10)


def test_a_persistent_exchange_bound_to_amq_topic_keeps_mqtt_publishes(mqtt_broker, channel):
    """MQTT publishes take the same route as AMQP ones: a persistent exchange
    (x-persist-messages) bound to amq.topic keeps them, stamped with x-offset."""
    from tests.mqtt.test_basic import api
    base, keeper = unique("keep"), unique("keeper")
    channel.exchange_declare(keeper, "topic", durable=False, arguments={"x-persist-messages": 100})
    channel.exchange_bind(keeper, "amq.topic", f"{base}.#")
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q, keeper, "#")
    pub = Client(mqtt_broker, unique("dev"))
    for i in range(3):
        pub.publish(f"{base}/m", b"kept %d" % i, qos=1)
    pub.disconnect()
    assert api(mqtt_broker, "GET", f"/api/exchanges/%2F/{keeper}")["persist"]["messages"] == 3
    method, props, body = get(channel, q)
    assert body == b"kept 0" and props.headers["x-mqtt-publish-qos"] == 1 and "x-offset" in props.headers

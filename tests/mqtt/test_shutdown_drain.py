"""MQTT through a clean stop's grace period (lavinmq/drain.py): the MQTT
port refuses new connections, a CONNECT that comes now is refused (server
unavailable), a connected client's QoS 1 publishes are
still answered with PUBACK (and kept), and it is disconnected once the
grace period ends."""
import signal
import socket
import time

import pika

from tests.conftest import BrokerProcess, unique
from tests.mqtt.conftest import Client, Raw, connect_packet, wait_for


def test_mqtt_during_the_drain(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\nshutdown_drain_timeout = 30\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)], mqtt=True).start()
    try:
        kept, held = unique("kept"), unique("held")
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.queue_declare(kept, durable=True)
        ch.queue_bind(kept, "amq.topic", "drain.t")
        ch.queue_declare(held, durable=True)
        ch.basic_publish("", held, b"x", pika.BasicProperties(delivery_mode=2))
        deliveries = []
        ch.basic_consume(held, lambda c, m, p, body: deliveries.append(m.delivery_tag))   # held: the drain lasts
        while not deliveries:
            conn.process_data_events(0.05)
        pub = Client(b, unique("pub"))
        late = Raw(b)           # connected, not yet logged in
        b.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: _refused(b.mqtt_port), what="the MQTT port closed")
        late.send(connect_packet(unique("late")))
        assert late.read_packet() == (0x20, bytes((0, 3)))     # CONNACK: server unavailable
        assert late.closed()
        info = pub.publish("drain/t", b"during", qos=1, wait=False)
        info.wait_for_publish(5)
        assert info.is_published(), "no PUBACK during the grace period"
        assert pub.disconnected.empty()
        ch.basic_ack(deliveries[0])          # nothing is held now: the drain ends
        assert pub.disconnected.get(timeout=10) is not None
        pub.c.loop_stop()
        try:
            while True:
                conn.process_data_events(0.05)
        except pika.exceptions.AMQPConnectionError:
            pass
        assert b.proc.wait(15) == 0
        b.start()
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        assert ch.queue_declare(kept, passive=True).method.message_count == 1
        assert ch.queue_declare(held, passive=True).method.message_count == 0
        conn.close()
    finally:
        if b.proc.poll() is None:
            b.stop()
        b.check_clean()


def _refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    time.sleep(0.02)
    return False

"""Issue 41 row 10: a resource alarm held AMQP publishers back (their
socket is not read), but not MQTT's -- a client that connected during the
alarm was never blocked -- nor the HTTP API's publish. Now an MQTT client
is not read once it published while the alarm is on, whenever it came, and
the HTTP publish answers 503 until the alarm clears. (RabbitMQ lets the
API's publishes through an alarm, LavinMQ too: the README's security
section says why not here.)"""
import signal
import time

import pika

from tests.mqtt.conftest import Raw, publish_packet
from tests.security.conftest import call, start_broker

ALARM = "[main]\nfree_disk_min = 1000000000000000\n"      # 1 PB: the disk alarm is on
NO_ALARM = "[main]\nfree_disk_min = 0\n"


def _queue_on_amq_topic(b, name):
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare(name)
    ch.queue_bind(name, "amq.topic", "alarm.#")
    conn.close()


def _depth(b, name):
    return call(b, "GET", f"/api/queues/%2F/{name}")[1]["messages"]


def _publish_mqtt(b, n):
    raw = Raw(b)
    raw.login(client_id="alarmed", user="guest", password="guest")
    for i in range(20):
        try:
            raw.send(b"".join(publish_packet("alarm/t", b"x" * 1000) for _ in range(n // 20)))
        except OSError:
            break
        time.sleep(0.01)
    return raw


def _wait_depth(b, name, n, timeout=10):
    deadline = time.monotonic() + timeout
    while _depth(b, name) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    return _depth(b, name)


def test_mqtt_and_http_publishers_are_held_during_an_alarm(tmp_path):
    (tmp_path / "lavinmq.ini").write_text(ALARM)
    b = start_broker(tmp_path, ALARM, mqtt=True)
    try:
        _queue_on_amq_topic(b, "held")
        deadline = time.monotonic() + 10
        while "disk alarm" not in b.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        # connected during the alarm: its first batch may land, then it is not read
        raw = _publish_mqtt(b, 2000)
        time.sleep(1.0)
        held = _depth(b, "held")
        assert held < 2000, f"{held} MQTT publishes went through during the alarm"
        status, body = call(b, "POST", "/api/exchanges/%2F/amq.topic/publish",
                            {"routing_key": "alarm.http", "payload": "x", "payload_encoding": "string",
                             "properties": {}})
        assert status == 503 and "alarm" in body["reason"], (status, body)
        assert _depth(b, "held") == held
        # the alarm clears (the limit lowered, applied on SIGHUP): both go on
        (tmp_path / "lavinmq.ini").write_text(NO_ALARM)
        b.proc.send_signal(signal.SIGHUP)
        assert _wait_depth(b, "held", 2000) == 2000
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status, body = call(b, "POST", "/api/exchanges/%2F/amq.topic/publish",
                                {"routing_key": "alarm.http", "payload": "x", "payload_encoding": "string",
                                 "properties": {}})
            if status != 503:
                break
            time.sleep(0.2)
        assert (status, body) == (200, {"routed": True})
        raw.close()
    finally:
        b.stop()
    b.check_clean()

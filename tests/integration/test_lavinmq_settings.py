"""LavinMQ settings that change what clients see: set_timestamp,
default_consumer_prefetch, log_exchange."""
import time

import pika
import pytest

from tests.conftest import BrokerProcess, unique


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("settings")
    ini = tmp / "lavinmq.ini"
    ini.write_text("[main]\nset_timestamp = true\ndefault_consumer_prefetch = 2\nlog_exchange = true\n")
    b = BrokerProcess(tmp / "data", extra_args=["-c", str(ini)]).start()
    yield b
    b.stop()
    b.check_clean()


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def test_set_timestamp_fills_in_only_missing_timestamps(tuned):
    c = connect(tuned)
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    before = int(time.time())
    ch.basic_publish("", q, b"none", pika.BasicProperties(content_type="text/plain", reply_to="r"))
    ch.basic_publish("", q, b"own", pika.BasicProperties(timestamp=12345))
    _, p1, b1 = ch.basic_get(q, auto_ack=True)
    _, p2, b2 = ch.basic_get(q, auto_ack=True)
    assert b1 == b"none" and before <= p1.timestamp <= int(time.time()) + 1
    assert p1.content_type == "text/plain" and p1.reply_to == "r"
    assert b2 == b"own" and p2.timestamp == 12345
    c.close()


def test_default_consumer_prefetch_without_qos(tuned):
    c = connect(tuned)
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    got = []
    ch.basic_consume(q, lambda _c, m, p, b: got.append(m))
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        c.process_data_events(time_limit=0.05)
    assert len(got) == 2        # no basic.qos: the default prefetch applies
    ch.basic_ack(got[-1].delivery_tag, multiple=True)
    deadline = time.monotonic() + 1
    while len(got) < 4 and time.monotonic() < deadline:
        c.process_data_events(time_limit=0.05)
    assert len(got) == 4
    c.close()


def test_log_lines_on_the_log_exchange(tuned):
    c = connect(tuned)
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.lavinmq.log", "#")
    # something that logs: a failed login
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.URLParameters(tuned.url.replace("guest:guest", "guest:wrong")))
    deadline = time.monotonic() + 3
    lines = []
    while time.monotonic() < deadline and not any(b"login refused" in b for _, _, b in lines):
        m, p, body = ch.basic_get(q, auto_ack=True)
        if m is None:
            time.sleep(0.05)
            continue
        lines.append((m, p, body))
    hits = [(m, p, b) for m, p, b in lines if b"login refused" in b]
    assert hits, lines
    m, p, body = hits[0]
    assert m.routing_key == "warn" and p.content_type == "text/plain"
    assert body.startswith(b"lavinmq.connection - ")
    # it is internal: clients cannot publish to it
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.basic_publish("amq.lavinmq.log", "info", b"fake")
        ch.queue_declare(unique("x"), exclusive=True)
    assert e.value.reply_code == 403
    c.close()


def test_pidfile_load_definitions_and_consumer_limit(tmp_path):
    defs = tmp_path / "defs.json"
    defs.write_text('{"queues": [{"name": "preloaded", "vhost": "/", "durable": true, "arguments": {}}],'
                    ' "policies": [{"name": "cap", "vhost": "/", "pattern": "^preloaded$",'
                    ' "definition": {"max-length": 1}}]}')
    pidfile = tmp_path / "lavinmq.pid"
    ini = tmp_path / "lavinmq.ini"
    ini.write_text(f"[main]\npidfile = {pidfile}\nload_definitions = {defs}\n"
                   "[amqp]\nmax_consumers_per_channel = 2\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        deadline = time.monotonic() + 5
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert int(pidfile.read_text()) == b.proc.pid
        c = connect(b)
        ch = c.channel()
        for i in range(3):
            ch.basic_publish("", "preloaded", b"%d" % i)
        assert ch.queue_declare("preloaded", passive=True).method.message_count == 1    # its policy too
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_consume(q, lambda *a: None)
        ch.basic_consume(q, lambda *a: None)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            ch.basic_consume(q, lambda *a: None)
        # LavinMQ closes the channel, not the connection
        assert e.value.reply_code == 506 and "Max 2 consumers per channel" in e.value.reply_text
        assert c.is_open
        c.channel().basic_consume(q, lambda *a: None)
    finally:
        assert b.stop() == 0
    assert not pidfile.exists()


def test_bad_load_definitions_stops_the_start(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text(f"[main]\nload_definitions = {tmp_path / 'missing.json'}\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)])
    with pytest.raises(RuntimeError, match="load_definitions"):
        b.start()
    assert b.proc.returncode == 2
    assert "Traceback" not in b.log_text()


def test_lavinmq_experimental_section_starts_with_a_warning(tmp_path):
    """An ini file with LavinMQ's [experimental] keys used to stop the start."""
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[experimental]\nyield_each_received_bytes = 131072\nyield_each_delivered_bytes = 1048576\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        c = connect(b)
        c.channel().queue_declare("", exclusive=True)
        c.close()
    finally:
        assert b.stop() == 0
    log = b.log_text()
    assert "[experimental] yield_each_received_bytes has no effect here, ignored" in log
    assert "[experimental] yield_each_delivered_bytes has no effect here, ignored" in log

"""lavinmqperf mqtt throughput: LavinMQ's flags, against the real broker,
with the counts checked (every message published is consumed, bodies as
sent)."""
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, unique


def perf(*args, timeout=60):
    r = subprocess.run([sys.executable, "-m", "lavinmq.perf", "mqtt", "throughput", *args],
                       capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, r.stderr + r.stdout
    return r.stdout


@pytest.mark.parametrize("extra", [
    ["--qos", "0"],
    ["--qos", "1", "--inflight", "200"],
    ["--qos", "1"],                                  # one at a time, as LavinMQ's tool
    ["--qos", "2", "--inflight", "50"],
    ["--qos", "1", "--inflight", "100", "-x", "3", "-y", "2", "--processes", "2"],
])
def test_counts(mqtt_broker, extra):
    n = 2000
    out = perf("-u", f"mqtt://guest:guest@127.0.0.1:{mqtt_broker.mqtt_port}", "-C", str(n), "-V", "-j", "-q",
               "--clean-session", "-t", unique("perf"), "--client-id-prefix", unique("p") + "-", *extra)
    result = json.loads(out.strip().splitlines()[-1])
    subscribers = int(extra[extra.index("-y") + 1]) if "-y" in extra else 1
    assert result["total_published"] == n
    if extra[1] != "0":
        assert result["total_consumed"] == n * subscribers
    assert result["bad_bodies"] == 0


def test_over_websocket(mqtt_broker):
    out = perf("-u", f"ws://guest:guest@127.0.0.1:{mqtt_broker.http_port}/mqtt", "-C", "30000", "--qos", "1",
               "--inflight", "100", "--clean-session", "-t", unique("wsperf"), "--client-id-prefix",
               unique("w") + "-", "-V")
    lines = out.splitlines()
    consumed = int([line for line in lines if line.startswith("Total consumed:")][0].split()[-1])
    published = int([line for line in lines if line.startswith("Total published:")][0].split()[-1])
    assert published == consumed == 30000
    assert "Bodies that differ: 0" in lines


def test_rate_lines(mqtt_broker):
    out = perf("-u", f"mqtt://guest:guest@127.0.0.1:{mqtt_broker.mqtt_port}", "-z", "2.5", "--clean-session",
               "-t", unique("lines"), "--client-id-prefix", unique("l") + "-")
    rates = [line for line in out.splitlines() if line.startswith("Publish rate:")]
    assert len(rates) >= 2 and all(line.endswith("msgs/s") and "Consume rate:" in line for line in rates)
    assert "Average consume rate:" in out


def test_retain_and_persistent_sessions(mqtt_broker):
    """--retain leaves the last message retained; without --clean-session the
    subscriber's session (and the publisher's) stays, as with LavinMQ's tool."""
    from tests.mqtt.conftest import Client
    from tests.mqtt.test_sessions import queues
    topic, prefix = unique("ret"), unique("keep") + "-"
    perf("-u", f"mqtt://guest:guest@127.0.0.1:{mqtt_broker.mqtt_port}", "-C", "100", "--retain", "--qos", "1",
         "-t", topic, "-j", "-q", "--client-id-prefix", prefix)
    late = Client(mqtt_broker, unique("late"))
    assert late.subscribe(topic, 1) == [1]
    m = late.get()
    assert m.retain and len(m.payload) == 16
    late.disconnect()
    assert queues(mqtt_broker)[f"mqtt.{prefix}consumer-0"]["durable"] is True
    for cid in (f"{prefix}consumer-0", f"{prefix}publisher-0"):
        Client(mqtt_broker, cid, clean=True).disconnect()
    Client(mqtt_broker, unique("c")).publish(topic, b"", qos=1, retain=True)


def test_amqp_is_still_the_default(mqtt_broker):
    r = subprocess.run([sys.executable, "-m", "lavinmq.perf", "amqp", "throughput", "--uri", mqtt_broker.url,
                        "-z", "1", "-j", "-q"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["avg_consume_rate"] > 0

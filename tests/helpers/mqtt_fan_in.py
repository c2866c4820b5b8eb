"""MQTT fan-in load for a test and a benchmark (tests/mqtt/test_flow_fan_in.py,
benchmarks/mqtt_fan_in.py): lavinmqperf's MQTT throughput mode in a process
of its own, and the session queue's counters read from the HTTP API."""
import os
import subprocess
import sys

from tests.parity.helpers import api

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def perf(broker, *args):
    """`lavinmqperf mqtt throughput` against the broker's MQTT port."""
    return subprocess.Popen([sys.executable, "-m", "lavinmq.perf", "mqtt", "throughput",
                             "-u", f"mqtt://guest:guest@127.0.0.1:{broker.mqtt_port}", "-j", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def session_stats(broker, prefix):
    """(taken in, delivered, ready) of the session queue of the client
    whose id starts with prefix."""
    q = next(q for q in api(broker, "GET", "/api/queues")[1] if q["name"].startswith("mqtt." + prefix))
    st = q.get("message_stats") or {}
    return st.get("publish", 0), st.get("deliver_get", 0), q.get("messages", 0)

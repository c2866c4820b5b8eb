"""A few seconds of lavinmqperf against the session broker: the load
generator works and messages flow end to end (the full benchmarks live in
benchmarks/)."""
import json
import subprocess
import sys

from tests.conftest import unique


def perf(url, *args):
    out = subprocess.run([sys.executable, "-m", "lavinmq.perf", "throughput", "--uri", url, "-j", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_throughput_smoke(broker):
    r = perf(broker.url, "-C", "20000", "-u", unique(), "-z", "20")
    assert r["published"] == 20000
    assert r["consumed"] == 20000


def test_throughput_with_confirms_and_acks(broker):
    r = perf(broker.url, "-z", "2", "-c", "100", "-a", "10", "-P", "100", "-u", unique(), "-l")
    assert r["avg_pub_rate"] > 0 and r["avg_consume_rate"] > 0
    assert r["latency_p50_ms"] is not None and 0 <= r["latency_p50_ms"] < 5000


def test_throughput_in_two_processes_verified(broker):
    r = perf(broker.url, "-z", "2", "--processes", "2", "-V", "-u", unique())
    assert r["processes"] == 2
    assert r["invalid_bodies"] == 0
    assert r["published"] > 0 and r["consumed"] > 0


def test_churn_and_count_scenarios(broker):
    for scenario in ("connection-churn", "channel-churn", "queue-churn", "bind-churn", "consumer-churn"):
        out = subprocess.run([sys.executable, "-m", "lavinmq.perf", scenario, "--uri", broker.url, "-z", "0.5",
                              "-q"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("Average "), out.stdout
    out = subprocess.run([sys.executable, "-m", "lavinmq.perf", "queue-count", "--uri", broker.url, "-c", "200",
                          "--report-every", "100", "--delete"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "200 queues in" in out.stdout and "broker RSS" in out.stdout and "?" not in out.stdout

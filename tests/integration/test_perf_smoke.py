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


def queue_counts(url, names):
    import pika
    c = pika.BlockingConnection(pika.URLParameters(url))
    ch = c.channel()
    counts = [ch.queue_declare(n, passive=True).method.message_count for n in names]
    for n in names:
        ch.queue_delete(n)
    c.close()
    return counts


def test_routing_keys_spread_over_queues_through_a_direct_exchange(broker):
    q, x = unique(), unique("x")
    r = perf(broker.url, "-y", "0", "-C", "3000", "-u", q, "-e", x, "--exchange-type", "direct", "--queues", "3")
    assert r["published"] == 3000
    # the routing key goes round the queue names, each queue bound by its name
    assert queue_counts(broker.url, [f"{q}-{i}" for i in (1, 2, 3)]) == [1000, 1000, 1000]


def test_consumers_cover_every_queue(broker):
    q, x = unique(), unique("x")
    r = perf(broker.url, "-x", "1", "-y", "2", "-C", "4000", "-u", q, "-e", x, "--exchange-type", "direct",
             "--queues", "5", "-z", "20")
    assert r["published"] == 4000 and r["consumed"] == 4000
    assert queue_counts(broker.url, [f"{q}-{i}" for i in range(1, 6)]) == [0] * 5


def test_topic_bindings_and_routing_key_pattern(broker):
    q, x = unique(), unique("x")
    r = perf(broker.url, "-y", "0", "-C", "1000", "-u", q, "-e", x, "--exchange-type", "topic",
             "--bindings", '[{"key": "dev.{i}.#", "count": 5}]', "--routing-keys", "dev.{i}.temp:10")
    assert r["published"] == 1000
    assert queue_counts(broker.url, [q]) == [500]       # keys dev.0 .. dev.4 of the ten


def test_headers_from_properties(broker):
    q, x = unique(), unique("x")
    r = perf(broker.url, "-y", "0", "-C", "400", "-u", q, "-e", x, "--exchange-type", "headers",
             "--bindings", '[{"args": {"x-match": "all", "dev": "{i}"}, "count": 2}]',
             "--routing-keys", "4", "--properties", '{"headers": {"dev": "{i}"}, "message_id": "m{i}"}')
    assert r["published"] == 400
    assert queue_counts(broker.url, [q]) == [200]


def test_bad_topology_options_are_refused(broker):
    for args in (["--routing-keys", "x:y"], ["--bindings", "[nope"], ["--queue-pattern", "q-"],
                 ["--routing-keys", "5", "-l"]):
        out = subprocess.run([sys.executable, "-m", "lavinmq.perf", "throughput", "--uri", broker.url, "-e", "x",
                              *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        assert "error" in out.stderr

"""Routing with many distinct routing keys and header sets (no route cache:
each message is matched against the exchange's tables). Each case routes
N messages cycling over 10,000 keys; per_message_ns is the cost of one
route, traversal and de-duplication included.
Direct with 10k keys, topic with 1,000 bindings and headers with 100
bindings are the gate's cases: bench_gate.py."""
import pytest

from lavinmq._core import codec
from lavinmq._core.routing import bench_route_many
from lavinmq.vhost import VHost

KEYS = 10_000


@pytest.fixture
def vhost(tmp_path):
    v = VHost("/", str(tmp_path))
    yield v
    v.close()


def test_route_default_exchange_1000_queues(per_message, vhost):
    for i in range(1000):
        vhost.declare_queue(f"q{i}", False, None, False, {})
    keys = [f"q{i}".encode() for i in range(1000)]
    ex = vhost.exchanges[""]
    assert bench_route_many(ex, keys, 1000) == 1000
    per_message(lambda n: bench_route_many(ex, keys, n))


def test_route_topic_1000_queues_10k_keys(per_message, vhost):
    """1,000 queues each bound with `dev.<n>.*` and `*.<n>.#`: two trie
    branches live per word, and a message lands in up to two queues."""
    vhost.declare_exchange("t", "topic", False, False, False, {})
    for i in range(1000):
        vhost.declare_queue(f"q{i}", False, None, False, {})
        vhost.bind_queue(f"q{i}", "t", f"dev.{i}.*", {})
        vhost.bind_queue(f"q{i}", "t", f"*.{i}.#", {})
    keys = [f"dev.{i}.temp".encode() for i in range(KEYS)]
    ex = vhost.exchanges["t"]
    assert bench_route_many(ex, keys, KEYS) == 1000
    per_message(lambda n: bench_route_many(ex, keys, n))


def test_route_consistent_hash_4_queues_10k_keys(per_message, vhost):
    vhost.declare_exchange("c", "x-consistent-hash", False, False, False, {})
    for i in range(4):
        vhost.declare_queue(f"q{i}", False, None, False, {})
        vhost.bind_queue(f"q{i}", "c", "10", {})
    keys = [f"order-{i}".encode() for i in range(KEYS)]
    ex = vhost.exchanges["c"]
    assert bench_route_many(ex, keys, KEYS) == KEYS
    per_message(lambda n: bench_route_many(ex, keys, n))


def test_route_direct_with_cc(per_message, vhost):
    """A CC header naming two more keys: three lookups and the header walk."""
    vhost.declare_exchange("d", "direct", False, False, False, {})
    for name in ("a", "b", "c"):
        vhost.declare_queue(name, False, None, False, {})
        vhost.bind_queue(name, "d", name, {})
    props = [codec.encode_properties({"headers": {"CC": ["b", "c"]}}, True)]
    ex = vhost.exchanges["d"]
    assert bench_route_many(ex, [b"a"], 10, props) == 10
    per_message(lambda n: bench_route_many(ex, [b"a"], n, props))

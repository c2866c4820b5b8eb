"""Rate history for the charts: RabbitMQ's range parameters and `samples`
over the API, and the sampler's ring buffers (bounded memory, idle queues
cost no ring, a cheap sample with 10,000 queues)."""
import time
import tracemalloc
import types
import urllib.parse

import pika
import pytest

from lavinmq.http import stats
from tests.conftest import unique
from tests.ui.conftest import api

RANGE = "lengths_age=60&lengths_incr=1&msg_rates_age=60&msg_rates_incr=1&data_rates_age=60&data_rates_incr=1"


def wait_samples(broker, path, check, timeout=15):
    deadline = time.monotonic() + timeout
    while True:
        status, body = api(broker, "GET", path)
        assert status == 200, body
        if check(body):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.3)


def check_samples(details, newest=None, counter=False):
    samples = details["samples"]
    assert samples and len(samples) <= 61
    stamps = [s["timestamp"] for s in samples]
    assert stamps == sorted(stamps, reverse=True) and all(t % 1000 == 0 for t in stamps)
    assert all(b - a == 1000 for a, b in zip(stamps[1:], stamps))
    if counter:     # running totals: never down towards the newest
        values = [s["sample"] for s in samples]
        assert values == sorted(values, reverse=True)
    if newest is not None:
        assert samples[0]["sample"] == newest
    if len(samples) > 1:
        assert "avg_rate" in details and "avg" in details


def test_queue_samples_follow_the_queue(ui_broker):
    name = unique("hist")
    conn = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(name)
        for _ in range(5):
            ch.basic_publish("", name, b"x")
        time.sleep(1.2)
        for _ in range(3):
            ch.basic_publish("", name, b"y")
        method, _, _ = ch.basic_get(name)
        ch.basic_ack(method.delivery_tag)
        body = wait_samples(ui_broker, f"/api/queues/%2F/{name}?{RANGE}",
                            lambda b: (b["messages_details"].get("samples") or [{}])[0].get("sample") == 7
                            and len(b["messages_details"]["samples"]) >= 3
                            and b["message_stats"]["ack_details"]["samples"][0]["sample"] == 1)
        check_samples(body["messages_details"], newest=7)
        check_samples(body["messages_ready_details"], newest=7)
        check_samples(body["messages_unacknowledged_details"], newest=0)
        stats_ = body["message_stats"]
        check_samples(stats_["publish_details"], newest=8, counter=True)
        check_samples(stats_["get_details"], newest=1, counter=True)
        check_samples(stats_["deliver_get_details"], newest=1, counter=True)
        check_samples(stats_["ack_details"], newest=1, counter=True)
        # the queue grew: to 5 then to 8 messages, never above
        lengths = [s["sample"] for s in body["messages_details"]["samples"]]
        assert max(lengths) <= 8 and min(lengths) >= 0
        # without the parameters the answer is as before: no samples
        plain = api(ui_broker, "GET", f"/api/queues/%2F/{name}")[1]
        assert "samples" not in plain["messages_details"]
        assert "samples" not in plain["message_stats"]["publish_details"]
    finally:
        conn.close()


def test_overview_exchange_connection_channel_and_vhost_samples(ui_broker):
    name, exchange = unique("hist-o"), unique("hist-x")
    conn = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(exchange, "fanout")
        ch.queue_declare(name)
        ch.queue_bind(name, exchange)
        for _ in range(4):
            ch.basic_publish(exchange, "", b"z" * 100)
        ov = wait_samples(ui_broker, f"/api/overview?{RANGE}",
                          lambda b: len(b["queue_totals"]["messages_details"].get("samples", [])) >= 2
                          and b["message_stats"]["publish_details"]["samples"][0]["sample"] >= 4)
        check_samples(ov["queue_totals"]["messages_details"])
        check_samples(ov["message_stats"]["publish_details"], counter=True)
        x = wait_samples(ui_broker, f"/api/exchanges/%2F/{exchange}?{RANGE}",
                         lambda b: (b["message_stats"]["publish_in_details"].get("samples") or [{}])[0].get("sample") == 4)
        check_samples(x["message_stats"]["publish_in_details"], newest=4, counter=True)
        port = conn._impl._transport._sock.getsockname()[1]
        cname = [c["name"] for c in api(ui_broker, "GET", "/api/connections")[1] if c["peer_port"] == port][0]
        quoted = urllib.parse.quote(cname, safe="")
        c = wait_samples(ui_broker, f"/api/connections/{quoted}?{RANGE}",
                         lambda b: (b["recv_oct_details"].get("samples") or [{}])[0].get("sample", 0) >= 400)
        check_samples(c["recv_oct_details"], counter=True)
        check_samples(c["send_oct_details"], counter=True)
        chan = wait_samples(ui_broker, f"/api/channels/{quoted}%20(1)?{RANGE}",
                            lambda b: (b["message_stats"]["publish_details"].get("samples") or [{}])[0].get("sample") == 4)
        check_samples(chan["message_stats"]["publish_details"], newest=4, counter=True)
        v = wait_samples(ui_broker, f"/api/vhosts/%2F?{RANGE}", lambda b: len(b["messages_details"].get("samples", [])) >= 2)
        check_samples(v["messages_details"])
    finally:
        conn.close()


@pytest.mark.parametrize("query", ["lengths_age=10&lengths_incr=0", "msg_rates_age=-5&msg_rates_incr=1",
                                   "lengths_age=x&lengths_incr=1", "msg_rates_age=100000&msg_rates_incr=1"])
def test_bad_ranges_are_refused(ui_broker, query):
    status, body = api(ui_broker, "GET", f"/api/overview?{query}")
    assert status == 400 and "Invalid range parameters" in body["reason"], body


def test_a_range_longer_than_the_history_returns_what_there_is(ui_broker):
    name = unique("hist-long")
    assert api(ui_broker, "PUT", f"/api/queues/%2F/{name}", {})[0] == 201
    body = wait_samples(ui_broker, f"/api/queues/%2F/{name}?lengths_age=36000&lengths_incr=100",
                        lambda b: "samples" in b["messages_details"])
    assert len(body["messages_details"]["samples"]) <= stats.RING


# -- the sampler itself, on fake objects -----------------------------------------------

class FakeQueue:
    def __init__(self, name):
        self.name = name
        self.publish_count = self.deliver_count = self.get_count = self.ack_count = self.redeliver_count = 0
        self.message_count = self.unacked_count = 0


def fake_server(queues):
    vhost = types.SimpleNamespace(name="/", queues={q.name: q for q in queues}, exchanges={})
    return types.SimpleNamespace(vhosts={"/": vhost}, connections=[])


def test_ring_memory_is_bounded_and_idle_queues_hold_none(monkeypatch):
    monkeypatch.setattr(stats, "_sampler", None)
    queues = [FakeQueue(f"q{i}") for i in range(1000)]
    sampler = stats.Sampler(fake_server(queues), 5000)
    now = [1_000_000.0]
    monkeypatch.setattr(stats.time, "time", lambda: now[0])
    busy = queues[0]
    for tick in range(3 * stats.RING):
        now[0] += 5
        busy.publish_count += 100
        busy.message_count = tick % 7
        sampler.sample()
    s = stats.series_for(id(busy), busy)
    assert s.nbytes() == stats.RING * 7 * 4 == 3360     # 120 slots x 7 fields x 4 bytes
    # a queue that has never done anything holds no series at all
    assert stats.series_for(id(queues[1]), queues[1]) is None
    assert id(queues[1]) not in sampler.series
    _, ring_bytes = sampler.memory()
    assert ring_bytes == 3360 + 2 * (stats.RING * 7 * 4)   # the busy queue, its vhost and the broker
    # rates: 100 publishes per 5 s
    assert sampler.rates(s)["publish"] == pytest.approx(20.0)
    # the ring gives its memory back after a whole window without activity
    busy.message_count = 0
    for _ in range(stats.RING + 1):
        now[0] += 5
        sampler.sample()
    assert stats.series_for(id(busy), busy).ring is None
    # history of an object that went idle: running totals stay, lengths are 0
    ts = [int(now[0] * 1000) - k * 5000 for k in range(5)]
    picked, values = sampler.history(stats.series_for(id(busy), busy), ["publish", "messages"], ts)
    assert values["publish"] == [busy.publish_count] * len(picked) and values["messages"] == [0] * len(picked)


def test_sampling_10000_queues_is_cheap(monkeypatch):
    monkeypatch.setattr(stats, "_sampler", None)
    queues = [FakeQueue(f"q{i}") for i in range(10_000)]
    for i, q in enumerate(queues[:1000]):      # a tenth of them busy
        q.message_count = i
    sampler = stats.Sampler(fake_server(queues), 5000)
    sampler.sample()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    t0 = time.perf_counter()
    for _ in range(5):
        for q in queues[:1000]:
            q.publish_count += 3
        sampler.sample()
    per_sample = (time.perf_counter() - t0) / 5
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    print(f"\nsample() of 10,000 queues: {per_sample * 1000:.1f} ms (tracemalloc on); "
          f"memory held {grown / 1e6:.2f} MB more")
    # generous bound for a loaded 2-core machine: the default interval is 5 s
    assert per_sample < 1.0
    _, ring_bytes = sampler.memory()
    assert ring_bytes == (1000 + 2) * 3360


def test_stats_log_size_sets_the_history_kept(monkeypatch):
    # [main] stats_log_size: samples kept per object (120 by default)
    monkeypatch.setattr(stats, "_sampler", None)
    q = FakeQueue("q")
    sampler = stats.Sampler(fake_server([q]), 5000, size=10)
    now = [1_000_000.0]
    monkeypatch.setattr(stats.time, "time", lambda: now[0])
    for _ in range(30):
        now[0] += 5
        q.publish_count += 10
        sampler.sample()
    s = stats.series_for(id(q), q)
    assert s.nbytes() == 10 * 7 * 4
    ts = [int(now[0] * 1000) - k * 5000 for k in range(30)]
    picked, values = sampler.history(s, ["publish"], ts)
    assert len(picked) == 10            # 50 s of history, not 150
    assert values["publish"] == [q.publish_count - 10 * k for k in range(10)]
    assert sampler.rates(s)["publish"] == pytest.approx(2.0)

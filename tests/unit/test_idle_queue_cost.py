"""What an idle durable queue costs (issue 15: 100,000 queues in little
memory): its objects on the Python heap, and nothing in the stats
sampler's ticks (tracemalloc counts are exact, so the bounds are tight)."""
import asyncio
import gc
import time
import hashlib
import os
import tracemalloc
import types

import lavinmq.http.compat  # noqa: F401  (the sampler imports these on its first tick:
import lavinmq.http.controller.main  # noqa: F401 imported here, they are not counted as its memory)
from lavinmq.http.stats import Sampler
from lavinmq.vhost import VHost
from tests.unit.records import record

N = 2000


def heap_growth(fn):
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fn()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_an_idle_durable_queue_costs_under_800_bytes_of_heap(tmp_path):
    v = VHost("/", str(tmp_path))
    try:
        for i in range(50):             # the vhost's own tables past their first growth
            v.declare_queue(f"warm{i}", True, None, False, {})
        grown = heap_growth(lambda: [v.declare_queue(f"queue-{i}", True, None, False, {}) for i in range(N)])
        # 1,930 bytes before __slots__ and the lazy ack-file set; 1,480 after;
        # 860 with no path, log name, segment or consumer list, name bytes
        # or empty tables of its own; 732 with the rare fields in QueueExtras
        assert grown / N < 800, grown / N
        assert not v.queues["queue-7"].has_extras
        q = v.queues["queue-7"]
        assert q.arguments == {} and q.settings == {} and q.consumers == []
        assert q.store.dir == os.path.join(v.dir, hashlib.sha1(b"queue-7").hexdigest())
    finally:
        v.close()


def test_stats_ticks_allocate_nothing_for_idle_queues(tmp_path):
    v = VHost("/", str(tmp_path))
    try:
        for i in range(N):
            v.declare_queue(f"queue-{i}", True, None, False, {})
        server = types.SimpleNamespace(vhosts={"/": v}, connections=[], data_dir=str(tmp_path),
                                       guard=types.SimpleNamespace(total=0))
        sampler = Sampler(server, 5000)
        gc.collect()
        tracemalloc.start()             # before the first tick: what ticks replace is traced too
        try:
            for _ in range(3):          # the second tick marks idle_since, the third
                sampler.sample()        # replaces the keys the first made
                sampler.sample_extra()
            gc.collect()
            after_warm = tracemalloc.get_traced_memory()[0]
            for _ in range(6):
                sampler.sample()
                sampler.sample_extra()
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - after_warm
            held = after_warm
        finally:
            tracemalloc.stop()
        # was ~2.5 KB a queue held (a Series, a counters dict and a rates dict
        # each), then ~250 bytes (an entry in each tick's tables)
        assert held / N < 10, held / N         # the sampler's own few KB, none per queue
        assert grown / N < 4, grown / N        # nothing kept per tick
        active = v.queues["queue-7"]
        active.publish_count += 1       # as the hot path counts a publish
        sampler.sample()
        sampler.sample_extra()
        assert id(active) in sampler.series and sampler.series[id(active)].ring is not None
        assert id(v.queues["queue-8"]) not in sampler.series
    finally:
        v.close()


def test_a_queue_makes_its_extras_only_when_it_needs_them(tmp_path):
    """TTLs, limits, dead-lettering, delivery limits and single active
    consumer live in an object a plain queue never makes."""
    async def scenario():       # take_records schedules a delivery pass on the loop
        v = VHost("/", str(tmp_path))
        try:
            q = v.declare_queue("plain", True, None, False, {})
            for _ in range(10):
                assert q.publish_record(record(b"x"))
            assert [r for r, _ in q.take_records(4, False)] == [record(b"x")] * 4
            assert q.message_count == 6
            assert not q.has_extras and not q.ext
            assert (q.ttl, q.max_length, q.dlx, q.delivery_limit, q.active) == (-1, -1, None, -1, None)
            # a message with its own expiration: the queue checks TTLs from now on
            assert q.publish_record(record(b"y", props={"expiration": "60000"}))
            assert q.has_extras and q.msg_ttl and q.ext

            q2 = v.declare_queue("limited", True, None, False, {"x-max-length": 3, "x-message-ttl": 60000})
            assert q2.has_extras and q2.ext and (q2.max_length, q2.ttl) == (3, 60000)
            now = int(time.time() * 1000)       # the TTL counts from the record's timestamp
            for i in range(5):
                assert q2.publish_record(record(b"%d" % i, ts=now))
            assert [r for r, _ in q2.take_records(10, True)] == [record(b"%d" % i, ts=now) for i in (2, 3, 4)]

            q3 = v.declare_queue("single", True, None, False, {"x-single-active-consumer": True})
            assert q3.single_active and q3.has_extras and not q3.ext and q3.active is None

            # a policy brings extras to a queue that had none, and its removal turns them off
            q4 = v.declare_queue("by-policy", True, None, False, {})
            assert not q4.has_extras
            v.policies.set("dlx", {"pattern": "^by-policy$", "apply-to": "queues",
                                   "definition": {"dead-letter-exchange": "dlx", "delivery-limit": 2}})
            # applied in 2 ms slices: on a slow machine (arm64 under qemu) the
            # first slice can end before it reaches this queue
            await v.policies.applied()
            assert q4.ext and q4.dlx == b"dlx" and q4.delivery_limit == 2
            v.policies.delete("dlx")
            await v.policies.applied()
            assert not q4.ext and q4.dlx is None and q4.delivery_limit == -1
        finally:
            v.close()

    asyncio.run(scenario())

"""Streams against classic queues, per message: publishing (the same
record through Queue.publish of each kind) and writing a delivery's content
with its x-stream-offset header (against the classic write_content)."""
import os
import shutil
import struct
import tempfile

import pytest

from lavinmq._core import codec
from lavinmq._core.channel import bench_write_content
from lavinmq._core.segment import MessageStore
from lavinmq._core.stream import bench_publish, bench_stream_content
from lavinmq.queue import Queue
from lavinmq.queue.stream import StreamQueue
from lavinmq._core.stream_store import StreamStore

PROPS = codec.encode_properties({"delivery_mode": 2}, True)


def record(body=b"x" * 100):
    return (struct.pack("<q", 1700000000000) + b"\x00" + b"\x05perf1" + PROPS
            + struct.pack("<Q", len(body)) + body)


class FakeVhost:
    name = "/"
    segment_size = 8 * 1024 * 1024
    syncer = None
    policies = {}
    dir = "/nonexistent"


@pytest.fixture
def store_dir(tmp_path):
    """On tmpfs when there is one: the disk's writeback of one test's
    segments would otherwise slow down the next test's page faults."""
    if os.path.isdir("/dev/shm"):
        d = tempfile.mkdtemp(dir="/dev/shm")
        yield d
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield str(tmp_path)


@pytest.mark.parametrize("kind", ["classic", "stream"])
def test_publish(per_message, store_dir, kind):
    rec = record()
    if kind == "classic":
        q = Queue(FakeVhost(), "q", MessageStore(os.path.join(store_dir, "q"), 8 * 1024 * 1024))
    else:
        q = StreamQueue(FakeVhost(), "q", StreamStore(os.path.join(store_dir, "q"), 8 * 1024 * 1024), {})
    per_message(lambda n: bench_publish(q, rec, n), n=100_000)
    q.store.destroy()


@pytest.mark.parametrize("kind", ["classic", "stream"])
def test_delivery_content(per_message, kind):
    rec = record()
    fn = bench_write_content if kind == "classic" else bench_stream_content
    per_message(lambda n: fn(rec, n))

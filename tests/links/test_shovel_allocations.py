"""DESIGN.md's rule on the shovel path, end to end: a broker running a
shovel from its own queue ("amqp://", in-process) to another broker
allocates per read batch, not per message, while 200,000 messages go
through its delivery path, the client connections and the relay."""
import os
import subprocess
import sys
import time

from tests.conftest import ROOT, BrokerProcess, free_port
from tests.links.bulk import fill
from tests.links.conftest import ok, queue_depth, wait_for

N = 200_000


class AllocBroker:
    """tests/helpers/alloc_broker.py: the broker in a process that counts
    every Python object allocation, with an HTTP port to define shovels."""

    def __init__(self, data_dir):
        os.makedirs(data_dir)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.http_port = free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.http_url = f"http://127.0.0.1:{self.http_port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.alloc_broker", "-D", str(data_dir), "-p", str(self.port),
             "--http-port", str(self.http_port), "--metrics-http-port", "0", "--amqps-port", "0",
             "--https-port", "0", "-l", "warning"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stdout.readline().strip() == "ready"

    def count(self):
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def stop(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=30)


def test_a_shovel_allocates_nothing_per_message(tmp_path):
    dest = BrokerProcess(tmp_path / "dest").start()
    try:
        src = AllocBroker(tmp_path / "src")
    except BaseException:
        dest.stop()
        raise
    try:
        value = {"src-uri": "amqp://", "dest-uri": dest.url, "ack-mode": "on-confirm"}
        # warm-up: a first shovel fills the caches and buffers a transfer uses
        fill(src, "warm", 20_000)
        ok(src, "PUT", "/api/parameters/shovel/%2F/warm", {"value": {**value, "src-queue": "warm", "dest-queue": "warm"}})
        wait_for("warm-up moved", lambda: queue_depth(dest, "warm") == 20_000, timeout=60)
        ok(src, "DELETE", "/api/parameters/shovel/%2F/warm")
        fill(src, "measured", N)
        time.sleep(0.5)
        before = src.count()
        ok(src, "PUT", "/api/parameters/shovel/%2F/measured",
           {"value": {**value, "src-queue": "measured", "dest-queue": "measured"}})
        wait_for("moved", lambda: queue_depth(dest, "measured") == N, timeout=120, interval=0.5)
        allocations = src.count() - before
        per_message = allocations / N
        print(f"\n{N} messages shovelled: {allocations} object allocations in the broker running the shovel "
              f"({per_message:.4f} per message)")
        assert per_message < 0.05, f"{per_message:.3f} Python objects allocated per message"
    finally:
        src.stop()
        dest.stop()

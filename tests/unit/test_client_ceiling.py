"""benchmarks/client_ceiling.py serves a real load generator (ours): a
consumer gets deliveries, and a confirming publisher gets its acks while a
consumer gets as many deliveries as were published."""
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import client_ceiling


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ceiling():
    def start(confirms):
        port = free_port()
        stop = threading.Event()
        published = client_ceiling.Published() if confirms else None
        threading.Thread(target=client_ceiling.server, args=(port, 16, stop, published), daemon=True).start()
        time.sleep(0.3)
        started.append(stop)
        return port, published
    started = []
    yield start
    for stop in started:
        stop.set()


def perf(port, *args):
    return subprocess.Popen([sys.executable, "-m", "lavinmq.perf", "throughput", "--uri",
                             f"amqp://guest:guest@127.0.0.1:{port}", "-u", "ceiling", "-j", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(proc):
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_consumer_gets_deliveries(ceiling):
    port, _ = ceiling(False)
    r = result(perf(port, "-x", "0", "-z", "1"))
    assert r["consumed"] > client_ceiling.BLOCK      # more than one block: the stream repeats


def test_a_confirming_publisher_is_acked_and_the_consumer_gets_as_many(ceiling):
    port, published = ceiling(True)
    con = perf(port, "-x", "0", "-D", "50000", "-z", "30")    # until it has them all
    time.sleep(0.5)
    pub = result(perf(port, "-y", "0", "-c", "100", "-p", "-C", "50000", "-z", "10"))
    assert pub["published"] == 50000                 # every publish confirmed: -C waits for them
    assert published.count == 50000                  # counted exactly, one ack per read
    assert result(con)["consumed"] == 50000

#!/usr/bin/env python3
"""MQTT fan-in: N QoS 0 publishers into one subscriber's session queue, on a
broker of ours that this script starts. Over a 2 s window, once every
publisher floods, it reads the session queue's stats: what the queue took
in, what it delivered, and its backlog: whether the subscriber keeps its
share as the publishers grow in number (flow control: publishers wait in
the queue's line, lavinmq/_core/flow.pyx, as AMQP's do).

    python benchmarks/mqtt_fan_in.py [--publishers 200 1000] [--seconds 6]
"""
import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.conftest import BrokerProcess  # noqa: E402
from tests.helpers.mqtt_fan_in import perf, session_stats  # noqa: E402


def run(broker, publishers, seconds):
    topic = f"fan-in-{publishers}-{time.monotonic_ns()}"
    prefix = f"sub-{topic}-"
    sub = perf(broker, "-x", "0", "-y", "1", "-t", topic, "-z", str(seconds + 3), "--clean-session",
               "--client-id-prefix", prefix)
    time.sleep(1.5)                                  # the subscriber (and its session) first
    pub = perf(broker, "-x", str(publishers), "-y", "0", "-t", topic, "-z", str(seconds))
    try:
        time.sleep(min(3.0, seconds / 2))            # every publisher connected and flooding
        p0, d0, r0 = session_stats(broker, prefix)
        t0 = time.monotonic()
        time.sleep(2.0)
        p1, d1, r1 = session_stats(broker, prefix)
        dt = time.monotonic() - t0
    finally:
        pub.communicate(timeout=120)
        sub.communicate(timeout=120)
    taken, delivered = (p1 - p0) / dt, (d1 - d0) / dt
    print(f"{publishers:>6} publishers: in {taken:>12,.0f}/s  delivered {delivered:>12,.0f}/s  "
          f"share {delivered / max(taken, 1):.2f}  backlog {r0:,} -> {r1:,}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--publishers", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--seconds", type=int, default=6, help="how long the publishers run")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mqtt-fan-in-") as d:
        broker = BrokerProcess(os.path.join(d, "data"), mqtt=True).start()
        try:
            for n in opts.publishers:
                run(broker, n, opts.seconds)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()

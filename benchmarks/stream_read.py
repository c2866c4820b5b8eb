#!/usr/bin/env python3
"""Stream queues end to end: publish N messages into a stream, then C
consumers (each in its own lavinmqperf process) read all of it from `first`
at the same time. Prints the publish rate, the aggregate read rate and the
broker's RSS while they read (segments are mapped, never read into memory,
so it stays flat however long the stream is).

    .venv/bin/python benchmarks/stream_read.py                  # 10M x 100 B, 3 consumers
    .venv/bin/python benchmarks/stream_read.py -n 1000000 -c 2 --uri amqp://...   # a running broker

Without --uri it starts a broker of this checkout on free ports with a
temporary data directory."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def perf(uri, *args):
    cmd = [sys.executable, "-m", "lavinmq.perf", "throughput", "--uri", uri, "-j", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri", help="a running broker (else one is started)")
    ap.add_argument("--pid", type=int, help="the running broker's pid, for RSS")
    ap.add_argument("-n", "--messages", type=int, default=10_000_000)
    ap.add_argument("-s", "--size", type=int, default=100)
    ap.add_argument("-c", "--consumers", type=int, default=3)
    ap.add_argument("-P", "--prefetch", type=int, default=1000)
    opts = ap.parse_args(argv)
    broker = None
    if opts.uri is None:
        from tests.conftest import BrokerProcess
        tmp = tempfile.mkdtemp(prefix="stream-bench-")
        broker = BrokerProcess(os.path.join(tmp, "data")).start()
        opts.uri, opts.pid = broker.url, broker.proc.pid
    queue = f"stream-bench-{os.getpid()}"
    qargs = ["-u", queue, "--queue-args", '{"x-queue-type":"stream"}']
    try:
        pub = perf(opts.uri, "-y", "0", "-s", str(opts.size), "-C", str(opts.messages), *qargs)
        print(f"publish: {opts.messages:,} x {opts.size} B at {pub['avg_pub_rate']:,} msgs/s", flush=True)
        samples = []
        done = threading.Event()

        def sample():
            while not done.is_set():
                if opts.pid:
                    samples.append(rss_kib(opts.pid))
                time.sleep(0.5)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        started = time.monotonic()
        con = perf(opts.uri, "-x", "0", "-y", str(opts.consumers), "--processes", str(opts.consumers),
                   "-a", "100", "-P", str(opts.prefetch), "-D", str(opts.messages),
                   "--consumer-args", '{"x-stream-offset":"first"}', *qargs)
        elapsed = time.monotonic() - started
        done.set()
        t.join()
        total = con["consumed"]
        print(f"read: {opts.consumers} consumers from first, {total:,} deliveries in {con['elapsed_seconds']} s: "
              f"{con['avg_consume_rate']:,} msgs/s aggregate ({elapsed:.1f} s wall)", flush=True)
        if samples:
            print(f"broker RSS while reading: min {min(samples) / 1024:.0f} MiB, max {max(samples) / 1024:.0f} MiB "
                  f"({len(samples)} samples)")
        return 0 if total >= opts.messages * opts.consumers else 1
    finally:
        if broker is not None:
            broker.stop()
            import shutil
            shutil.rmtree(os.path.dirname(broker.data_dir), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

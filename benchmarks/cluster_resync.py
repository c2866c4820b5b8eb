#!/usr/bin/env python3
"""What a failover costs the nodes' full syncs, with a data directory of
--mb megabytes in closed segments: a 3-node cluster (one etcd, nodes on
127.0.0.11-13), the data published once, then --stops clean stops of the
leader, each followed by the old leader's restart. For each: seconds from
the stop until every node is in the ISR again, and the bytes the nodes
hashed for the syncs (their log lines).

    python benchmarks/cluster_resync.py --mb 1024 --stops 3

The first failover hashes everything on every node (nothing of the data
was hashed before); the later ones show what the nodes' checksum caches
save (lavinmq/clustering/files.py ChecksumCache)."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.cluster.etcd_server import EtcdProcess  # noqa: E402
from tests.cluster.harness import Cluster  # noqa: E402

HASHED = re.compile(r"sync pass \d[^\n]*?(\d+) hashed \((\d+) bytes\)")
BODY = 256 * 1024


def publish(url, mb):
    count = mb * 1024 * 1024 // BODY
    subprocess.run([sys.executable, "-m", "lavinmq.perf.cli", "throughput", "--uri", url, "-x", "1", "-y", "0",
                    "-s", str(BODY), "-c", "100", "-p", "-C", str(count), "-u", "resync", "-q"],
                   check=True, cwd=ROOT, capture_output=True, timeout=3600)


def hashed(nodes, offsets):
    return sum(int(m.group(2)) for n, off in zip(nodes, offsets) for m in HASHED.finditer(n.log_text()[off:]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=1024)
    p.add_argument("--stops", type=int, default=3)
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="lavinmq-resync-bench-")
    etcd = EtcdProcess(os.path.join(base, "etcd")).start()
    cluster = Cluster(etcd, base, "bench", log_level="info").start()
    try:
        leader = cluster.wait_leader()
        cluster.wait_isr(3)
        t0 = time.monotonic()
        publish(leader.url, a.mb)
        print(f"published {a.mb} MB in {time.monotonic() - t0:.1f} s")
        cluster.wait_isr(3)
        for i in range(a.stops):
            leader = cluster.wait_leader()
            offsets = [len(n.log_text()) for n in cluster.nodes]
            t0 = time.monotonic()
            leader.stop()
            cluster.wait_leader(other_than=leader)
            leader.start()
            cluster.wait_isr(3, timeout=600)
            took = time.monotonic() - t0
            print(f"failover {i + 1}: ISR whole again after {took:.2f} s; "
                  f"the nodes hashed {hashed(cluster.nodes, offsets) / 1e6:.0f} MB", flush=True)
    finally:
        cluster.stop()
        etcd.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

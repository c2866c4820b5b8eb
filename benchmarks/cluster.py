#!/usr/bin/env python3
"""A 3-node cluster (one etcd, nodes on 127.0.0.11-13) next to a single
node, in one run: the same lavinmqperf scenarios against each, alternating,
the median of --repeat runs; then the failover time over --kills SIGKILLs
of the leader under a publisher with confirms.

    python benchmarks/cluster.py --seconds 10 --repeat 3 --kills 20

Rows: `confirms -c 1000 -p` (one publisher, persistent messages, 1000
unconfirmed at most, no consumer: every confirm waits for the disk, and in
the cluster for both followers' disks too) and `1p1c` (one publisher, one
consumer, no confirms). Failover is the time from the SIGKILL to the
publisher's first confirm on a new connection (through any node: followers
pipe clients to the leader). Needs etcd (Debian's etcd-server) and root-free
loopback addresses 127.0.0.11-13 (Linux routes all of 127/8 to lo)."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.cluster.etcd_server import EtcdProcess  # noqa: E402
from tests.cluster.harness import Cluster  # noqa: E402
from tests.cluster.traffic import Publisher, check, drain  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402

ROWS = {
    "confirms -c 1000 -p": ["-y", "0", "-c", "1000", "-p"],
    "1p1c": [],
}


def perf(url, args, seconds, queue):
    out = subprocess.run([sys.executable, "-m", "lavinmq.perf.cli", "throughput", "--uri", url, "-z", str(seconds),
                          "-q", "-j", "-u", queue, *args], capture_output=True, text=True, cwd=ROOT,
                         timeout=seconds * 4 + 60)
    try:
        r = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise RuntimeError(f"lavinmqperf failed: {out.stdout[-500:]} {out.stderr[-1500:]}") from None
    return r["avg_consume_rate"] if "-y" not in args else r["avg_pub_rate"]


def delete_queue(node_url, queue):
    import pika
    conn = pika.BlockingConnection(pika.URLParameters(node_url))
    try:
        conn.channel().queue_delete(queue)
    finally:
        conn.close()


def throughput(cluster, single, seconds, repeat):
    results = {}
    for name, args in ROWS.items():
        runs = {"single": [], "cluster": []}
        for r in range(repeat):
            order = (("single", single.url), ("cluster", cluster.wait_leader().url))
            for kind, url in (order if r % 2 == 0 else order[::-1]):
                queue = f"bench-{name.split()[0]}-{r}"
                runs[kind].append(perf(url, args, seconds, queue))
                delete_queue(url if kind == "single" else cluster.wait_leader().url, queue)
                if kind == "cluster":
                    cluster.wait_isr(3)
        results[name] = {k: statistics.median(v) for k, v in runs.items()}
        results[name]["runs"] = runs
        s, c = results[name]["single"], results[name]["cluster"]
        print(f"{name:22} single {s:>10,.0f}/s  cluster {c:>10,.0f}/s  ratio {c / s:.2f}   "
              f"(runs: single {[round(x) for x in runs['single']]}, cluster {[round(x) for x in runs['cluster']]})",
              flush=True)
    return results


def probe(nodes, queue="probe"):
    """-> the time of the first confirmed publish on a new connection through one of nodes."""
    import pika
    i = 0
    while True:
        node = nodes[i % len(nodes)]
        i += 1
        try:
            params = pika.URLParameters(node.url + "?socket_timeout=1&blocked_connection_timeout=2")
            conn = pika.BlockingConnection(params)
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                ch.queue_declare(queue, durable=True)
                ch.basic_publish("", queue, b"0", pika.BasicProperties(delivery_mode=2))
                return time.monotonic()
            finally:
                conn.close()
        except Exception:
            time.sleep(0.02)


def failover(cluster, kills, signal_name="SIGKILL"):
    """SIGKILL: the process is gone (its followers notice at once). SIGSTOP:
    it hangs (they wait out its lease); it is then killed and restarted."""
    cluster.wait_leader()
    cluster.wait_isr(3)
    pub = Publisher([n.url for n in cluster.nodes], "failover").start()
    times = []
    try:
        pub.wait_confirmed(200)
        for _ in range(kills):
            leader = cluster.wait_leader()
            cluster.wait_isr(3)
            pub.wait_confirmed(len(pub.confirmed) + 100)
            connection = pub.connections
            t0 = time.monotonic()
            if signal_name == "SIGKILL":
                leader.kill()
                times.append(pub.wait_confirm_after(t0, connection=connection) - t0)
            else:
                # a client on the hung leader waits for its own timeout (heartbeats):
                # what counts is when a new connection, through any other node, is served
                leader.pause()
                times.append(probe([n for n in cluster.nodes if n is not leader]) - t0)
                leader.kill()
            leader.start()
        cluster.wait_isr(3)
    finally:
        pub.stop()
    lost, phantoms, duplicates = check(pub, drain(cluster.wait_leader().url, "failover"))
    print(f"failover over {kills} {signal_name}s of the leader: min {min(times):.3f} "
          f"median {statistics.median(times):.3f} "
          f"max {max(times):.3f} s; {len(pub.confirmed)} confirmed, {len(lost)} lost, {len(phantoms)} phantoms, "
          f"{duplicates} duplicates", flush=True)
    return times, lost, phantoms, duplicates


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--stops", type=int, default=0, help="SIGSTOPs of the leader (a hung process: its lease runs out)")
    p.add_argument("--lease-ttl", type=int, default=2)
    p.add_argument("--skip-throughput", action="store_true")
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="lavinmq-cluster-bench-")
    etcd = EtcdProcess(os.path.join(base, "etcd")).start()
    cluster = Cluster(etcd, base, "bench", lease_ttl=a.lease_ttl, log_level="warn").start()
    single = BrokerProcess(os.path.join(base, "single"), extra_args=["-l", "warn"]).start()
    try:
        cluster.wait_leader()
        cluster.wait_isr(3)
        if not a.skip_throughput:
            throughput(cluster, single, a.seconds, a.repeat)
        if a.kills:
            failover(cluster, a.kills)
        if a.stops:
            failover(cluster, a.stops, "SIGSTOP")
    finally:
        single.stop()
        cluster.stop()
        etcd.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

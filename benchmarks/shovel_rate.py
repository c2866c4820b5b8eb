#!/usr/bin/env python3
"""Shovel throughput, ours next to RabbitMQ 3.10's shovel plugin, in one run
(issue 27): N persistent 16-byte messages pre-filled in a durable queue of
one broker, a dynamic shovel with ack-mode on-confirm to a durable queue of
another broker on this machine; the time from defining the shovel until
the destination holds all N (and the source none).

    python benchmarks/shovel_rate.py [--messages 200000] [--repeat 3] [--tcp-source]

It starts two brokers of ours and two RabbitMQ nodes (Debian's
rabbitmq-server, shovel plugin; tests/links/rabbitmq.py), fills with
lavinmqperf, and alternates ours / RabbitMQ each round. The shovel is
defined on the source broker with src-uri "amqp://" (that broker itself:
in-process for us, the Erlang node's direct connection for RabbitMQ) and
dest-uri the other broker over TCP; prefetch 1000 (both defaults)."""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import base64

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lavinmq.client.connection import ChannelClosed, connect  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402
from tests.links.rabbitmq import RabbitMQ, missing  # noqa: E402


LOCAL_SOURCE = True


def fill(url, queue, n):
    subprocess.run([sys.executable, "-m", "lavinmq.perf", "throughput", "--uri", url, "-x", "1", "-y", "0",
                    "-C", str(n), "-s", "16", "-u", queue, "-c", "1000", "-p", "-q"], check=True,
                   stdout=subprocess.DEVNULL)


async def depth(conn, queue):
    try:
        _, n, _ = await conn.queue_declare(1, queue, passive=True)
        return n
    except ChannelClosed:
        await conn.open_channel(1)
        return 0


def api(b, method, path, body=None):
    req = urllib.request.Request(b.http_url + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(),
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


async def one_run(kind, src, dst, n, round_no):
    queue = f"shovel-bench-{round_no}"
    name = f"bench-{round_no}"
    fill(src.url, queue, n)
    probe_src = await connect(src.url, "probe")
    probe_dst = await connect(dst.url, "probe")
    for c in (probe_src, probe_dst):
        await c.open_channel(1)
    assert await depth(probe_src, queue) == n
    value = {"src-uri": "amqp://" if LOCAL_SOURCE else src.url, "src-queue": queue, "dest-uri": dst.url, "dest-queue": queue,
             "ack-mode": "on-confirm", "src-prefetch-count": 1000}
    started = time.monotonic()
    if kind == "ours":
        api(src, "PUT", f"/api/parameters/shovel/%2F/{name}", {"value": value})
    else:
        src.ctl("set_parameter", "shovel", name, json.dumps(value))
    while await depth(probe_dst, queue) < n:
        await asyncio.sleep(0.005)
    elapsed = time.monotonic() - started
    while await depth(probe_src, queue) > 0:        # acked at the source too
        await asyncio.sleep(0.005)
    drained = time.monotonic() - started
    got = await depth(probe_dst, queue)
    if kind == "ours":
        api(src, "DELETE", f"/api/parameters/shovel/%2F/{name}")
    else:
        src.ctl("clear_parameter", "shovel", name)
    for c, b in ((probe_src, src), (probe_dst, dst)):
        await c.queue_delete(1, queue)
        await c.close()
    return n / elapsed, n / drained, got - n


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tcp-source", action="store_true",
                   help='src-uri the source broker over TCP instead of "amqp://" (itself)')
    args = p.parse_args()
    global LOCAL_SOURCE
    LOCAL_SOURCE = not args.tcp_source
    if missing():
        sys.exit(missing())
    tmp = tempfile.mkdtemp(prefix="shovel-bench-")
    ours = [BrokerProcess(os.path.join(tmp, f"ours{i}"), extra_args=["-l", "warning"]).start() for i in (1, 2)]
    rabbits = [RabbitMQ(os.path.join(tmp, f"rabbit{i}")).start() for i in (1, 2)]
    rates = {"ours": [], "rabbitmq": []}
    try:
        for r in range(args.repeat):
            for kind, (src, dst) in (("ours", ours), ("rabbitmq", rabbits)):
                arrived, acked, dups = asyncio.run(one_run(kind, src, dst, args.messages, f"{kind}-{r}"))
                rates[kind].append(arrived)
                print(f"round {r + 1} {kind:9s}: {arrived:>10,.0f} msgs/s all arrived, {acked:>10,.0f} msgs/s "
                      f"all acked at the source, {dups} duplicates", flush=True)
    finally:
        for b in ours:
            b.stop()
        for r in rabbits:
            r.stop()
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n{args.messages:,} x 16-byte persistent messages, on-confirm, median of {args.repeat}:")
    print(f"  ours      {med['ours']:>10,.0f} msgs/s")
    print(f"  RabbitMQ  {med['rabbitmq']:>10,.0f} msgs/s  (3.10 shovel plugin)")
    print(f"  ratio     {med['ours'] / med['rabbitmq']:.1f}x")


if __name__ == "__main__":
    main()

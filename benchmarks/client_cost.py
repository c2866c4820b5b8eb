#!/usr/bin/env python3
"""What a client pays: the CPU time (user + system, as /proc/<pid>/stat's
utime + stime) a client process spends per million messages talking to one
broker and to another, for the same work. Brokers differ in what they send
(how many frames per write, how many confirms, how deliveries are spread
over socket writes), and a client on the same machine pays for it.

    python benchmarks/client_cost.py --ours amqp://guest:guest@127.0.0.1:5672/%2F \\
        --other amqp://guest:guest@127.0.0.1:5682/%2F --other-name lavinmq-2.9 \\
        [--lavinmqperf /path/to/lavinmqperf] [--repeat 3]

Clients: LavinMQ's lavinmqperf (if --lavinmqperf is given or it is on PATH),
pika (BlockingConnection) and aio-pika. Work, each on a fresh durable queue:
  consume    N messages waiting in the queue, no-ack
  consume+ack  the same, acking each message (pika, aio-pika)
  publish    N messages of 16 bytes
  confirm    N persistent messages with publisher confirms (lavinmqperf -c
             1000; aio-pika with 1000 outstanding)
The queue is filled (for consume) and checked by our own lavinmqperf, which
is not what is measured. The client's CPU comes from wait4's rusage when it
exits (the same counters /proc/<pid>/stat shows), so start-up is included:
N is large enough that it is noise (a check run with N = 1 is subtracted).
Brokers alternate, the median of --repeat runs is reported."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid

PYTHON = sys.executable

PIKA_CONSUME = r"""
import pika, sys
uri, q, n, ack = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
conn = pika.BlockingConnection(pika.URLParameters(uri))
ch = conn.channel()
if ack:
    ch.basic_qos(prefetch_count=1000)
left = [n]
def on(ch_, method, props, body):
    if ack:
        ch_.basic_ack(method.delivery_tag)
    left[0] -= 1
    if left[0] == 0:
        ch_.stop_consuming()
if n:
    ch.basic_consume(q, on, auto_ack=not ack)
    ch.start_consuming()
conn.close()
"""

PIKA_PUBLISH = r"""
import pika, sys
uri, q, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = pika.BlockingConnection(pika.URLParameters(uri))
ch = conn.channel()
body = b"x" * 16
for _ in range(n):
    ch.basic_publish("", q, body)
conn.close()
"""

AIOPIKA = r"""
import asyncio, sys, aio_pika
uri, q, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
async def main():
    conn = await aio_pika.connect(uri)
    ch = await conn.channel(publisher_confirms=(mode == "confirm"))
    if mode in ("consume", "consume+ack"):
        ack = mode == "consume+ack"
        if ack:
            await ch.set_qos(prefetch_count=1000)
        queue = await ch.get_queue(q)
        done = asyncio.get_running_loop().create_future()
        left = [n]
        async def on(msg):
            if ack:
                await msg.ack()
            left[0] -= 1
            if left[0] == 0 and not done.done():
                done.set_result(None)
        if n:
            await queue.consume(on, no_ack=not ack)
            await done
    elif mode == "publish":
        ch2 = await conn.channel(publisher_confirms=False)
        for _ in range(n):
            await ch2.default_exchange.publish(aio_pika.Message(b"x" * 16), routing_key=q)
    else:       # confirm: 1000 outstanding, persistent
        sem = asyncio.Semaphore(1000)
        async def one():
            try:
                await ch.default_exchange.publish(
                    aio_pika.Message(b"x" * 16, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=q)
            finally:
                sem.release()
        tasks = set()
        for _ in range(n):
            await sem.acquire()
            t = asyncio.ensure_future(one())
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    await conn.close()
asyncio.run(main())
"""


def client_cpu(cmd):
    """Run cmd; -> (cpu seconds, wall seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({proc.returncode}): {err.strip()[-500:]}")
    return usage.ru_utime + usage.ru_stime, wall


def ours_perf(uri, args):
    cmd = [PYTHON, "-m", "lavinmq.perf", "throughput", "--uri", uri, "-j", *args]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def with_queue(uri, fn):
    import pika
    q = "cost-" + uuid.uuid4().hex[:8]
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.queue_declare(q, durable=True)
    try:
        return fn(q)
    finally:
        ch.queue_delete(q)
        conn.close()


def fill(uri, q, n):
    ours_perf(uri, ["-y", "0", "-u", q, "-C", str(n), "-z", "600"])


def commands(client, work, uri, q, n, lavinmqperf):
    """-> the client command for this work, or None if the client has no such work."""
    if client == "lavinmqperf":
        base = [lavinmqperf, "throughput", "--uri", uri, "-u", q, "-z", "600", "-q"]
        return {"consume": [*base, "-x", "0", "-D", str(n)],
                "publish": [*base, "-y", "0", "-C", str(n)],
                "confirm": [*base, "-y", "0", "-C", str(n), "-c", "1000", "-p"]}.get(work)
    if client == "pika":
        if work in ("consume", "consume+ack"):
            return [PYTHON, "-c", PIKA_CONSUME, uri, q, str(n), "1" if work == "consume+ack" else "0"]
        if work == "publish":
            return [PYTHON, "-c", PIKA_PUBLISH, uri, q, str(n)]
        return None         # BlockingConnection confirms one message at a time: not a client's batch
    if client == "aio-pika":
        return [PYTHON, "-c", AIOPIKA, uri, q, str(n), work]
    raise ValueError(client)


def measure(uri, client, work, n, lavinmqperf):
    def go(q):
        if work.startswith("consume"):
            fill(uri, q, n)
        cmd = commands(client, work, uri, q, n, lavinmqperf)
        return client_cpu(cmd)
    return with_queue(uri, go)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--other", required=True)
    ap.add_argument("--other-name", default="other")
    ap.add_argument("--lavinmqperf", default=shutil.which("lavinmqperf"),
                    help="LavinMQ's load generator (default: on PATH)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clients", default="lavinmqperf,pika,aio-pika")
    ap.add_argument("--work", default="consume,consume+ack,publish,confirm")
    ap.add_argument("-n", type=int, default=0, help="messages per run (default: 2M lavinmqperf, 200k pika/aio-pika)")
    opts = ap.parse_args(argv)
    clients = [c for c in opts.clients.split(",") if c != "lavinmqperf" or opts.lavinmqperf]
    rows = []
    for client in clients:
        n = opts.n or (2_000_000 if client == "lavinmqperf" else 200_000)
        for work in opts.work.split(","):
            if commands(client, work, "u", "q", 1, opts.lavinmqperf or "x") is None:
                continue
            res = {"ours": [], "other": []}
            idle = {}       # broker -> the client's CPU for one message: start-up and connection
            for k in range(opts.repeat):
                order = [("ours", opts.ours), ("other", opts.other)]
                for name, uri in (order if k % 2 == 0 else order[::-1]):
                    try:
                        cpu, wall = measure(uri, client, work, n, opts.lavinmqperf)
                        if name not in idle:
                            idle[name] = measure(uri, client, work, 1, opts.lavinmqperf)[0]
                    except RuntimeError as exc:
                        print(f"  {client} {work} {name}: {exc}", file=sys.stderr)
                        continue
                    res[name].append(((cpu - idle[name]) / n * 1e6, n / wall, idle[name]))
                    print(f"  {client} {work} {name}: {cpu:.2f} s CPU ({idle[name]:.2f} s start-up), "
                          f"{n / wall:,.0f} msgs/s", file=sys.stderr, flush=True)
            med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) if v else None
                   for k, v in res.items()}
            rows.append((client, work, med["ours"], med["other"]))
    print(f"{'client':<12} {'work':<12} {'CPU s per 1M msgs: lavinmq':>28} {opts.other_name:>12} {'ratio':>7}   "
          f"(msgs/s lavinmq / {opts.other_name})")
    for client, work, a, b in rows:
        ratio = f"{a[0] / b[0]:>6.2f}x" if a and b and b[0] > 0 else f"{'':>7}"
        fa = f"{a[0]:>28.2f}" if a else f"{'n/a':>28}"
        fb = f"{b[0]:>12.2f}" if b else f"{'n/a':>12}"
        rates = f"{a[1]:,.0f} / {b[1]:,.0f}" if a and b else ""
        print(f"{client:<12} {work:<12} {fa} {fb} {ratio}   {rates}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

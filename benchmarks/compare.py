#!/usr/bin/env python3
"""Run the same lavinmqperf scenarios against two brokers in one run,
alternating, and print a table with the ratio.

    python benchmarks/compare.py --ours amqp://guest:guest@127.0.0.1:5672/%2F \
                                 --other amqp://guest:guest@127.0.0.1:5682/%2F --seconds 10 --repeat 3

Publishers and consumers run as separate lavinmqperf processes, so the load
generator is never one process doing both. The median of --repeat runs is
reported for each scenario."""
import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid

STREAM = ["--queue-args", '{"x-queue-type":"stream"}']

# name -> (publisher args or None, consumer args or None, the rate that counts,
#          args for every lavinmqperf of the scenario)
SCENARIOS = {
    "1 pub + 1 con (no-ack)": (["-y", "0"], ["-x", "0"], "consume", []),
    "publish only": (["-y", "0"], None, "publish", []),
    "consume only (pre-filled)": ("prefill", ["-x", "0"], "consume", []),
    "confirms -c 1000": (["-y", "0", "-c", "1000"], ["-x", "0"], "consume", []),
    "acks -a 100 -P 1000": (["-y", "0"], ["-x", "0", "-a", "100", "-P", "1000"], "consume", []),
    # streams: publishing into one, and three consumers (one process each)
    # reading the same pre-filled stream from its first offset; the rate is
    # their aggregate
    "stream publish only": (["-y", "0"], None, "publish", STREAM),
    "stream 3 con from first (pre-filled)": (
        "prefill", ["-x", "0", "-y", "3", "--processes", "3", "-a", "100", "-P", "1000",
                    "--consumer-args", '{"x-stream-offset":"first"}'], "consume", STREAM),
}


def perf(uri, args, seconds):
    cmd = [sys.executable, "-m", "lavinmq.perf", "throughput", "--uri", uri, "-j", "-z", str(seconds), *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(proc):
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"lavinmqperf failed: {err.strip()}")
    return json.loads(out.strip().splitlines()[-1])


def delete_queue(uri, name):
    """Streams keep what was published: drop each scenario's queue after it."""
    import asyncio
    from lavinmq.perf.client import Client

    async def run():
        c = await Client.connect(uri)
        await c.open_channel(1)
        await c.call(1, 50, 40, (0, name, False, False, False), (50, 41))
        await c.close()
    try:
        asyncio.run(run())
    except Exception as exc:
        print(f"could not delete {name}: {exc}", file=sys.stderr)


def run_scenario(uri, name, seconds):
    qname = "cmp-" + uuid.uuid4().hex[:8]
    try:
        return _run_scenario(uri, name, qname, seconds)
    finally:
        delete_queue(uri, qname)


def _run_scenario(uri, name, qname, seconds):
    pub, con, which, extra = SCENARIOS[name]
    queue = ["-u", qname, *extra]
    if pub == "prefill":
        # fill for the same time, then measure draining it
        result(perf(uri, ["-y", "0", *queue], seconds))
        return result(perf(uri, [*con, *queue], seconds))["avg_consume_rate"]
    procs = []
    if con is not None:
        procs.append(("consume", perf(uri, [*con, *queue], seconds + 1)))
        time.sleep(0.5)
    procs.append(("publish", perf(uri, [*pub, *queue], seconds)))
    rates = {}
    for kind, p in procs:
        r = result(p)
        rates[kind] = r["avg_consume_rate"] if kind == "consume" else r["avg_pub_rate"]
    return rates[which]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--other", required=True)
    ap.add_argument("--other-name", default="other")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scenario", action="append", choices=list(SCENARIOS), help="default: all")
    opts = ap.parse_args(argv)
    names = opts.scenario or list(SCENARIOS)
    table = []
    for name in names:
        ours, other = [], []
        for _ in range(opts.repeat):       # alternate so drift on a shared box hits both
            ours.append(run_scenario(opts.ours, name, opts.seconds))
            other.append(run_scenario(opts.other, name, opts.seconds))
        a, b = statistics.median(ours), statistics.median(other)
        table.append((name, a, b, a / b if b else float("inf")))
        print(f"{name}: lavinmq {a:,.0f} msgs/s  {opts.other_name} {b:,.0f} msgs/s", file=sys.stderr, flush=True)
    width = max(len(n) for n in names)
    print(f"{'scenario':<{width}}  {'lavinmq':>14}  {opts.other_name:>14}  {'ratio':>7}")
    for name, a, b, ratio in table:
        print(f"{name:<{width}}  {a:>14,.0f}  {b:>14,.0f}  {ratio:>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

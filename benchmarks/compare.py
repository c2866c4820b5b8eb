#!/usr/bin/env python3
"""Run the same lavinmqperf scenarios against two brokers in one run,
alternating, and print a table with the ratio.

    python benchmarks/compare.py --ours amqp://guest:guest@127.0.0.1:5672/%2F \\
                                 --other amqp://guest:guest@127.0.0.1:5682/%2F --seconds 10 --repeat 3

--ours-mqtt/--other-mqtt (mqtt://guest:guest@127.0.0.1:1883) add the MQTT QoS 1
rows (1, 20 and 100 publishers, one PUBLISH in flight each, persistent sessions).

Publishers and consumers run as separate lavinmqperf processes, so the load
generator is never one process doing both. The median of --repeat runs is
reported for each scenario. Each run declares its own queues (and exchange)
under fresh names and deletes them afterwards. A scenario the other broker
cannot run (an exchange type it lacks) is shown as n/a.

--other-client PATH adds rows measured with a second load generator (LavinMQ's
own lavinmqperf, where it is installed) for the scenarios it can run
(OTHER_CLIENT_ROWS): a client that costs more per message is the bottleneck on
a small machine, and both brokers should be fast with either client. With
--baseline-rows they are the seven rows: the five, consuming a backlog and
persistent confirms with the other client."""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

# name -> (publisher args or None, consumer args or None, the rate that counts,
#          args both sides get: exchange type, bindings, queues)
TOPIC_50 = ["--exchange-type", "topic", "--bindings", '[{"key": "dev.{i}.#", "count": 49}, {"key": "#.temp"}]']
TOPIC_1000 = ["--exchange-type", "topic", "--bindings", '[{"key": "dev.{i}.#", "count": 999}, {"key": "#.temp"}]']
HEADERS_100 = ["--exchange-type", "headers", "--bindings",
               '[{"args": {"x-match": "all", "dev": "{i}", "kind": "temp"}, "count": 99},'
               ' {"args": {"x-match": "all", "kind": "temp"}}]']
STREAM = ["--queue-args", '{"x-queue-type":"stream"}']
# issue 33: a persistent exchange keeps its last 1M messages (its segments
# go as they age out of that), next to the same exchange without
DIRECT = ["-e", "{exchange}", "--exchange-type", "direct"]
PERSIST = [*DIRECT, "--exchange-args", '{"x-persist-messages": 1000000}']
SCENARIOS = {
    "1 pub + 1 con (no-ack)": (["-y", "0"], ["-x", "0"], "consume", []),
    "publish only": (["-y", "0"], None, "publish", []),
    # the same backlog in both brokers (BACKLOG_PER_SECOND x --seconds
    # messages, more than the fastest client drains in that time): filling
    # for a time gave the faster broker a backlog three times as deep (58M vs
    # 19M), and a deeper one is slower to drain while the kernel still writes
    # the fill back. Consumed for --seconds: LavinMQ's lavinmqperf checks -D
    # once a second, too coarse to time a drain to the end
    "consume only (pre-filled)": ("prefill-count", ["-x", "0"], "consume", []),
    "confirms -c 1000": (["-y", "0", "-c", "1000"], ["-x", "0"], "consume", []),
    "acks -a 100 -P 1000": (["-y", "0"], ["-x", "0", "-a", "100", "-P", "1000"], "consume", []),
    # issue 43: a consumer acking each message on its own, a small window
    "ack each -a 1 -P 10": (["-y", "0"], ["-x", "0", "-a", "1", "-P", "10"], "consume", []),
    "ack each -a 1 -P 100": (["-y", "0"], ["-x", "0", "-a", "1", "-P", "100"], "consume", []),
    # issue 29: persistent messages, confirms after fsync (group commit)
    "persistent confirms -c 1000 -p": (["-y", "0", "-c", "1000", "-p"], ["-x", "0"], "publish", []),
    # issue 15: routing at scale (one publisher connection, 16-byte messages)
    "topic 50 bindings, 1 key": (["-y", "0", "--routing-keys", "dev.{i}.temp:1"], ["-x", "0"], "consume",
                                 ["-e", "{exchange}", *TOPIC_50]),
    "topic 50 bindings, 100 keys": (["-y", "0", "--routing-keys", "dev.{i}.temp:100"], ["-x", "0"], "consume",
                                    ["-e", "{exchange}", *TOPIC_50]),
    "topic 50 bindings, 10k keys": (["-y", "0", "--routing-keys", "dev.{i}.temp:10000"], ["-x", "0"], "consume",
                                    ["-e", "{exchange}", *TOPIC_50]),
    "topic 1000 bindings, 10k keys": (["-y", "0", "--routing-keys", "dev.{i}.temp:10000"], ["-x", "0"],
                                      "consume", ["-e", "{exchange}", *TOPIC_1000]),
    "direct to 1000 queues, round robin": (["-y", "0"], ["-x", "0"], "consume",
                                           ["-e", "{exchange}", "--exchange-type", "direct", "--queues", "1000"]),
    "headers 100 bindings, 1000 header sets": (
        ["-y", "0", "--routing-keys", "h.{i}:1000", "--properties", '{"headers": {"dev": "{i}", "kind": "temp"}}'],
        ["-x", "0"], "consume", ["-e", "{exchange}", *HEADERS_100]),
    "consistent-hash to 4 queues": (["-y", "0", "--routing-keys", "order-{i}:10000"], ["-x", "0"], "consume",
                                    ["-e", "{exchange}", "--exchange-type", "x-consistent-hash", "--queues", "4",
                                     "--bindings", '[{"key": "1"}]']),
    # issues 11 and 12: queue semantics and LavinMQ's extensions ({queue} is the run's queue name)
    "TTL 1 ms + dead-lettering to a consumed queue": (
        ["-y", "0", "--queue-args", '{"x-message-ttl": 1, "x-dead-letter-exchange": "", '
                                    '"x-dead-letter-routing-key": "{queue}-dlq"}'],
        ["-x", "0", "-u", "{queue}-dlq"], "consume", []),
    "priority queue (x-max-priority 10) 1p1c": (["-y", "0", "--properties", '{"priority": 5}'], ["-x", "0"],
                                                "consume", ["--queue-args", '{"x-max-priority": 10}']),
    "publish at x-max-length 1000 (drop-head)": (["-y", "0"], None, "publish",
                                                 ["--queue-args", '{"x-max-length": 1000}']),
    "delayed exchange, x-delay 1 ms": (["-y", "0", "--properties", '{"headers": {"x-delay": 1}}'], ["-x", "0"],
                                       "consume", ["-e", "{exchange}", "--exchange-type", "x-delayed-message",
                                                   "--exchange-args", '{"x-delayed-type": "direct"}']),
    # streams: publishing into one, and three consumers (one process each)
    # reading the same pre-filled stream from its first offset; the rate is
    # their aggregate
    "stream publish only": (["-y", "0"], None, "publish", STREAM),
    "stream 3 con from first (pre-filled)": (
        "prefill", ["-x", "0", "-y", "3", "--processes", "3", "-a", "100", "-P", "1000",
                    "--consumer-args", '{"x-stream-offset":"first"}'], "consume", STREAM),
    # persistent exchanges (benchmarks/persistent_exchange.py runs them in pairs)
    "direct exchange, publish only": (["-y", "0"], None, "publish", DIRECT),
    "persistent exchange, publish only": (["-y", "0"], None, "publish", PERSIST),
    "direct exchange, 1 pub + 1 con": (["-y", "0"], ["-x", "0"], "consume", DIRECT),
    "persistent exchange, 1 pub + 1 con": (["-y", "0"], ["-x", "0"], "consume", PERSIST),
    "direct exchange, nothing bound": (["-y", "0"], None, "publish", [*DIRECT, "--bindings", "[]"]),
    "persistent exchange, nothing bound": (["-y", "0"], None, "publish", [*PERSIST, "--bindings", "[]"]),
    # fan-in: many publishing connections (one load-generator process) into
    # one queue with one consumer; the consumer's rate is what counts, and
    # should be near the 1p1c row's (flow control, lavinmq/_core/flow.pyx)
    "fan-in 100 pub + 1 con": (["-y", "0", "-x", "100"], ["-x", "0"], "consume", []),
    "fan-in 1000 pub + 1 con": (["-y", "0", "-x", "1000"], ["-x", "0"], "consume", []),
}
BASELINE_ROWS = list(SCENARIOS)[:5]
# MQTT QoS 1, one PUBLISH in flight per publisher (how devices publish; LavinMQ's
# lavinmqperf mqtt waits for each PUBACK), persistent sessions, one subscriber:
# row -> publishers. Run when --ours-mqtt and --other-mqtt are given.
MQTT_SCENARIOS = {"MQTT QoS 1, 1 publisher": 1, "MQTT QoS 1, 20 publishers": 20,
                  "MQTT QoS 1, 100 publishers": 100}
BACKLOG_PER_SECOND = 7_000_000
# what --other-client measures (flags LavinMQ's lavinmqperf has too); with
# --baseline-rows only the last two (issue 29's seven rows)
OTHER_CLIENT_ROWS = ["1 pub + 1 con (no-ack)", "publish only", "consume only (pre-filled)",
                     "confirms -c 1000", "acks -a 100 -P 1000", "ack each -a 1 -P 10", "ack each -a 1 -P 100",
                     "persistent confirms -c 1000 -p", *MQTT_SCENARIOS]
OTHER_CLIENT_BASELINE = ["consume only (pre-filled)", "persistent confirms -c 1000 -p"]


def perf(uri, args, seconds, client=None):
    """client: another load generator's executable (LavinMQ's lavinmqperf), or ours."""
    head = [client] if client else [sys.executable, "-m", "lavinmq.perf"]
    cmd = [*head, "throughput", "--uri", uri, "-j", "-z", str(seconds), *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(proc):
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"lavinmqperf failed: {err.strip()}")
    return json.loads(out.strip().splitlines()[-1])


def _queues(common, queue):
    if "--queues" in common:
        n = int(common[common.index("--queues") + 1])
        return [f"{queue}-{i}" for i in range(1, n + 1)] if n > 1 else [queue]
    return [queue]


def cleanup(uri, queues, exchanges):
    from lavinmq.perf.client import Client
    from lavinmq.perf.topology import delete

    async def run():
        c = await Client.connect(uri)
        await c.open_channel(1)
        await delete(c, queues, exchanges)
        await c.close()
    asyncio.run(run())


def run_scenario(uri, name, seconds, client=None):
    pub, con, which, common = SCENARIOS[name]
    run_id = uuid.uuid4().hex[:8]
    queue, exchange = "cmp-" + run_id, "cmpx-" + run_id
    common = [a.replace("{exchange}", exchange).replace("{queue}", queue) for a in common]
    if pub not in (None, "prefill", "prefill-count"):
        pub = [a.replace("{queue}", queue) for a in pub]
    if con is not None:
        con = [a.replace("{queue}", queue) for a in con]
    base = ["-u", queue, *common]
    try:
        if pub == "prefill-count":
            n = BACKLOG_PER_SECOND * seconds
            result(perf(uri, ["-y", "0", "-C", str(n), *base], 0))
            # the fill's gigabytes written back before, not during, the
            # measurement (either broker's, however it syncs): with them the
            # same client read at 1.1M or 2.1M msgs/s by chance
            os.sync()
            r = result(perf(uri, [*base, *con], seconds, client))
            if r.get("consumed", 0) >= n:
                print(f"  {name}: the backlog ran out: the rate is too low", file=sys.stderr)
            return r["avg_consume_rate"]
        if pub == "prefill":
            # fill for the same time (with ours: the fill is not measured),
            # then measure draining it
            result(perf(uri, ["-y", "0", *base], seconds))
            return result(perf(uri, [*base, *con], seconds, client))["avg_consume_rate"]
        procs = []
        if con is not None:
            procs.append(("consume", perf(uri, [*base, *con], seconds + 1, client)))  # con may name its own queue
            time.sleep(1.0 if "--queues" in common or "--bindings" in common else 0.5)
        procs.append(("publish", perf(uri, [*base, *pub], seconds, client)))
        rates = {}
        for kind, p in procs:
            r = result(p)
            rates[kind] = r["avg_consume_rate"] if kind == "consume" else r["avg_pub_rate"]
        print(f"  {name}: publish {rates['publish']:,} msgs/s" +
              (f", consume {rates['consume']:,} msgs/s" if "consume" in rates else ""), file=sys.stderr)
        return rates[which]
    finally:
        try:
            cleanup(uri, _queues(common, queue) + [queue + "-dlq"], [exchange] if "-e" in common else [])
        except Exception as exc:        # the broker may refuse what it never declared
            print(f"  cleanup: {exc}", file=sys.stderr)


def run_mqtt(uri, amqp_uri, name, seconds, client=None):
    """One MQTT row: the publishers' rate of PUBACKed messages. The sessions
    (mqtt.publisher-N, mqtt.consumer-N) are deleted after the run, so the
    next starts without a backlog."""
    n = MQTT_SCENARIOS[name]
    head = [client] if client else [sys.executable, "-m", "lavinmq.perf"]
    cmd = [*head, "mqtt", "throughput", "-u", uri, "--qos=1", "-x", str(n), "-y", "1", "-j", "-z", str(seconds)]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        r = result(proc)
        print(f"  {name}: publish {r['avg_pub_rate']:,} msgs/s, consume {r['avg_consume_rate']:,} msgs/s",
              file=sys.stderr)
        return r["avg_pub_rate"]
    finally:
        sessions = [f"mqtt.{role}-{i}" for role in ("publisher", "consumer") for i in range(n + 1)]
        try:
            cleanup(amqp_uri, sessions, [])
        except Exception as exc:
            print(f"  cleanup: {exc}", file=sys.stderr)


def run_or_none(uri, name, seconds, client=None, mqtt_uri=None):
    try:
        if name in MQTT_SCENARIOS:
            if mqtt_uri is None:
                raise RuntimeError("the MQTT rows need --ours-mqtt and --other-mqtt")
            return run_mqtt(mqtt_uri, uri, name, seconds, client)
        return run_scenario(uri, name, seconds, client)
    except RuntimeError as exc:
        print(f"  {name}: {exc}", file=sys.stderr)
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--other", required=True)
    ap.add_argument("--other-name", default="other")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scenario", action="append", choices=list(SCENARIOS) + list(MQTT_SCENARIOS),
                    help="default: all")
    ap.add_argument("--baseline-rows", action="store_true", help="only the five single-queue rows")
    ap.add_argument("--other-client", metavar="PATH",
                    help="also measure with this load generator (LavinMQ's lavinmqperf)")
    ap.add_argument("--other-client-name", default="lavinmqperf")
    ap.add_argument("--ours-mqtt", metavar="URI", help="mqtt://user:pass@host:port: adds the MQTT rows")
    ap.add_argument("--other-mqtt", metavar="URI")
    ap.add_argument("--mqtt-rows", action="store_true", help="only the MQTT rows")
    opts = ap.parse_args(argv)
    mqtt = list(MQTT_SCENARIOS) if opts.ours_mqtt and opts.other_mqtt else []
    names = opts.scenario or (BASELINE_ROWS if opts.baseline_rows else
                              mqtt if opts.mqtt_rows else list(SCENARIOS) + mqtt)
    # (row label, scenario, client)
    rows = [(name, name, None) for name in names]
    if opts.other_client:
        if opts.scenario or opts.mqtt_rows:
            extra = [n for n in names if n in OTHER_CLIENT_ROWS]
        else:
            extra = OTHER_CLIENT_BASELINE if opts.baseline_rows else \
                [n for n in OTHER_CLIENT_ROWS if n not in MQTT_SCENARIOS or mqtt]
        rows += [(f"{name} [{opts.other_client_name}]", name, opts.other_client) for name in extra]
    names = [label for label, _, _ in rows]
    table = []
    for name, scenario, client in rows:
        ours, other = [], []
        for _ in range(opts.repeat):       # alternate so drift on a shared box hits both
            ours.append(run_or_none(opts.ours, scenario, opts.seconds, client, opts.ours_mqtt))
            other.append(run_or_none(opts.other, scenario, opts.seconds, client, opts.other_mqtt))
        a = statistics.median(x for x in ours if x is not None) if any(x is not None for x in ours) else None
        b = statistics.median(x for x in other if x is not None) if any(x is not None for x in other) else None
        table.append((name, a, b, ours, other))
        print(f"{name}: lavinmq {a or 0:,.0f} msgs/s  {opts.other_name} {b or 0:,.0f} msgs/s "
              f"(runs: {ours} / {other})", file=sys.stderr, flush=True)
    width = max(len(n) for n in names)

    def fmt(x):
        return f"{x:>14,.0f}" if x is not None else f"{'n/a':>14}"
    print(f"{'scenario':<{width}}  {'lavinmq':>14}  {opts.other_name:>14}  {'ratio':>7}")
    for name, a, b, _, _ in table:
        ratio = f"{a / b:>6.2f}x" if a and b else f"{'':>7}"
        print(f"{name:<{width}}  {fmt(a)}  {fmt(b)}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

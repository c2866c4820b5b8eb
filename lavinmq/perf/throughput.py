"""`lavinmqperf throughput`: publishers and consumers on their own
connections, a rate line per second, a summary at the end."""
import asyncio
import sys
import time

import orjson

from lavinmq.perf import topology
from lavinmq.perf.client import Client, ack_frame, publish_frames


class Stats:
    def __init__(self):
        self.published = 0
        self.consumed = 0
        self.clients_pub = []
        self.clients_con = []

    def pub_count(self):
        return self.published + sum(p.sent for p in self.clients_pub)

    def con_count(self):
        return self.consumed + sum(c.scanner.deliveries for c in self.clients_con)


async def setup(opts):
    c = await Client.connect(opts.uri)
    await c.open_channel(1)
    await topology.declare(c, opts)
    await c.close()


async def publisher(opts, stats, deadline):
    c = await Client.connect(opts.uri)
    c.sent = 0
    stats.clients_pub.append(c)
    await c.open_channel(1)
    if opts.confirm:
        await c.call(1, 85, 10, (False,), (85, 11))
    if opts.transaction:
        await c.call(1, 90, 10, (), (90, 11))
    rk = opts.routing_key if opts.routing_key is not None else opts.queue
    body = message_body(opts.size)
    variants = topology.message_variants(opts, body, 1, c.frame_max)
    cycle = topology.MessageCycle(variants) if len(variants) > 1 else None
    msg = variants[0]
    batch_n = max(1, min(1000, 262144 // len(msg)))
    if cycle is not None:
        batch_n = min(batch_n, cycle.count)
    progress = asyncio.Event()
    c.on_progress = progress.set
    started = time.monotonic()
    limit = opts.pmessages or 0
    while time.monotonic() < deadline and not c.closed.done():
        n = batch_n
        if limit:
            n = min(n, limit - c.sent)
            if n <= 0:
                break
        if opts.rate:
            due = int((time.monotonic() - started) * opts.rate) - c.sent
            if due <= 0:
                await asyncio.sleep(0.001)
                continue
            n = min(n, due)
        if opts.confirm:
            room = opts.confirm - (c.sent - c.scanner.confirms_acked_upto)
            if room <= 0:
                progress.clear()
                await progress.wait()
                continue
            n = min(n, room)
        if opts.transaction:
            n = min(n, opts.transaction - c.sent % opts.transaction)
        if opts.measure_latency:
            now = time.monotonic_ns().to_bytes(8, "big")
            msg = publish_frames(1, opts.exchange, rk, now + body[8:], opts.persistent, c.frame_max)
        c.transport.write(cycle.take(n) if cycle is not None else msg * n)
        c.sent += n
        if opts.transaction and c.sent % opts.transaction == 0:
            await c.call(1, 90, 20, (), (90, 21))
        if c.paused:
            await c.drain()
        else:
            await asyncio.sleep(0)
    return c


def consumer_queues(opts, index, total):
    """Consumer `index` of `total`: one queue each when there are enough
    consumers, else every total-th queue, so that every queue is consumed."""
    names = topology.queue_names(opts)
    if total >= len(names):
        return [names[index % len(names)]]
    return names[index::total]


async def consumer(opts, stats, deadline, index=0):
    c = await Client.connect(opts.uri)
    stats.clients_con.append(c)
    await c.open_channel(1)
    sc = c.scanner
    if opts.measure_latency:
        sc.measure_latency = True
    if opts.verify:
        sc.expected_body = message_body(opts.size)
    ack_every = opts.ack
    if opts.prefetch:
        await c.call(1, 60, 10, (0, opts.prefetch, False), (60, 11))
    if opts.transaction_acks:
        await c.call(1, 90, 10, (), (90, 11))
    state = {"acked": 0, "committed": 0}

    def on_progress():
        if ack_every and sc.deliveries - state["acked"] >= ack_every:
            c.transport.write(ack_frame(1, sc.last_delivery_tag))
            state["acked"] = sc.deliveries
            if opts.transaction_acks and state["acked"] - state["committed"] >= opts.transaction_acks:
                c.send(1, 90, 20)          # tx.commit; the commit-ok is just counted as another method
                state["committed"] = state["acked"]
        if opts.verify and sc.bad_bodies:
            c.transport.close()
        if opts.consumer_rate:
            # pace by pausing reads while ahead of the wanted rate
            ahead = sc.deliveries - (time.monotonic() - started) * opts.consumer_rate
            if ahead > 0:
                c.transport.pause_reading()
                asyncio.get_running_loop().call_later(ahead / opts.consumer_rate, c.transport.resume_reading)

    started = time.monotonic()
    c.on_progress = on_progress
    if opts.poll:
        total = getattr(opts, "total_consumers", None) or opts.consumers
        poll_queue = consumer_queues(opts, index, total)[0]
        while time.monotonic() < deadline and not c.closed.done():
            if opts.cmessages and sc.deliveries >= opts.cmessages:
                break
            reply = c.wait(1, (60, 71), (60, 72))
            c.send(1, 60, 70, (0, poll_queue, not ack_every))
            try:
                await reply
            except asyncio.InvalidStateError:
                pass
            if ack_every and sc.deliveries - state["acked"] >= ack_every:
                c.transport.write(ack_frame(1, sc.last_delivery_tag))
                state["acked"] = sc.deliveries
        return c
    args = orjson.loads(opts.consumer_args) if opts.consumer_args else {}
    total = getattr(opts, "total_consumers", None) or opts.consumers
    for q in consumer_queues(opts, index, total):
        await c.call(1, 60, 20, (0, q, "", False, not ack_every, False, False, args), (60, 21))
    while time.monotonic() < deadline and not c.closed.done():
        if opts.cmessages and sc.deliveries >= opts.cmessages:
            break
        await asyncio.sleep(0.05)
    return c


def message_body(size):
    """LavinMQ's lavinmqperf body: a fixed letter pattern that -V checks."""
    return bytes((i % 27 + 64) for i in range(size))


def rate(n, seconds):
    return int(n / seconds) if seconds > 0 else 0


async def run(opts, report=None):
    """report: a pipe to a parent lavinmqperf (--processes): counts go there
    every second instead of being printed, and the result at the end."""
    stats = Stats()
    if report is None:
        await setup(opts)
    deadline = time.monotonic() + (opts.time or 1e9)
    ids = getattr(opts, "consumer_ids", None) or range(opts.consumers)
    tasks = [asyncio.ensure_future(consumer(opts, stats, deadline, i)) for i in ids]
    await asyncio.sleep(0.1 if opts.consumers else 0)
    tasks += [asyncio.ensure_future(publisher(opts, stats, deadline)) for _ in range(opts.publishers)]
    start = time.monotonic()
    last_t, last_p, last_c = start, 0, 0
    while not all(t.done() for t in tasks):
        await asyncio.sleep(1)
        now = time.monotonic()
        p, c = stats.pub_count(), stats.con_count()
        if report is not None:
            report.send(("counts", p, c))
        elif not opts.quiet and not opts.json:
            print(f"Publish rate: {rate(p - last_p, now - last_t)} msgs/s "
                  f"Consume rate: {rate(c - last_c, now - last_t)} msgs/s", flush=True)
        last_t, last_p, last_c = now, p, c
        if opts.consumers and opts.pmessages and not opts.cmessages and p >= opts.pmessages * opts.publishers \
                and c >= p:
            break
    elapsed = time.monotonic() - start
    clients = []
    for t in tasks:
        if t.done() and t.exception() is not None:
            raise t.exception()
        if t.done():
            clients.append(t.result())
        else:
            t.cancel()
    p, c = stats.pub_count(), stats.con_count()
    result = {
        "elapsed_seconds": round(elapsed, 3),
        "avg_pub_rate": rate(p, elapsed),
        "avg_consume_rate": rate(c, elapsed),
        "published": p,
        "consumed": c,
    }
    if report is not None:
        result["latency_samples"] = [s for c in stats.clients_con for s in c.scanner.latency_samples()]
        result["invalid_bodies"] = sum(c.scanner.bad_bodies for c in stats.clients_con)
        for cl in stats.clients_pub + stats.clients_con:
            try:
                await cl.close()
            except Exception:
                pass
        report.send(("result", result))
        return result
    if opts.measure_latency:
        result.update(latency_summary(stats.clients_con))
    if opts.verify:
        bad = sum(c.scanner.bad_bodies for c in stats.clients_con)
        result["invalid_bodies"] = bad
        if bad:
            raise RuntimeError(f"{bad} message bodies did not match what was published")
    for cl in stats.clients_pub + stats.clients_con:
        try:
            await cl.close()
        except Exception:
            pass
    print_summary(opts, result)
    return result


def print_summary(opts, result):
    if opts.json:
        print(orjson.dumps(result).decode())
        return
    print("Summary:")
    print(f"Average publish rate: {result['avg_pub_rate']} msgs/s")
    print(f"Average consume rate: {result['avg_consume_rate']} msgs/s")
    if opts.measure_latency:
        print(f"Latency p50: {result['latency_p50_ms']} ms p95: {result['latency_p95_ms']} ms "
              f"p99: {result['latency_p99_ms']} ms")


def latency_summary(consumers):
    samples = []
    for c in consumers:
        samples.extend(c.scanner.latency_samples())
    samples.sort()
    return _percentiles(samples)


def _child(opts, conn):
    import uvloop
    try:
        uvloop.run(run(opts, report=conn))
    except Exception as exc:
        conn.send(("error", str(exc)))


def run_processes(opts):
    """--processes N: the clients are shared out over N forked workers (one
    Python process cannot both publish and consume at full speed); their
    counts are summed here."""
    import copy
    import multiprocessing
    import uvloop
    uvloop.run(setup(opts))
    ctx = multiprocessing.get_context("fork")
    workers = []
    # deal the clients out one by one, so 1 publisher + 1 consumer get a process each
    roles = ["publishers"] * opts.publishers + ["consumers"] * opts.consumers
    for i in range(opts.processes):
        sub = copy.copy(opts)
        mine = roles[i::opts.processes]
        sub.publishers = mine.count("publishers")
        sub.consumers = mine.count("consumers")
        # global consumer numbers, so that --queues spreads them as one process would
        sub.total_consumers = opts.consumers
        sub.consumer_ids = [roles[:k].count("consumers") for k in range(i, len(roles), opts.processes)
                            if roles[k] == "consumers"]
        if not sub.publishers and not sub.consumers:
            continue
        parent_end, child_end = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(sub, child_end), daemon=True)
        proc.start()
        workers.append((proc, parent_end, {"counts": (0, 0), "result": None}))
    start = last_t = time.monotonic()
    last_p = last_c = 0
    while any(w[2]["result"] is None for w in workers):
        time.sleep(1)
        for proc, pipe, state in workers:
            while state["result"] is None and pipe.poll():
                try:
                    kind, *payload = pipe.recv()
                except EOFError:
                    break       # the worker is gone: caught by the liveness check below
                if kind == "counts":
                    state["counts"] = tuple(payload)
                elif kind == "result":
                    state["result"] = payload[0]
                else:
                    raise RuntimeError(payload[0])
            if state["result"] is None and not proc.is_alive():
                raise RuntimeError("a lavinmqperf worker died")
        now = time.monotonic()
        p = sum(w[2]["counts"][0] for w in workers)
        c = sum(w[2]["counts"][1] for w in workers)
        if not opts.quiet and not opts.json:
            print(f"Publish rate: {rate(p - last_p, now - last_t)} msgs/s "
                  f"Consume rate: {rate(c - last_c, now - last_t)} msgs/s", flush=True)
        last_t, last_p, last_c = now, p, c
    results = [w[2]["result"] for w in workers]
    elapsed = max(r["elapsed_seconds"] for r in results)
    p, c = sum(r["published"] for r in results), sum(r["consumed"] for r in results)
    result = {"elapsed_seconds": elapsed, "avg_pub_rate": rate(p, elapsed),
              "avg_consume_rate": rate(c, elapsed), "published": p, "consumed": c,
              "processes": len(workers)}
    if opts.measure_latency:
        samples = sorted(s for r in results for s in r["latency_samples"])
        result.update(_percentiles(samples))
    bad = sum(r["invalid_bodies"] for r in results)
    if opts.verify:
        result["invalid_bodies"] = bad
    print_summary(opts, result)
    if bad:
        raise RuntimeError(f"{bad} message bodies did not match what was published")
    return result


def _percentiles(samples):
    if not samples:
        return {"latency_p50_ms": None, "latency_p95_ms": None, "latency_p99_ms": None}

    def pct(p):
        return round(samples[min(len(samples) - 1, int(len(samples) * p))] / 1e6, 3)
    return {"latency_p50_ms": pct(0.50), "latency_p95_ms": pct(0.95), "latency_p99_ms": pct(0.99)}

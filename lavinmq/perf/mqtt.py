"""`lavinmqperf mqtt throughput`: MQTT publishers and subscribers on their
own connections, a rate line per second, a summary at the end; LavinMQ's
flags (-x -y -s -V --qos -t -r -R -j -z -q -C -D --random-bodies --retain
--clean-session -u). Packets are built and scanned in Cython
(lavinmq/perf/_mqttscan.pyx).

--inflight is ours: QoS 1/2 publishes a publisher may have unacknowledged.
1 (the default) waits for each PUBACK before the next publish, as
LavinMQ's lavinmqperf does; more pipelines them, as fast clients do."""
import argparse
import asyncio
import os
import ssl
import sys
import time
import urllib.parse

import orjson

from lavinmq.perf._mqttscan import PublishBatch, Scanner

DEFAULTS = argparse.ArgumentDefaultsHelpFormatter


def build_parser():
    p = argparse.ArgumentParser(prog="lavinmqperf mqtt", description="MQTT load generator")
    add_scenarios(p)
    return p


def add_scenarios(p):
    sub = p.add_subparsers(dest="scenario", metavar="SCENARIO", required=True)
    t = sub.add_parser("throughput", help="MQTT publish/subscribe throughput", formatter_class=DEFAULTS)
    t.add_argument("-u", "--uri", default="mqtt://guest:guest@127.0.0.1:1883",
                   help="broker: mqtt://, mqtts://, ws:// or wss://USER:PASS@HOST:PORT (user may be vhost:user)")
    t.add_argument("-x", "--publishers", type=int, default=1, help="publishing connections")
    t.add_argument("-y", "--consumers", type=int, default=1, help="subscribing connections")
    t.add_argument("-s", "--size", type=int, default=16, help="message body size in bytes")
    t.add_argument("-V", "--verify", action="store_true", help="check every body against what was published")
    t.add_argument("--qos", type=int, default=0, choices=(0, 1, 2), help="QoS of publishes and subscriptions")
    t.add_argument("-t", "--topic", default="perf-test", help="topic to publish to and subscribe to")
    t.add_argument("-r", "--rate", type=int, default=0, help="max publish rate per publisher (0: unlimited)")
    t.add_argument("-R", "--consumer-rate", type=int, default=0,
                   help="max consume rate per subscriber (0: unlimited; reading stops while over it)")
    t.add_argument("-j", "--json", action="store_true", help="print the summary as JSON")
    t.add_argument("-z", "--time", type=float, default=0, help="seconds to run (0: until -C/-D or ^C)")
    t.add_argument("-q", "--quiet", action="store_true", help="only the summary")
    t.add_argument("-C", "--pmessages", type=int, default=0, help="messages to publish in all (0: no limit)")
    t.add_argument("-D", "--cmessages", type=int, default=0, help="messages to consume in all (0: no limit)")
    t.add_argument("--random-bodies", action="store_true", help="a fresh random body for every batch")
    t.add_argument("--retain", action="store_true", help="set the retain flag on publishes")
    t.add_argument("--clean-session", action="store_true", help="connect with clean_session (default: persistent)")
    t.add_argument("--inflight", type=int, default=1,
                   help="QoS 1/2: unacknowledged publishes per publisher (1: one at a time, as LavinMQ's tool)")
    t.add_argument("--client-id-prefix", default="", help="prefix of the client ids publisher-N / consumer-N")
    t.add_argument("--processes", type=int, default=1,
                   help="share the publishers and subscribers over N load-generator processes")


def parse_uri(uri):
    u = urllib.parse.urlparse(uri)
    if u.scheme not in ("mqtt", "mqtts", "ws", "wss", "tcp", ""):
        raise ValueError(f"unsupported URI scheme {u.scheme!r} (mqtt://, mqtts://, ws://, wss://)")
    tls = u.scheme in ("mqtts", "wss")
    ws = u.scheme in ("ws", "wss")
    port = u.port or (8883 if u.scheme == "mqtts" else 1883 if not ws else 15671 if tls else 15672)
    return dict(host=u.hostname or "127.0.0.1", port=port, user=urllib.parse.unquote(u.username or "guest"),
                password=urllib.parse.unquote(u.password or "guest"), tls=tls, ws=ws, path=u.path or "/mqtt")


def connect_packet(client_id, user, password, clean):
    def s(b):
        return len(b).to_bytes(2, "big") + b
    flags = 0xc0 | (0x02 if clean else 0)
    body = s(b"MQTT") + bytes((4, flags)) + b"\x00\x00" + s(client_id.encode()) + s(user.encode()) + \
        s(password.encode())
    return bytes((0x10,)) + varint(len(body)) + body


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


class MQTTClient(asyncio.Protocol):
    """A raw MQTT connection: the Scanner counts what matters, the control
    packets (CONNACK, SUBACK) resolve waiters."""

    def __init__(self):
        self.scanner = Scanner()
        self.transport = None
        self.waiting = {}           # packet type -> future
        self.closed = asyncio.get_running_loop().create_future()
        self.progress = None        # an Event set after every read
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.paused_reading = False

    @classmethod
    async def connect(cls, target, client_id, clean):
        loop = asyncio.get_running_loop()
        ctx = None
        if target["tls"]:
            ctx = ssl.create_default_context()
            if os.environ.get("LAVINMQPERF_INSECURE"):
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
        if target["ws"]:
            from lavinmq.perf.mqtt_ws import open_websocket
            _, self = await open_websocket(cls, target, ctx)
        else:
            _, self = await loop.create_connection(cls, target["host"], target["port"], ssl=ctx)
        fut = self.expect(2)
        self.transport.write(connect_packet(client_id, target["user"], target["password"], clean))
        try:
            first, body = await asyncio.wait_for(fut, 30)
        except TimeoutError:
            raise ConnectionError(f"no CONNACK for {client_id} within 30 s") from None
        if body[1] != 0:
            raise ConnectionError(f"CONNACK return code {body[1]} for {client_id}")
        return self

    def expect(self, packet_type):
        fut = asyncio.get_running_loop().create_future()
        self.waiting[packet_type] = fut
        return fut

    async def subscribe(self, topic, qos):
        fut = self.expect(9)
        t = topic.encode()
        body = b"\x00\x01" + len(t).to_bytes(2, "big") + t + bytes((qos,))
        self.transport.write(bytes((0x82,)) + varint(len(body)) + body)
        _, body = await asyncio.wait_for(fut, 10)
        if body[2] == 0x80:
            raise ConnectionError(f"SUBSCRIBE {topic} refused")

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        for first, body in self.scanner.feed(data):
            fut = self.waiting.pop(first >> 4, None)
            if fut is not None and not fut.done():
                fut.set_result((first, body))
        replies = self.scanner.take_replies()
        if replies:
            self.transport.write(replies)
        if self.progress is not None:
            self.progress.set()

    def pause_writing(self):
        self.can_write.clear()

    def resume_writing(self):
        self.can_write.set()

    def connection_lost(self, exc):
        if not self.closed.done():
            self.closed.set_result(exc)
        self.can_write.set()
        if self.progress is not None:
            self.progress.set()

    def disconnect(self):
        if self.transport is not None and not self.transport.is_closing():
            if self.transport.get_write_buffer_size():
                self.transport.abort()      # still full of publishes nobody reads: no DISCONNECT behind them
            else:
                self.transport.write(b"\xe0\x00")
                self.transport.close()


class Run:
    def __init__(self, opts):
        self.opts = opts
        self.target = parse_uri(opts.uri)
        self.pubs = []
        self.subs = []
        self.published = 0          # by publishers that are gone
        self.stop = asyncio.Event()

    def pub_count(self):
        return self.published + sum(c.sent for c in self.pubs)

    def con_count(self):
        return sum(c.scanner.publishes for c in self.subs)

    async def subscriber(self, i):
        o = self.opts
        c = await MQTTClient.connect(self.target, f"{o.client_id_prefix}consumer-{i}", o.clean_session)
        if o.verify:
            c.scanner.expected_body = message_body(o.size)
        await c.subscribe(o.topic, o.qos)
        self.subs.append(c)
        return c

    async def publisher(self, i, deadline):
        o = self.opts
        c = await MQTTClient.connect(self.target, f"{o.client_id_prefix}publisher-{i}", o.clean_session)
        c.sent = 0
        self.pubs.append(c)
        body = message_body(o.size)
        batch = PublishBatch(o.topic.encode(), body, o.qos, o.retain)
        per_write = max(1, min(1000, 65536 // batch.packet_size))
        if o.qos:
            per_write = min(per_write, max(1, o.inflight))
        c.progress = asyncio.Event()
        started = time.monotonic()
        limit = o.pmessages
        try:
            while not self.stop.is_set() and time.monotonic() < deadline and not c.closed.done():
                n = per_write
                if limit:
                    n = min(n, limit - self.pub_count())
                    if n <= 0:
                        break
                if o.rate:
                    due = int((time.monotonic() - started) * o.rate) - c.sent
                    if due <= 0:
                        await asyncio.sleep(0.001)
                        continue
                    n = min(n, due)
                if o.qos:
                    room = o.inflight - (c.sent - c.scanner.acks)
                    if room <= 0:
                        c.progress.clear()
                        await c.progress.wait()
                        continue
                    n = min(n, room)
                if o.random_bodies:
                    batch.set_body(os.urandom(o.size))
                c.transport.write(batch.take(n))
                c.sent += n
                if not c.can_write.is_set():
                    # the broker is not reading us (flow control): wait, but not past the end
                    try:
                        await asyncio.wait_for(c.can_write.wait(), max(0.01, min(1, deadline - time.monotonic())))
                    except TimeoutError:
                        pass
                elif o.qos == 0:
                    await asyncio.sleep(0)
            if o.qos:
                # what is sent is done when acknowledged
                while c.scanner.acks < c.sent and not c.closed.done() and time.monotonic() < deadline + 5:
                    c.progress.clear()
                    try:
                        await asyncio.wait_for(c.progress.wait(), 1)
                    except TimeoutError:
                        pass
        finally:
            c.disconnect()


async def limit_rate(sub, rate):
    """-R: the subscriber's socket is not read while it is ahead of rate."""
    started = time.monotonic()
    while True:
        await asyncio.sleep(0.01)
        ahead = sub.scanner.publishes > (time.monotonic() - started) * rate
        if ahead and not sub.paused_reading:
            sub.transport.pause_reading()
            sub.paused_reading = True
        elif not ahead and sub.paused_reading:
            sub.transport.resume_reading()
            sub.paused_reading = False


def message_body(size):
    return (bytes(range(65, 91)) * (size // 26 + 1))[:size]


async def run_clients(opts, tick=None, told_to_stop=None, ready=None):
    """Run the subscribers and publishers of opts; tick(published, consumed)
    once a second; told_to_stop() ends a worker that has only subscribers.
    -> the counts and the elapsed time."""
    run = Run(opts)
    o = opts
    subs = [await run.subscriber(i) for i in range(o.consumers)]
    limiters = [asyncio.create_task(limit_rate(s, o.consumer_rate)) for s in subs] if o.consumer_rate else []
    if ready is not None:
        ready()
    deadline = time.monotonic() + (o.time if o.time else 1e9)
    tasks = [asyncio.create_task(run.publisher(i + getattr(o, "first_publisher", 0), deadline))
             for i in range(o.publishers)]
    started = time.monotonic()
    try:
        while True:
            await asyncio.sleep(min(1, max(0.01, deadline - time.monotonic())))
            now = time.monotonic()
            p, c = run.pub_count(), run.con_count()
            if tick is not None:
                tick(p, c)
            if now >= deadline:
                break
            if o.cmessages and c >= o.cmessages:
                break
            for t in tasks:
                if t.done() and t.exception() is not None:
                    raise t.exception()
            if tasks and all(t.done() for t in tasks) and (not subs or c >= p or o.qos == 0):
                break
            if told_to_stop is not None and told_to_stop():
                break
    finally:
        run.stop.set()
        ended = time.monotonic()
        for t in limiters:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in subs:
            s.disconnect()
    return {"elapsed": ended - started, "published": run.pub_count(), "consumed": run.con_count(),
            "bad_bodies": sum(s.scanner.bad_bodies for s in subs)}


def summary(opts, elapsed, p, c, bad):
    result = {"elapsed_seconds": round(elapsed, 3), "avg_pub_rate": round(p / elapsed, 1),
              "avg_consume_rate": round(c / elapsed, 1), "total_published": p, "total_consumed": c}
    if opts.verify:
        result["bad_bodies"] = bad
    if opts.json:
        print(orjson.dumps(result).decode())
    else:
        print("\nSummary:")
        print(f"Average publish rate: {result['avg_pub_rate']} msgs/s")
        print(f"Average consume rate: {result['avg_consume_rate']} msgs/s")
        print(f"Total published: {p}")
        print(f"Total consumed: {c}")
        if opts.verify:
            print(f"Bodies that differ: {bad}")
    return result


class RateLine:
    def __init__(self, opts):
        self.quiet = opts.quiet
        self.last = (time.monotonic(), 0, 0)

    def __call__(self, p, c):
        now = time.monotonic()
        t0, p0, c0 = self.last
        if not self.quiet and now > t0:
            print(f"Publish rate: {int((p - p0) / (now - t0))} msgs/s Consume rate: {int((c - c0) / (now - t0))} "
                  f"msgs/s", flush=True)
        self.last = (now, p, c)


async def throughput(opts):
    r = await run_clients(opts, RateLine(opts))
    return summary(opts, r["elapsed"], r["published"], r["consumed"], r["bad_bodies"])


def run_processes(opts):
    """--processes N: subscribers and publishers dealt out over N forked
    workers (one Python process cannot publish and consume at full speed,
    nor drive 1,000 publishers and a subscriber); counts summed here."""
    import copy
    import multiprocessing
    import uvloop
    ctx = multiprocessing.get_context("fork")
    workers = []
    # subscribers and publishers in processes of their own (a subscriber next
    # to many publishers would be starved by its own load generator)
    n = opts.processes
    k = max(1, n // 2) if opts.consumers and opts.publishers else (n if opts.consumers else 0)
    first_pub = 0

    def spawn(i, sub):
        parent_end, child_end = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(sub, child_end), daemon=True)
        proc.start()
        workers.append((proc, parent_end, {"counts": (0, 0), "result": None}, sub.publishers > 0))

    for i in range(k):
        sub = copy.copy(opts)
        sub.consumers, sub.publishers = len(range(i, opts.consumers, k)), 0
        sub.client_id_prefix = f"{opts.client_id_prefix}w{i}-"
        if sub.consumers:
            spawn(i, sub)
    for _, pipe, _, _ in workers:
        # the subscribers are in place before anything is published
        kind, payload = pipe.recv()
        if kind == "error":
            raise RuntimeError(payload)
    for i in range(k, n):
        sub = copy.copy(opts)
        sub.consumers, sub.publishers = 0, len(range(i - k, opts.publishers, n - k))
        sub.first_publisher = first_pub
        sub.client_id_prefix = f"{opts.client_id_prefix}w{i}-"
        first_pub += sub.publishers
        if sub.publishers:
            spawn(i, sub)
    line = RateLine(opts)
    still = None
    while any(w[2]["result"] is None for w in workers):
        time.sleep(1)
        for proc, pipe, state, _ in workers:
            while state["result"] is None and pipe.poll():
                kind, payload = pipe.recv()
                if kind == "error":
                    raise RuntimeError(payload)
                state["counts" if kind == "counts" else "result"] = payload
            if state["result"] is None and not proc.is_alive():
                raise RuntimeError("a lavinmqperf worker died")
        p, c = sum(w[2]["counts"][0] for w in workers), sum(w[2]["counts"][1] for w in workers)
        line(p, c)
        # the publishers are done: the subscribers' workers stop once nothing more arrives
        publishing = [w for w in workers if w[3] and w[2]["result"] is None]
        if not publishing:
            if still == c or (opts.pmessages and opts.qos and c >= opts.pmessages * opts.consumers):
                for proc, pipe, state, _ in workers:
                    if state["result"] is None:
                        pipe.send("stop")
            still = c
    results = [w[2]["result"] for w in workers]
    return summary(opts, max(r["elapsed"] for r in results), sum(r["published"] for r in results),
                   sum(r["consumed"] for r in results), sum(r["bad_bodies"] for r in results))


def _child(opts, pipe):
    import uvloop
    try:
        r = uvloop.run(run_clients(opts, lambda p, c: pipe.send(("counts", (p, c))),
                                   lambda: pipe.poll() and pipe.recv() == "stop",
                                   lambda: pipe.send(("ready", None)) if opts.consumers else None))
        pipe.send(("result", r))
    except Exception as exc:
        pipe.send(("error", str(exc) or type(exc).__name__))


def main(argv):
    opts = build_parser().parse_args(argv)
    try:
        parse_uri(opts.uri)
    except ValueError as exc:
        print(f"lavinmqperf mqtt: error: {exc}", file=sys.stderr)
        return 2
    import uvloop
    try:
        result = run_processes(opts) if opts.processes > 1 else uvloop.run(throughput(opts))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        print(f"lavinmqperf mqtt: error: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    return 1 if result.get("bad_bodies") else 0

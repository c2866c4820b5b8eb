"""lavinmqperf churn and count scenarios: how fast the control plane
handles connections, channels, queues, bindings and consumers, and how much
memory the broker holds for many of them."""
import asyncio
import os
import time
import uuid

from lavinmq.perf.client import Client, parse_uri


def find_listener_pid(port):
    """The pid of the local process listening on the TCP port, or None.
    Reads /proc: works for a broker on this machine run by the same user
    (or as root)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, state, inode = parts[1], parts[3], parts[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except OSError:
            continue
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None


class Rate:
    """Counts operations and prints a rate line per second."""

    def __init__(self, what, quiet=False):
        self.what = what
        self.quiet = quiet
        self.count = 0
        self.start = self.last_t = time.monotonic()
        self.last_n = 0

    def tick(self, n=1):
        self.count += n
        now = time.monotonic()
        if now - self.last_t >= 1:
            if not self.quiet:
                print(f"{self.what}: {int((self.count - self.last_n) / (now - self.last_t))}/s", flush=True)
            self.last_t, self.last_n = now, self.count

    def summary(self):
        elapsed = time.monotonic() - self.start
        print(f"Average {self.what}: {int(self.count / elapsed) if elapsed else 0}/s ({self.count} in {elapsed:.1f}s)")


async def connection_churn(opts):
    rate = Rate("connections", opts.quiet)
    deadline = time.monotonic() + opts.time
    while time.monotonic() < deadline:
        c = await Client.connect(opts.uri)
        await c.close()
        rate.tick()
    rate.summary()


async def channel_churn(opts):
    rate = Rate("channels", opts.quiet)
    c = await Client.connect(opts.uri)
    deadline = time.monotonic() + opts.time
    while time.monotonic() < deadline:
        await c.open_channel(1)
        await c.call(1, 20, 40, (200, "", 0, 0), (20, 41))
        rate.tick()
    await c.close()
    rate.summary()


async def queue_churn(opts):
    rate = Rate("queues", opts.quiet)
    c = await Client.connect(opts.uri)
    await c.open_channel(1)
    deadline = time.monotonic() + opts.time
    while time.monotonic() < deadline:
        name = "churn-" + uuid.uuid4().hex[:12]
        await c.call(1, 50, 10, (0, name, False, opts.durable, False, False, False, {}), (50, 11))
        await c.call(1, 50, 40, (0, name, False, False, False), (50, 41))
        rate.tick()
    await c.close()
    rate.summary()


async def bind_churn(opts):
    rate = Rate("bindings", opts.quiet)
    c = await Client.connect(opts.uri)
    await c.open_channel(1)
    q = "bind-churn-" + uuid.uuid4().hex[:8]
    await c.call(1, 50, 10, (0, q, False, False, False, True, False, {}), (50, 11))
    deadline = time.monotonic() + opts.time
    i = 0
    while time.monotonic() < deadline:
        i += 1
        await c.call(1, 50, 20, (0, q, "amq.direct", f"key-{i}", False, {}), (50, 21))
        await c.call(1, 50, 50, (0, q, "amq.direct", f"key-{i}", {}), (50, 51))
        rate.tick(2)
    await c.close()
    rate.summary()


async def consumer_churn(opts):
    rate = Rate("consumers", opts.quiet)
    c = await Client.connect(opts.uri)
    await c.open_channel(1)
    q = "consumer-churn-" + uuid.uuid4().hex[:8]
    await c.call(1, 50, 10, (0, q, False, False, False, False, False, {}), (50, 11))
    deadline = time.monotonic() + opts.time
    while time.monotonic() < deadline:
        ok = await c.call(1, 60, 20, (0, q, "", False, False, False, False, {}), (60, 21))
        await c.call(1, 60, 30, (ok[0], False), (60, 31))
        rate.tick()
    await c.call(1, 50, 40, (0, q, False, False, False), (50, 41))
    await c.close()
    rate.summary()


def broker_pid(opts):
    if opts.pid:
        return opts.pid
    return find_listener_pid(parse_uri(opts.uri)[1])


async def connection_count(opts):
    pid = broker_pid(opts)
    before = rss_mb(pid) if pid else None
    clients = []
    started = time.monotonic()
    for i in range(opts.count):
        c = await Client.connect(opts.uri)
        await c.open_channel(1)
        clients.append(c)
        if (i + 1) % opts.report_every == 0 or i + 1 == opts.count:
            print(f"{i + 1} connections, broker RSS {_mb(rss_mb(pid) if pid else None)}", flush=True)
    elapsed = time.monotonic() - started
    after = rss_mb(pid) if pid else None
    print(f"Summary: {opts.count} connections with a channel in {elapsed:.1f}s; broker RSS "
          f"{_mb(before)} -> {_mb(after)}")
    await asyncio.sleep(opts.hold)
    for c in clients:
        await c.close()


async def queue_count(opts):
    pid = broker_pid(opts)
    before = rss_mb(pid) if pid else None
    c = await Client.connect(opts.uri)
    await c.open_channel(1)
    prefix = "count-" + uuid.uuid4().hex[:6]
    started = time.monotonic()
    # pipelined declares in windows: a round trip per queue would measure latency, not the broker
    window = 100
    for start in range(0, opts.count, window):
        futs = []
        for i in range(start, min(start + window, opts.count)):
            futs.append(c.wait(1, (50, 11)))
            c.send(1, 50, 10, (0, f"{prefix}-{i}", False, opts.durable, False, False, False, {}))
        await asyncio.gather(*futs)
        done = min(start + window, opts.count)
        if done % opts.report_every == 0 or done == opts.count:
            print(f"{done} queues, broker RSS {_mb(rss_mb(pid) if pid else None)}", flush=True)
    elapsed = time.monotonic() - started
    print(f"Summary: {opts.count} {'durable ' if opts.durable else ''}queues in {elapsed:.1f}s "
          f"({int(opts.count / elapsed)}/s); broker RSS {_mb(before)} -> {_mb(rss_mb(pid) if pid else None)}")
    if opts.delete:
        for start in range(0, opts.count, window):
            futs = []
            for i in range(start, min(start + window, opts.count)):
                futs.append(c.wait(1, (50, 41)))
                c.send(1, 50, 40, (0, f"{prefix}-{i}", False, False, False))
            await asyncio.gather(*futs)
    await c.close()


def _mb(v):
    return "?" if v is None else f"{v:.0f} MB"


SCENARIOS = {
    "connection-churn": connection_churn,
    "channel-churn": channel_churn,
    "queue-churn": queue_churn,
    "bind-churn": bind_churn,
    "consumer-churn": consumer_churn,
    "connection-count": connection_count,
    "queue-count": queue_count,
}

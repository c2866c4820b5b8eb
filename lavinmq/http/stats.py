"""Rates and rate history for the API's `*_details` (`rate`, and the
`samples` that the lengths_age/msg_rates_age parameters ask for).

Every stats_interval the sampler reads each object's counters (plain
integers the hot path increments; nothing happens per message) into a
fixed-size ring buffer per object: [main] stats_log_size slots (120,
RING, by default) of one unsigned integer per field. Counters (publish, ack, ...) are stored as the increase since the
previous sample, gauges (messages_ready, ...) as their value, so a queue's
ring is 120 x 7 fields x 4 bytes = 3,360 bytes by default. A ring is only allocated
once the object shows activity, and given back after a whole window of
none: an idle empty queue costs a small Series record and no ring.

Besides the rings, each sample keeps the last interval's rates of the
counters that have no history (RabbitMQ's deliver_no_ack, get_empty,
confirm, returns, churn, node gauges ...) in EXTRA, and when each object
was last active (churn.IDLE_SINCE, the API's idle_since).
"""
import array
import asyncio
import os
import time

from lavinmq import churn
from lavinmq.process import open_fds, resident_memory

RING = 120        # samples kept per object by default: [main] stats_log_size (LavinMQ's: 10 min at 5 s)


class Kind:
    """The fields sampled for one kind of object: `counters` leading
    counter fields, then gauges."""

    def __init__(self, fields, counters, getter, typecode="I"):
        self.fields = fields
        self.counters = counters
        self.getter = getter
        self.index = {f: i for i, f in enumerate(fields)}
        self.typecode = typecode
        self.cap = 2 ** (8 * array.array(typecode).itemsize) - 1
        self.zeros = (0,) * len(fields)


def _queue_values(q):
    return (q.publish_count, q.deliver_count, q.get_count, q.ack_count, q.redeliver_count,
            q.message_count, q.unacked_count)


QUEUE = Kind(("publish", "deliver", "get", "ack", "redeliver", "messages_ready", "messages_unacknowledged"),
             5, _queue_values)
# vhosts and the whole broker: sums of their queues
AGGREGATE = Kind(QUEUE.fields, 5, None)
EXCHANGE = Kind(("publish_in", "publish_out"), 2, lambda ex: (ex.publish_in_count, ex.publish_out_count))
CHANNEL = Kind(("publish", "deliver", "ack"), 3, lambda ch: (ch.publish_count, ch.deliver_count, ch.ack_count))
# bytes per interval can pass 2**32 on a fast link: 8-byte slots
CONNECTION = Kind(("send_oct", "recv_oct"), 2, lambda c: (c.state.send_oct, c.state.recv_oct), "Q")

# fields the API shows that are sums of sampled ones
DERIVED = {"deliver_get": ("deliver", "get"), "messages": ("messages_ready", "messages_unacknowledged")}


class Series:
    """One object's history. `last` holds the latest sampled values;
    `ring` (or None while idle) the per-tick increases and gauges."""
    __slots__ = ("obj", "kind", "last", "ring", "born", "active")

    def __init__(self, obj, kind, tick, size=RING):
        self.obj = obj
        self.kind = kind
        self.last = kind.zeros      # counters start at zero when an object is created
        self.ring = None
        self.born = tick
        self.active = tick - size

    def nbytes(self):
        return 0 if self.ring is None else self.ring.itemsize * len(self.ring)


# the running sampler, for shapes.py's rates_for()
_sampler = None


# key -> {counter: rate over the last interval}, for the counters without a ring
EXTRA = {}


def rates_for(key):
    """{field: per-second rate over the last interval} of the object
    sampled under key (id(obj), ("vhost", name), "overall", "churn",
    "node"), or None."""
    extra = EXTRA.get(key)
    s = _sampler.series.get(key) if _sampler is not None else None
    if s is None:
        return extra
    out = dict(extra) if extra else {}
    out.update(_sampler.rates(s))
    return out


def queue_message_stats(q):
    deliver_no_ack = q.deliver_no_ack_count
    get_no_ack = q.get_no_ack_count
    return {"publish": q.publish_count, "deliver": q.deliver_count - deliver_no_ack,
            "deliver_no_ack": deliver_no_ack, "get": q.get_count - get_no_ack, "get_no_ack": get_no_ack,
            "get_empty": q.get_empty_count, "deliver_get": q.deliver_count + q.get_count,
            "ack": q.ack_count, "redeliver": q.redeliver_count}


def queue_counters(q):
    out = queue_message_stats(q)
    out.update({"disk_writes": out["publish"], "disk_reads": out["deliver_get"],
                "messages_ready": q.message_count, "messages_unacknowledged": q.unacked_count,
                "messages": q.message_count + q.unacked_count})
    return out


# the counters of a queue that has never published, delivered or held a
# message: such a queue has no entry in a sample; this stands for it when
# it first shows activity
QUIET = dict.fromkeys(("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty", "deliver_get",
                       "ack", "redeliver", "disk_writes", "disk_reads", "messages_ready",
                       "messages_unacknowledged", "messages"), 0)


def is_quiet(q):
    return not (q.publish_count or q.deliver_count or q.get_count or q.get_empty_count or q.ack_count
                or q.redeliver_count or q.message_count or q.unacked_count)


def sum_counters(dicts):
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def node_gauges(server):
    st = os.statvfs(server.data_dir)
    return {"disk_free": st.f_bavail * st.f_frsize, "fd_used": open_fds(),
            "mem_used": resident_memory(), "sockets_used": server.guard.total}


def series_for(key, obj=None):
    if _sampler is None:
        return None
    s = _sampler.series.get(key)
    if s is None or (obj is not None and s.obj is not obj):
        return None
    return s


def sampler():
    return _sampler


class Sampler:
    def __init__(self, server, interval_ms, size=RING):
        global _sampler
        self.server = server
        self.interval = max(interval_ms, 100) / 1000
        self.size = size            # samples kept: stats_log_size
        self.tick = -1
        self.times = array.array("d", bytes(8 * size))     # wall-clock ms of each tick's slot
        self.series = {}
        self.task = None
        self.prev = {}          # key -> (time, counters) of the extra counters
        self.prev_time = None   # when the last sample was taken
        _sampler = self

    def start(self):
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self):
        if self.task:
            self.task.cancel()

    async def _run(self):
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            # how late the loop got to us: what RabbitMQ's run_queue tells about its schedulers
            churn.LOOP_LAG_MS = max(0, int((loop.time() - due) * 1000))
            self.sample()
            self.sample_extra()

    def sample(self):
        self.tick += 1
        tick = self.tick
        self.times[tick % self.size] = time.time() * 1000
        old, new = self.series, {}
        record = self._record
        zeros = QUEUE.zeros
        overall = [0] * len(AGGREGATE.fields)
        for vhost in self.server.vhosts.values():
            totals = [0] * len(AGGREGATE.fields)
            for q in vhost.queues.values():
                values = _queue_values(q)
                s = old.get(id(q))
                if s is None or s.obj is not q:
                    if values == zeros:         # never active: no Series (100k idle queues cost nothing)
                        continue
                    s = Series(q, QUEUE, tick, self.size)
                new[id(q)] = s
                record(s, values)
                for i, v in enumerate(values):
                    totals[i] += v
            for ex in vhost.exchanges.values():
                self._track(old, new, ex, EXCHANGE)
            key = ("vhost", vhost.name)
            s = old.get(key)
            if s is None:
                s = Series(key, AGGREGATE, tick, self.size)
            new[key] = s
            record(s, tuple(totals))
            for i, v in enumerate(totals):
                overall[i] += v
        for conn in list(self.server.connections):
            self._track(old, new, conn, CONNECTION)
            for ch in conn.open_channels():
                self._track(old, new, ch, CHANNEL)
        s = old.get("overall") or Series("overall", AGGREGATE, tick, self.size)
        new["overall"] = s
        record(s, tuple(overall))
        self.series = new

    def sample_extra(self):
        """The last interval's rates of every counter, and idle_since."""
        now = time.monotonic()
        current = {}
        for vhost in self.server.vhosts.values():
            per_vhost = []
            for q in vhost.queues.values():
                if is_quiet(q):
                    continue        # no entry at all: 100,000 idle queues cost nothing here
                c = queue_counters(q)
                current[id(q)] = c
                if id(q) not in self.prev and self.prev_time is not None:
                    # it was quiet (or did not exist) at the last sample: every counter was 0
                    self.prev[id(q)] = (self.prev_time, QUIET)
                per_vhost.append(c)
            for ex in vhost.exchanges.values():
                current[id(ex)] = {"publish_in": ex.publish_in_count, "publish_out": ex.publish_out_count}
            agg = sum_counters(per_vhost)
            current[("vhost", vhost.name)] = agg
        for conn in list(self.server.connections):
            st = conn.state
            current[id(conn)] = {"send_oct": st.send_oct, "recv_oct": st.recv_oct}
            for ch in conn.open_channels():
                current[id(ch)] = {"publish": ch.publish_count, "deliver": ch.deliver_count,
                                   "ack": ch.ack_count, "confirm": ch.confirmed_seq,
                                   "return_unroutable": ch.return_unroutable_count,
                                   "drop_unroutable": ch.drop_unroutable_count}
                agg = current.get(("vhost", conn.vhost.name)) if conn.vhost is not None else None
                if agg is not None:
                    for k in ("confirm", "return_unroutable", "drop_unroutable"):
                        agg[k] = agg.get(k, 0) + current[id(ch)][k]
        current["overall"] = sum_counters([current[("vhost", v)] for v in self.server.vhosts])
        current["churn"] = dict(churn.COUNTS)
        current["node"] = node_gauges(self.server)
        for vhost in self.server.vhosts.values():
            io = current[("vhost", vhost.name)]
            io["recv_oct"] = io["send_oct"] = 0
        for conn in list(self.server.connections):
            if conn.vhost is not None and ("vhost", conn.vhost.name) in current:
                io = current[("vhost", conn.vhost.name)]
                io["recv_oct"] += conn.state.recv_oct
                io["send_oct"] += conn.state.send_oct
        rates = {}
        for key, counters in current.items():
            prev = self.prev.get(key)
            if prev is None:
                continue
            dt = now - prev[0]
            if dt > 0:
                rates[key] = {k: (v - prev[1].get(k, 0)) / dt for k, v in counters.items()}
        EXTRA.clear()
        EXTRA.update(rates)
        wall = time.time()
        for key, counters in current.items():
            if not isinstance(key, int):
                continue
            prev = self.prev.get(key)
            if prev is None or prev[1] != counters:
                churn.IDLE_SINCE.pop(key, None)          # active since the last sample
            elif key not in churn.IDLE_SINCE:
                churn.IDLE_SINCE[key] = wall - (now - prev[0])
        for key in [k for k in churn.IDLE_SINCE if k not in current]:
            del churn.IDLE_SINCE[key]
        self.prev = {key: (now, counters) for key, counters in current.items()}
        self.prev_time = now

    def _track(self, old, new, obj, kind):
        s = old.get(id(obj))
        if s is None or s.obj is not obj:
            s = Series(obj, kind, self.tick, self.size)
        new[id(obj)] = s
        self._record(s, kind.getter(obj))

    def _record(self, s, values):
        tick = self.tick
        kind = s.kind
        last, s.last = s.last, values
        nc = kind.counters
        active = values[:nc] != last[:nc] or any(values[nc:])
        if active:
            s.active = tick
        ring = s.ring
        if ring is None:
            if not active:
                return
            ring = s.ring = array.array(kind.typecode,
                                        bytes(self.size * len(values) * array.array(kind.typecode).itemsize))
        elif tick - s.active >= self.size:      # a whole window without activity: give the memory back
            s.ring = None
            return
        cap = kind.cap
        base = (tick % self.size) * len(values)
        for i in range(nc):
            d = values[i] - last[i]         # negative when an aggregate lost a queue
            ring[base + i] = cap if d > cap else (d if d > 0 else 0)
        for i in range(nc, len(values)):
            v = values[i]
            ring[base + i] = cap if v > cap else (v if v > 0 else 0)

    # -- reading ---------------------------------------------------------------

    def _value(self, s, i, tick):
        """field i's ring value at tick (0 while the ring is absent)."""
        if s.ring is None:
            return 0
        return s.ring[(tick % self.size) * len(s.kind.fields) + i]

    def rates(self, s):
        tick = self.tick
        kind = s.kind
        out = {f: 0.0 for f in kind.fields}
        if s.ring is not None and tick >= 1:
            dt = (self.times[tick % self.size] - self.times[(tick - 1) % self.size]) / 1000
            if dt > 0:
                nc = kind.counters
                for i, f in enumerate(kind.fields):
                    now = self._value(s, i, tick)
                    if i < nc:
                        out[f] = now / dt
                    else:
                        before = self._value(s, i, tick - 1) if tick - 1 >= s.born else 0
                        out[f] = (now - before) / dt
        for name, parts in DERIVED.items():
            if all(p in out for p in parts):
                out[name] = sum(out[p] for p in parts)
        return out

    def rate(self, s, field):
        """One field's rate, for sorting long lists without building dicts."""
        parts = DERIVED.get(field)
        if parts is not None:
            return sum(self.rate(s, p) for p in parts)
        i = s.kind.index.get(field)
        tick = self.tick
        if i is None or s.ring is None or tick < 1:
            return 0.0
        dt = (self.times[tick % self.size] - self.times[(tick - 1) % self.size]) / 1000
        if dt <= 0:
            return 0.0
        now = self._value(s, i, tick)
        if i < s.kind.counters:
            return now / dt
        before = self._value(s, i, tick - 1) if tick - 1 >= s.born else 0
        return (now - before) / dt

    def history(self, s, fields, timestamps):
        """{field: [value at each timestamp]} for wall-clock ms timestamps
        (newest first): the last sample taken at or before each, counters
        as running totals, as RabbitMQ's `samples`. Timestamps before the
        object's first sample, or older than the ring, are left out: the
        lists are of equal length, for the timestamps also returned."""
        tick = self.tick
        first = max(s.born, tick - self.size + 1, 0)
        if tick < first:
            return [], {f: [] for f in fields}
        kind = s.kind
        nf = len(kind.fields)
        # running totals of the counters at each tick in the window, newest first
        totals = {}
        for i in range(kind.counters):
            acc = s.last[i]
            col = {}
            for t in range(tick, first - 1, -1):
                col[t] = acc
                acc -= self._value(s, i, t)
            totals[i] = col
        picked_ts, picked_ticks = [], []
        t = tick
        for ts in timestamps:
            while t >= first and self.times[t % self.size] > ts:
                t -= 1
            if t < first:
                break
            picked_ts.append(ts)
            picked_ticks.append(t)
        out = {}
        for f in fields:
            parts = DERIVED.get(f, (f,))
            col = [0] * len(picked_ticks)
            for p in parts:
                i = kind.index[p]
                if i < kind.counters:
                    vals = totals[i]
                    for j, t in enumerate(picked_ticks):
                        col[j] += vals[t]
                elif s.ring is not None:
                    ring = s.ring
                    for j, t in enumerate(picked_ticks):
                        col[j] += ring[(t % self.size) * nf + i]
            out[f] = col
        return picked_ts, out

    def memory(self):
        """(objects tracked, bytes held in rings)"""
        return len(self.series), sum(s.nbytes() for s in self.series.values())

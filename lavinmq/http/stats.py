"""Rates for the API's `*_details.rate`: every stats_interval the sampler
reads each object's counters (plain integers the hot path increments) and
keeps counter/second since the previous sample. Nothing per message."""
import asyncio
import time

# key -> {counter: rate}; keys are id(obj) for queues, exchanges, channels and
# connections, ("vhost", name) and "overall" for aggregates
RATES = {}


def rates_for(key):
    return RATES.get(key)


def queue_counters(q):
    return {"publish": q.publish_count, "deliver": q.deliver_count, "get": q.get_count,
            "deliver_get": q.deliver_count + q.get_count, "ack": q.ack_count,
            "redeliver": q.redeliver_count, "messages_ready": q.message_count,
            "messages_unacknowledged": q.unacked_count, "messages": q.message_count + q.unacked_count}


def sum_counters(dicts):
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


class Sampler:
    def __init__(self, server, interval_ms):
        self.server = server
        self.interval = max(interval_ms, 100) / 1000
        self.prev = {}          # key -> (time, counters)
        self.task = None

    def start(self):
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self):
        if self.task:
            self.task.cancel()

    async def _run(self):
        while True:
            await asyncio.sleep(self.interval)
            self.sample()

    def sample(self):
        now = time.monotonic()
        current = {}
        overall = []
        for vhost in self.server.vhosts.values():
            per_vhost = []
            for q in vhost.queues.values():
                c = queue_counters(q)
                current[id(q)] = c
                per_vhost.append(c)
            for ex in vhost.exchanges.values():
                current[id(ex)] = {"publish_in": ex.publish_in_count, "publish_out": ex.publish_out_count}
            agg = sum_counters(per_vhost)
            current[("vhost", vhost.name)] = agg
            overall.append(agg)
        for conn in list(self.server.connections):
            st = conn.state
            current[id(conn)] = {"send_oct": st.send_oct, "recv_oct": st.recv_oct}
            for ch in conn.open_channels():
                if ch is not None:
                    current[id(ch)] = {"publish": ch.publish_count, "deliver": ch.deliver_count,
                                       "ack": ch.ack_count}
        current["overall"] = sum_counters(overall)
        rates = {}
        for key, counters in current.items():
            prev = self.prev.get(key)
            if prev is None:
                continue
            dt = now - prev[0]
            if dt > 0:
                rates[key] = {k: (v - prev[1].get(k, 0)) / dt for k, v in counters.items()}
        RATES.clear()
        RATES.update(rates)
        self.prev = {key: (now, counters) for key, counters in current.items()}

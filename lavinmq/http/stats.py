"""Rates for the API's `*_details.rate`: every stats_interval the sampler
reads each object's counters (plain integers the hot path increments) and
keeps counter/second since the previous sample. Nothing per message."""
import asyncio
import time

from lavinmq import churn

# key -> {counter: rate}; keys are id(obj) for queues, exchanges, channels and
# connections, ("vhost", name) and "overall" for aggregates
RATES = {}


def rates_for(key):
    return RATES.get(key)


def queue_counters(q):
    from lavinmq.http.compat import queue_message_stats
    out = queue_message_stats(q)
    out.update({"disk_writes": out["publish"], "disk_reads": out["deliver_get"],
                "messages_ready": q.message_count, "messages_unacknowledged": q.unacked_count,
                "messages": q.message_count + q.unacked_count})
    return out


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
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            # how late the loop got to us: what RabbitMQ's run_queue tells about its schedulers
            churn.LOOP_LAG_MS = max(0, int((loop.time() - due) * 1000))
            self.sample()

    def sample(self):
        now = time.monotonic()
        current = {}
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
        for conn in list(self.server.connections):
            st = conn.state
            current[id(conn)] = {"send_oct": st.send_oct, "recv_oct": st.recv_oct}
            for ch in conn.open_channels():
                if ch is not None:
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
        RATES.clear()
        RATES.update(rates)
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


def node_gauges(server):
    import os
    from lavinmq.http.runtime import rss_bytes
    st = os.statvfs(server.data_dir)
    return {"disk_free": st.f_bavail * st.f_frsize, "fd_used": len(os.listdir("/proc/self/fd")),
            "mem_used": rss_bytes(), "sockets_used": server.guard.total}

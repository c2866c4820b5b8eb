"""Prometheus text exposition with LavinMQ's metric names and labels, so
LavinMQ's Grafana dashboards work: /metrics (broker totals) and
/metrics/detailed?family=... (per queue, exchange, connection, channel,
vhost), `prefix=` (20 characters at most) and `vhost=` as LavinMQ takes
them. On the management port a user sees the vhosts it may access; the
metrics port is open and sees all."""
import asyncio
import os
import resource
import time

from aiohttp import web

import lavinmq
from lavinmq import churn, long_work
from lavinmq.clustering import status as cluster_status
from lavinmq.http.helpers import HTTPError, MONITORING, require

from lavinmq.process import open_fds, resident_memory

MAX_PREFIX = 20


def _esc(value):
    # names decoded with surrogateescape may hold bytes that are not UTF-8:
    # shown as \xNN, so the page stays UTF-8 (it was a 500)
    text = str(value).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Writer:
    def __init__(self, prefix):
        self.prefix = prefix
        self.lines = []

    def header(self, name, kind, help_):
        self.lines.append(f"# TYPE {self.prefix}_{name} {kind}")
        self.lines.append(f"# HELP {self.prefix}_{name} {help_}")

    def value(self, name, value, labels=None):
        lab = ", ".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) if labels else ""
        self.lines.append(f"{self.prefix}_{name}{{{lab}}} {value}" if lab else f"{self.prefix}_{name} {value}")

    def metric(self, name, kind, help_, value, labels=None):
        self.header(name, kind, help_)
        self.value(name, value, labels)

    def series(self, name, kind, help_, samples):
        self.header(name, kind, help_)
        for labels, value in samples:
            self.value(name, value, labels)

    def text(self):
        return "\n".join(self.lines) + "\n"


def _prefix(request):
    prefix = request.query.get("prefix", "lavinmq")
    if len(prefix.encode()) > MAX_PREFIX:
        raise HTTPError(400, "Prefix too long (max 20 characters)")
    if not prefix.replace("_", "a").isalnum() or not prefix.isascii() or prefix[0].isdigit():
        raise HTTPError(400, "Prefix must be a metric name: letters, digits and _")
    return prefix


def _vhosts(request):
    server = request.app["server"]
    user = request.get("user")
    vhosts = [v for n, v in server.vhosts.items()
              if user is None or user.is_administrator or "monitoring" in user.tags or user.can_access(n)]
    selected = request.query.getall("vhost", [])
    if len(selected) > MAX_VHOST_PARAMS:
        raise HTTPError(400, f"at most {MAX_VHOST_PARAMS} vhost parameters")
    if selected:
        selected = set(selected)
        vhosts = [v for v in vhosts if v.name in selected]
    return vhosts


def _connections(server, vhosts):
    return [c for c in list(server.connections) if c.vhost is not None and c.vhost in vhosts]


def _respond(w, started):
    telemetry = Writer("telemetry")
    telemetry.metric("scrape_duration_seconds", "gauge", "Duration for metrics collection in seconds",
                     round(time.monotonic() - started, 6))
    return web.Response(text=w.text() + telemetry.text(), content_type="text/plain",
                        headers={"X-Content-Type-Options": "nosniff"})


async def metrics(request):
    require(request, MONITORING)
    started = time.monotonic()
    server = request.app["server"]
    w = Writer(_prefix(request))
    vhosts = _vhosts(request)
    conns = _connections(server, vhosts)
    chans = [ch for c in conns for ch in c.open_channels()]
    queues = [q for v in vhosts for q in v.queues.values()]
    counts = churn.COUNTS
    w.metric("identity_info", "gauge", "System information", 1,
             {f"{w.prefix}_version": lavinmq.__version__, f"{w.prefix}_cluster": os.uname().nodename})
    for name, key, help_ in (("connections_opened_total", "connection_created", "Total number of connections opened"),
                             ("connections_closed_total", "connection_closed",
                              "Total number of connections closed or terminated"),
                             ("channels_opened_total", "channel_created", "Total number of channels opened"),
                             ("channels_closed_total", "channel_closed", "Total number of channels closed"),
                             ("queues_declared_total", "queue_declared", "Total number of queues declared"),
                             ("queues_deleted_total", "queue_deleted", "Total number of queues deleted")):
        w.metric(name, "counter", help_, counts[key])
    st = os.statvfs(server.data_dir)
    w.metric("process_open_fds", "gauge", "Open file descriptors", open_fds())
    w.metric("process_open_tcp_sockets", "gauge", "Open TCP sockets", server.guard.total)
    w.metric("process_resident_memory_bytes", "gauge", "Memory used in bytes", resident_memory())
    w.metric("disk_space_available_bytes", "gauge", "Disk space available in bytes", st.f_bavail * st.f_frsize)
    w.metric("process_max_fds", "gauge", "Open file descriptors limit",
             resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    from lavinmq.http.compat import memory_limit
    w.metric("resident_memory_limit_bytes", "gauge", "Memory high watermark in bytes", memory_limit(server))
    ready = sum(q.message_count for q in queues)
    unacked = sum(q.unacked_count for q in queues)
    w.metric("connections", "gauge", "Connections currently open", len(conns))
    w.metric("channels", "gauge", "Channels currently open", len(chans))
    w.metric("consumers", "gauge", "Consumers currently connected", sum(len(ch.consumers) for ch in chans))
    w.metric("queues", "gauge", "Queues available", len(queues))
    w.metric("bindings", "gauge", "Bindings currently configured",
             sum(v.binding_count() for v in vhosts))
    w.metric("queue_messages_ready", "gauge", "Messages ready to be delivered to consumers", ready)
    w.metric("queue_messages_unacked", "gauge", "Messages delivered to consumers but not yet acknowledged",
             unacked)
    w.metric("queue_messages", "gauge", "Sum of ready and unacknowledged messages - total queue depth",
             ready + unacked)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    w.metric("uptime", "counter", "Server uptime in seconds", int(time.monotonic() - server.started))
    w.metric("cpu_system_time_total", "counter", "Total CPU system time", round(usage.ru_stime, 3))
    w.metric("cpu_user_time_total", "counter", "Total CPU user time", round(usage.ru_utime, 3))
    cluster_status.metrics(server, w)
    delivered = sum(q.deliver_count + q.get_count for q in queues)
    w.metric("global_messages_delivered_total", "counter", "Total number of messaged delivered to consumers",
             delivered)
    w.metric("global_messages_redelivered_total", "counter", "Total number of messages redelivered to consumers",
             sum(q.redeliver_count for q in queues))
    w.metric("global_messages_acknowledged_total", "counter",
             "Total number of messages acknowledged by consumers", sum(q.ack_count for q in queues))
    w.metric("global_messages_confirmed_total", "counter", "Total number of messages confirmed to publishers",
             sum(ch.confirmed_seq for ch in chans))
    w.metric("disk_free_alarm", "gauge", "1 while publishers are blocked for low disk (free_disk_min)",
             int(server.disk_alarm))
    return _respond(w, started)


MAX_FAMILY_PARAMS = 32     # family= parameters in one request (there are 8 families)
MAX_VHOST_PARAMS = 1000
CHUNK_LINES = 200           # lines written (and the loop given a turn) at a time, at most
SLICE = 0.002               # seconds of writing lines between turns of the loop


async def detailed(request):
    """Each family at most once, however often it is named (60 repeats over
    10,000 queues built 164 MB in 8 s on the loop), written to the client in
    chunks with a yield between them: the work and the memory of one scrape
    are bounded by the objects there are, and never hold the loop long."""
    require(request, MONITORING)
    started = time.monotonic()
    server = request.app["server"]
    named = request.query.getall("family", [])
    if len(named) > MAX_FAMILY_PARAMS:
        raise HTTPError(400, f"at most {MAX_FAMILY_PARAMS} family parameters")
    prefix = _prefix(request)
    vhosts = _vhosts(request)
    # as LavinMQ: an unknown family adds nothing
    families = [FAMILIES[f] for f in dict.fromkeys(named) if f in FAMILIES]
    resp = web.StreamResponse(headers={"X-Content-Type-Options": "nosniff"})
    resp.content_type = "text/plain"
    resp.charset = "utf-8"
    await resp.prepare(request)
    w = StreamWriter(prefix, resp)
    with long_work.running():       # the fsync threads get the GIL between our slices
        for family in families:
            await family(w, server, vhosts)
    telemetry = Writer("telemetry")
    telemetry.metric("scrape_duration_seconds", "gauge", "Duration for metrics collection in seconds",
                     round(time.monotonic() - started, 6))
    w.w.lines.extend(telemetry.lines)
    await w.flush()
    await resp.write_eof()
    return resp


class StreamWriter:
    """Writer's lines, sent to the response every CHUNK_LINES lines or
    SLICE seconds, with a turn of the loop in between."""

    def __init__(self, prefix, resp):
        self.w = Writer(prefix)
        self.resp = resp
        self.deadline = time.perf_counter() + SLICE

    async def metric(self, name, kind, help_, value, labels=None):
        self.w.metric(name, kind, help_, value, labels)

    async def series(self, name, kind, help_, samples):
        w = self.w
        w.header(name, kind, help_)
        for labels, value in samples:
            w.value(name, value, labels() if callable(labels) else labels)
            if len(w.lines) >= CHUNK_LINES or time.perf_counter() > self.deadline:
                await self.flush()

    async def flush(self):
        if self.w.lines:
            text = "\n".join(self.w.lines) + "\n"
            self.w.lines.clear()
            await self.resp.write(text.encode())       # waits while the client is slow to read
        await asyncio.sleep(0)
        self.deadline = time.perf_counter() + SLICE


def _queues(vhosts):
    # a snapshot: queues come and go while the scrape yields. The labels
    # are made line by line (a dict per queue up front took a slice of its own)
    return [(v.name, q) for v in vhosts for q in list(v.queues.values())]


def _queue_labels(vhost_name, q):
    return lambda: {"queue": q.name, "vhost": vhost_name}


async def connection_churn(w, server, vhosts):
    counts = churn.COUNTS
    for name, key, help_ in (
            ("connections_opened_total", "connection_created", "Total number of connections opened"),
            ("connections_closed_total", "connection_closed", "Total number of connections closed or terminated"),
            ("channels_opened_total", "channel_created", "Total number of channels opened"),
            ("channels_closed_total", "channel_closed", "Total number of channels closed"),
            ("queues_declared_total", "queue_declared", "Total number of queues declared"),
            ("queues_deleted_total", "queue_deleted", "Total number of queues deleted"),
            ("consumers_added_total", "consumer_added", "Total number of consumers added"),
            ("consumers_removed_total", "consumer_removed", "Total number of consumers removed")):
        await w.metric("detailed_" + name, "counter", help_, counts[key])


async def queue_coarse(w, server, vhosts):
    qs = _queues(vhosts)
    await w.series("detailed_queue_messages_ready", "gauge", "Messages ready to be delivered to consumers",
                   ((_queue_labels(v, q), q.message_count) for v, q in qs))
    await w.series("detailed_queue_messages_unacked", "gauge",
                   "Messages delivered to consumers but not yet acknowledged",
                   ((_queue_labels(v, q), q.unacked_count) for v, q in qs))
    await w.series("detailed_queue_messages", "gauge", "Sum of ready and unacknowledged messages - total queue depth",
                   ((_queue_labels(v, q), q.message_count + q.unacked_count) for v, q in qs))
    # no message deduplication in this broker: nothing is ever deduplicated
    await w.series("detailed_queue_deduplication", "counter", "Number of deduplicated messages for this queue",
                   ((_queue_labels(v, q), 0) for v, q in qs))


async def queue_consumers(w, server, vhosts):
    await w.series("detailed_queue_consumers", "gauge", "Consumers on a queue",
                   ((_queue_labels(v, q), len(q.consumers)) for v, q in _queues(vhosts)))


async def connection_coarse(w, server, vhosts):
    conns = _connections(server, vhosts)
    await w.series("detailed_connection_incoming_bytes_total", "counter",
                   "Total number of bytes received on a connection",
                   (({"channel": c.name}, c.state.recv_oct) for c in conns))
    await w.series("detailed_connection_outgoing_bytes_total", "counter", "Total number of bytes sent on a connection",
                   (({"channel": c.name}, c.state.send_oct) for c in conns))
    await w.series("detailed_connection_channels", "counter", "Channels on a connection",
                   (({"channel": c.name}, len(c.open_channels())) for c in conns))


async def channel_metrics(w, server, vhosts):
    chans = [({"channel": f"{c.name} ({ch.id})", "vhost": c.vhost.name, "connection": c.name}, ch)
             for c in _connections(server, vhosts) for ch in c.open_channels()]
    await w.series("detailed_channel_consumers", "gauge", "Consumers on a channel",
                   ((lab, len(ch.consumers)) for lab, ch in chans))
    await w.series("detailed_messages_unacked", "gauge", "Delivered but not yet acknowledged messages",
                   ((lab, ch.unacked_total) for lab, ch in chans))
    await w.series("detailed_channel_prefetch", "gauge",
                   "Total limit of unacknowledged messages for all consumers on a channel",
                   ((lab, ch.prefetch_global) for lab, ch in chans))


async def exchange_metrics(w, server, vhosts):
    exchanges = [(v, ex) for v in vhosts for ex in list(v.exchanges.values())]
    await w.series("detailed_exchange_deduplication", "counter", "Number of deduplicated messages for this exchange",
                   (({"exchange": ex.name, "vhost": v.name}, 0) for v, ex in exchanges))


async def vhost_message_stats(w, server, vhosts):
    await w.series("detailed_vhost_messages_published_total", "counter",
                   "Total messages published to a vhost (all protocols)",
                   [({"vhost": v.name}, sum(ex.publish_in_count for ex in v.exchanges.values())) for v in vhosts])
    await w.series("detailed_vhost_messages_delivered_total", "counter",
                   "Total messages delivered to clients on a vhost (all protocols)",
                   [({"vhost": v.name}, sum(q.deliver_count + q.get_count for q in v.queues.values()))
                    for v in vhosts])
    await w.series("detailed_vhost_queues", "gauge", "Number of queues on a vhost",
                   [({"vhost": v.name}, len(v.queues)) for v in vhosts])


FAMILIES = {"connection_churn_metrics": connection_churn, "queue_coarse_metrics": queue_coarse,
            "queue_consumer_count": queue_consumers, "connection_coarse_metrics": connection_coarse,
            "connection_metrics": connection_coarse, "channel_metrics": channel_metrics,
            "exchange_metrics": exchange_metrics, "vhost_message_stats": vhost_message_stats}


def add_routes(app):
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/detailed", detailed)

"""Prometheus text exposition (format 0.0.4), names prefixed lavinmq_."""
import os

from aiohttp import web

from lavinmq.http.app import MONITORING, require
from lavinmq.http.runtime import rss_bytes, totals


def _esc(value):
    # names decoded with surrogateescape may hold bytes that are not UTF-8:
    # shown as \xNN, so the page stays UTF-8 (it was a 500)
    text = str(value).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


async def metrics(request):
    require(request, MONITORING)
    server = request.app["server"]
    queues, conns, chans = totals(server)
    st = os.statvfs(server.data_dir)
    lines = []

    def metric(name, kind, help_, samples):
        lines.append(f"# HELP lavinmq_{name} {help_}")
        lines.append(f"# TYPE lavinmq_{name} {kind}")
        for labels, value in samples:
            lab = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
            lines.append(f"lavinmq_{name}{{{lab}}} {value}" if lab else f"lavinmq_{name} {value}")

    metric("connections", "gauge", "Open client connections", [({}, len(conns))])
    metric("channels", "gauge", "Open channels", [({}, len(chans))])
    metric("consumers", "gauge", "Consumers", [({}, sum(len(q.consumers) for q in queues))])
    metric("queues", "gauge", "Queues", [({}, len(queues))])
    qlabels = [({"vhost": q.vhost.name, "queue": q.name}, q) for q in queues]
    metric("queue_messages_ready", "gauge", "Messages ready for delivery",
           [(lab, q.message_count) for lab, q in qlabels])
    metric("queue_messages_unacked", "gauge", "Messages delivered and not yet acknowledged",
           [(lab, q.unacked_count) for lab, q in qlabels])
    metric("queue_consumers", "gauge", "Consumers per queue", [(lab, len(q.consumers)) for lab, q in qlabels])
    metric("messages_published_total", "counter", "Messages published into queues",
           [({}, sum(q.publish_count for q in queues))])
    metric("messages_delivered_total", "counter", "Messages delivered to consumers or by basic.get",
           [({}, sum(q.deliver_count + q.get_count for q in queues))])
    metric("messages_acknowledged_total", "counter", "Messages acknowledged",
           [({}, sum(q.ack_count for q in queues))])
    metric("messages_redelivered_total", "counter", "Messages redelivered",
           [({}, sum(q.redeliver_count for q in queues))])
    metric("process_resident_memory_bytes", "gauge", "Resident memory", [({}, rss_bytes())])
    metric("process_open_fds", "gauge", "Open file descriptors", [({}, len(os.listdir("/proc/self/fd")))])
    metric("disk_free_bytes", "gauge", "Free disk space in the data directory",
           [({}, st.f_bavail * st.f_frsize)])
    metric("disk_free_alarm", "gauge", "1 while publishers are blocked for low disk", [({}, int(server.disk_alarm))])
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain",
                        headers={"X-Content-Type-Options": "nosniff"})

"""Issue 13 item 11: LavinMQ's Prometheus names and labels (its
src/lavinmq/http/controller/prometheus.cr), on /metrics and on
/metrics/detailed with family=, so its Grafana dashboards work."""
import re

import pika

from tests.security.conftest import add_user, call

# LavinMQ's /metrics, less its Crystal GC, follower and stats-loop internals
OVERVIEW = {
    "identity_info": "gauge", "connections_opened_total": "counter", "connections_closed_total": "counter",
    "channels_opened_total": "counter", "channels_closed_total": "counter", "queues_declared_total": "counter",
    "queues_deleted_total": "counter", "process_open_fds": "gauge", "process_open_tcp_sockets": "gauge",
    "process_resident_memory_bytes": "gauge", "disk_space_available_bytes": "gauge", "process_max_fds": "gauge",
    "resident_memory_limit_bytes": "gauge", "connections": "gauge", "channels": "gauge", "consumers": "gauge",
    "queues": "gauge", "bindings": "gauge", "queue_messages_ready": "gauge", "queue_messages_unacked": "gauge",
    "queue_messages": "gauge", "uptime": "counter", "cpu_system_time_total": "counter",
    "cpu_user_time_total": "counter", "total_connected_followers": "gauge",
    "global_messages_delivered_total": "counter", "global_messages_redelivered_total": "counter",
    "global_messages_acknowledged_total": "counter", "global_messages_confirmed_total": "counter",
}
DETAILED = {
    "connection_churn_metrics": {"detailed_connections_opened_total": (), "detailed_connections_closed_total": (),
                                 "detailed_channels_opened_total": (), "detailed_channels_closed_total": (),
                                 "detailed_queues_declared_total": (), "detailed_queues_deleted_total": (),
                                 "detailed_consumers_added_total": (), "detailed_consumers_removed_total": ()},
    "queue_coarse_metrics": {n: ("queue", "vhost") for n in (
        "detailed_queue_messages_ready", "detailed_queue_messages_unacked", "detailed_queue_messages",
        "detailed_queue_deduplication")},
    "queue_consumer_count": {"detailed_queue_consumers": ("queue", "vhost")},
    "connection_coarse_metrics": {n: ("channel",) for n in (
        "detailed_connection_incoming_bytes_total", "detailed_connection_outgoing_bytes_total",
        "detailed_connection_channels")},
    "channel_metrics": {n: ("channel", "vhost", "connection") for n in (
        "detailed_channel_consumers", "detailed_messages_unacked", "detailed_channel_prefetch")},
    "exchange_metrics": {"detailed_exchange_deduplication": ("exchange", "vhost")},
    "vhost_message_stats": {"detailed_vhost_messages_published_total": ("vhost",),
                            "detailed_vhost_messages_delivered_total": ("vhost",),
                            "detailed_vhost_queues": ("vhost",)},
}
SAMPLE = re.compile(r'^(\w+)(?:\{(.*)\})? (\S+)$')


def parse(text):
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, line
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            samples.append((m.group(1), labels, float(m.group(3))))
    return types, samples


def test_overview_and_detailed_families(make_broker):
    b = make_broker()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare("pq")
    ch.confirm_delivery()
    for _ in range(3):
        ch.basic_publish("", "pq", b"x")
    ch.basic_consume("pq", lambda *a: None)
    conn.process_data_events(0.3)
    types, samples = parse(call(b, "GET", "/metrics")[1])
    for name, kind in OVERVIEW.items():
        assert types.get("lavinmq_" + name) == kind, name
    values = {n: v for n, _, v in samples}
    assert values["lavinmq_queue_messages_unacked"] == 3 and values["lavinmq_consumers"] == 1
    assert values["lavinmq_global_messages_confirmed_total"] == 3
    assert types["telemetry_scrape_duration_seconds"] == "gauge"
    query = "&".join(f"family={f}" for f in DETAILED)
    types, samples = parse(call(b, "GET", "/metrics/detailed?" + query)[1])
    for family, names in DETAILED.items():
        for name, labels in names.items():
            assert "lavinmq_" + name in types, (family, name)
            got = [lab for n, lab, _ in samples if n == "lavinmq_" + name]
            assert got, name
            assert all(tuple(lab) == labels for lab in got), (name, got)
    unacked = [v for n, lab, v in samples if n == "lavinmq_detailed_queue_messages_unacked" and lab["queue"] == "pq"]
    assert unacked == [3]
    # only the families asked for
    types, _ = parse(call(b, "GET", "/metrics/detailed?family=queue_consumer_count")[1])
    assert [t for t in types if t.startswith("lavinmq_")] == ["lavinmq_detailed_queue_consumers"]
    conn.close()


def test_prefix_and_vhost_selection(make_broker):
    b = make_broker()
    assert call(b, "PUT", "/api/vhosts/other", {})[0] == 201
    assert call(b, "PUT", "/api/queues/other/oq", {})[0] == 201
    assert call(b, "PUT", "/api/queues/%2F/rq", {})[0] == 201
    types, samples = parse(call(b, "GET", "/metrics?prefix=rabbitmq")[1])
    assert "rabbitmq_queues" in types and not any(t.startswith("lavinmq_") for t in types)
    assert call(b, "GET", "/metrics?prefix=" + "x" * 21)[0] == 400
    _, samples = parse(call(b, "GET", "/metrics/detailed?family=queue_coarse_metrics&vhost=other")[1])
    assert {lab["queue"] for n, lab, _ in samples if n == "lavinmq_detailed_queue_messages"} == {"oq"}
    # a monitoring user sees all; a management user only the vhosts it may use (and no /metrics: 403)
    add_user(b, "watcher", "pw", "monitoring", vhost="other")
    _, samples = parse(call(b, "GET", "/metrics/detailed?family=queue_coarse_metrics", user="watcher",
                            password="pw")[1])
    assert {lab["queue"] for n, lab, _ in samples if n == "lavinmq_detailed_queue_messages"} == {"oq", "rq"}
    add_user(b, "mgr", "pw", "management", vhost="other")
    assert call(b, "GET", "/metrics", user="mgr", password="pw")[0] == 403

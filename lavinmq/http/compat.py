"""The management API's keys that tools written for RabbitMQ 3.10 read,
beyond the basic shapes (see tests/compat/api_keys.py for the comparison
with RabbitMQ's own answers). Each value means here what it means there,
translated to this broker:

- every message lives in a segment file (mmap'd, page cache), none in the
  broker's heap: *_ram counts are 0 and *_paged_out are all messages;
  disk_writes are messages stored, disk_reads messages read back out;
- persistence follows the queue, as LavinMQ reports it: a durable queue's
  messages are persistent;
- run_queue is the event loop's lag in milliseconds (the sampler measures
  it), sockets_* the connection caps of lavinmq.listener;
- churn counters count since the broker started (lavinmq.churn).
"""
import datetime
import os
import time

from lavinmq import churn
from lavinmq.http.stats import is_quiet, queue_message_stats, rates_for

NODE = "lavinmq@localhost"      # RabbitMQ's node name field, on a single node
_node_name = NODE


def node_name():
    """This node's name in every answer (`node` fields, /api/nodes/{name}):
    NODE, or a cluster's leader's own (lavinmq.clustering.settings.node_name),
    so that it is the name the other nodes give it."""
    return _node_name


def set_node_name(name):
    global _node_name
    _node_name = name or NODE

PLACE = "LavinMQ Management"
AUTH_MECHANISMS = [{"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": True},
                   {"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": True}]
CHURN = ("channel_closed", "channel_created", "connection_closed", "connection_created", "queue_created",
         "queue_declared", "queue_deleted")


def _rate(rates, key):
    value = (rates or {}).get(key)
    return {"rate": 0.0 if value is None else round(value, 1)}


def _with_details(counters, rates):
    out = {}
    for key, value in counters.items():
        out[key] = value
        out[key + "_details"] = _rate(rates, key)
    return out


def iso_ms(epoch_s):
    """RabbitMQ's idle_since: 2026-11-22T12:14:08.633+00:00"""
    t = datetime.datetime.fromtimestamp(epoch_s, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}+00:00"


# -- message counters ----------------------------------------------------------

def totals(queues, channels):
    """message_stats of a vhost or the whole broker: queues' and channels' counters."""
    out = {k: 0 for k in ("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty",
                          "deliver_get", "ack", "redeliver", "confirm", "return_unroutable",
                          "drop_unroutable", "disk_reads", "disk_writes")}
    for q in queues:
        for k, v in queue_message_stats(q).items():
            out[k] += v
    for ch in channels:
        out["confirm"] += ch.confirmed_seq
        out["return_unroutable"] += ch.return_unroutable_count
        out["drop_unroutable"] += ch.drop_unroutable_count
    out["disk_writes"] = out["publish"]
    out["disk_reads"] = out["deliver_get"]
    return out


# -- objects ---------------------------------------------------------------------

def queue_extra(q, details=False):
    ready, unacked = q.message_count, q.unacked_count
    ready_bytes, unacked_bytes = q.message_bytes_ready, q.unacked_bytes
    durable = bool(q.durable and not q.exclusive)
    capacity = None
    if q.consumers:
        capacity = sum(1 for c in q.consumers if _has_room(c)) / len(q.consumers)
    idle = idle_since(id(q))
    if idle is None and is_quiet(q) and getattr(q, "last_used", None) is not None:
        # never active: the sampler keeps nothing for it, idle since it was declared (or last touched)
        idle = iso_ms(time.time() - (time.monotonic() - q.last_used))
    out = {"message_bytes": ready_bytes + unacked_bytes,
           "messages_persistent": ready + unacked if durable else 0,
           "message_bytes_persistent": ready_bytes + unacked_bytes if durable else 0,
           "messages_ram": 0, "messages_ready_ram": 0, "messages_unacknowledged_ram": 0,
           "message_bytes_ram": 0, "messages_paged_out": ready + unacked,
           "message_bytes_paged_out": ready_bytes + unacked_bytes,
           "consumer_capacity": capacity, "consumer_utilisation": capacity,
           "head_message_timestamp": head_message_timestamp(q) if details else None}
    if idle is not None:
        out["idle_since"] = idle
    if details:
        out["deliveries"] = []     # per-channel breakdowns: RabbitMQ's detailed rates mode only
        out["incoming"] = []
    return out


def _has_room(c):
    return c.no_ack or not c.prefetch or c.unacked < c.prefetch


def head_message_timestamp(q):
    """The timestamp property (seconds) of the next message, as RabbitMQ."""
    if q.closed or not q.message_count:
        return None
    rec = q.store.peek_head()
    if rec is None:
        return None
    from lavinmq.http.records import parse_record
    try:
        return parse_record(rec)[2].get("timestamp")
    except Exception:         # a record the store holds but this view can't read: no timestamp
        return None


def idle_since(key):
    t = churn.IDLE_SINCE.get(key)
    return iso_ms(t) if t is not None else None


def connection_extra(conn):
    obj = conn.transport.get_extra_info("ssl_object") if conn.transport is not None else None
    props = conn.client_properties or {}
    name = props.get("connection_name")
    out = {"user_provided_name": name.decode(errors="replace") if isinstance(name, bytes) else name,
           "user_who_performed_action": conn.user.name if conn.user else "",
           "send_pend": conn.transport.get_write_buffer_size() if conn.transport is not None else 0,
           "ssl_protocol": None, "ssl_cipher": None, "ssl_hash": None, "ssl_key_exchange": None,
           "peer_cert_subject": None, "peer_cert_issuer": None, "peer_cert_validity": None}
    if obj is not None:
        cipher = obj.cipher() or (None, None, None)
        out.update({"ssl_protocol": obj.version(), "ssl_cipher": cipher[0], "ssl_hash": None,
                    "ssl_key_exchange": None})
        cert = obj.getpeercert()
        if cert:
            out["peer_cert_subject"] = _dn(cert.get("subject", ()))
            out["peer_cert_issuer"] = _dn(cert.get("issuer", ()))
            out["peer_cert_validity"] = f"{cert.get('notBefore')} - {cert.get('notAfter')}"
    return out


def _dn(rdns):
    return ",".join(f"{k}={v}" for rdn in rdns for k, v in rdn)


def channel_extra(ch):
    out = {"messages_unconfirmed": max(0, ch.publish_seq - ch.confirmed_seq) if ch.confirm else 0,
           "messages_uncommitted": len(ch.tx_msgs) if ch.tx else 0,
           "acks_uncommitted": len(ch.tx_acks) if ch.tx else 0,
           "pending_raft_commands": 0,
           "user_who_performed_action": ch.connection.user.name if ch.connection.user else ""}
    idle = idle_since(id(ch))
    if idle is not None:
        out["idle_since"] = idle
    return out


def channel_message_stats(ch):
    return {"confirm": ch.confirmed_seq, "return_unroutable": ch.return_unroutable_count,
            "drop_unroutable": ch.drop_unroutable_count}


def vhost_extra(server, v):
    conns = [c for c in server.connections if c.vhost is v]
    chans = [ch for c in conns for ch in c.open_channels()]
    r = rates_for(("vhost", v.name)) or {}
    recv = sum(c.state.recv_oct for c in conns)
    send = sum(c.state.send_oct for c in conns)
    return {"recv_oct": recv, "recv_oct_details": _rate(r, "recv_oct"),
            "send_oct": send, "send_oct_details": _rate(r, "send_oct"),
            "message_stats": _with_details(totals(v.queues.values(), chans), r)}


# -- overview and nodes -------------------------------------------------------------

def contexts(server):
    cfg = server.config
    out = []
    if cfg.http_port:
        out.append({"node": _node(), "description": PLACE, "path": "/", "ip": cfg.http_bind,
                    "port": str(cfg.http_port)})
    if cfg.https_port and server.tls_context is not None:
        out.append({"node": _node(), "description": PLACE, "path": "/", "ip": cfg.http_bind,
                    "port": str(cfg.https_port), "ssl": True})
    return out


def _node():
    return _node_name


def listeners(server):
    cfg = server.config
    opts = {"backlog": 1024, "nodelay": True, "linger": [True, 0], "exit_on_close": False}
    out = [{"node": _node(), "protocol": "amqp", "ip_address": cfg.amqp_bind, "port": cfg.amqp_port,
            "socket_opts": opts}]
    if cfg.amqps_port and server.tls_context is not None:
        out.append({"node": _node(), "protocol": "amqp/ssl", "ip_address": cfg.amqp_bind,
                    "port": cfg.amqps_port, "socket_opts": dict(opts, verify="verify_peer" if cfg.tls_verify_peer
                                                                 else "verify_none")})
    if cfg.http_port:
        out.append({"node": _node(), "protocol": "http", "ip_address": cfg.http_bind, "port": cfg.http_port,
                    "socket_opts": {"ip": cfg.http_bind, "port": cfg.http_port}})
    if cfg.mqtt_port > 0:
        out.append({"node": _node(), "protocol": "mqtt", "ip_address": cfg.mqtt_bind, "port": cfg.mqtt_port,
                    "socket_opts": opts})
    if cfg.mqtts_port > 0 and server.mqtt_tls_context is not None:
        out.append({"node": _node(), "protocol": "mqtt/ssl", "ip_address": cfg.mqtt_bind, "port": cfg.mqtts_port,
                    "socket_opts": opts})
    # UNIX sockets, as LavinMQ lists them
    for protocol, path in (("amqp", getattr(cfg, "amqp_unix_path", "")), ("http", getattr(cfg, "http_unix_path", "")),
                           ("mqtt", getattr(cfg, "mqtt_unix_path", ""))):
        if path:
            out.append({"node": _node(), "protocol": protocol, "path": path})
    return out


def churn_rates():
    r = rates_for("churn") or {}
    return _with_details({k: churn.COUNTS[k] for k in CHURN}, r)


def overview_extra(server, queues, channels, vhosts, rates):
    ready = sum(q.message_count for q in queues)
    unacked = sum(q.unacked_count for q in queues)
    return {"churn_rates": churn_rates(), "contexts": contexts(server), "disable_stats": False,
            "enable_queue_totals": True, "listeners": listeners(server),
            "message_stats": _with_details(totals(queues, channels), rates),
            "queue_totals": {"messages": ready + unacked, "messages_ready": ready,
                             "messages_unacknowledged": unacked,
                             "messages_details": _rate(rates, "messages"),
                             "messages_ready_details": _rate(rates, "messages_ready"),
                             "messages_unacknowledged_details": _rate(rates, "messages_unacknowledged")}}


def node_extra(server):
    cfg = server.config
    r = rates_for("node") or {}
    out = {"auth_mechanisms": AUTH_MECHANISMS,
           "config_files": [cfg.config_file] if cfg.config_file else [],
           "log_files": [cfg.log_file] if cfg.log_file else ["<stderr>"],
           "contexts": contexts(server), "mem_limit": memory_limit(server),
           "run_queue": churn.LOOP_LAG_MS, "sockets_total": server.guard.max_total,
           "sockets_used": server.guard.total}
    for key in ("disk_free", "fd_used", "mem_used", "sockets_used"):
        out[key + "_details"] = _rate(r, key)
    out.update(_with_details({k: churn.COUNTS[k] for k in CHURN}, rates_for("churn")))
    return out


def memory_limit(server):
    """The memory high watermark in bytes when one is set, else the machine's memory."""
    limit = getattr(server, "memory_limit", None)
    if limit:
        return limit
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def now_s():
    return time.time()

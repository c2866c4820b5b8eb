"""Broker objects as RabbitMQ's management API shows them (see
../shared/reference/rabbitmq-3.10-management-api-samples.json)."""
import time
import urllib.parse

from lavinmq.exchange import DefaultExchange, persistent
from lavinmq.http import compat
from lavinmq.http.field_json import json_table, json_value
from lavinmq.http.stats import queue_message_stats, rates_for
from lavinmq.queue import queue_type

node_name = compat.node_name


def rate(value):
    return {"rate": 0.0} if value is None else {"rate": round(value, 1)}


def stats(counters, rates=None):
    """{"publish": n, "publish_details": {"rate": r}, ...}"""
    out = {}
    for key, value in counters.items():
        out[key] = value
        out[key + "_details"] = rate((rates or {}).get(key))
    return out


def vhost(v, server=None):
    ready = sum(q.message_count for q in v.queues.values())
    unacked = sum(q.unacked_count for q in v.queues.values())
    r = rates_for(("vhost", v.name)) or {}
    return {"name": v.name, "description": "", "tags": [], "default_queue_type": "classic",
            "metadata": {"description": "", "tags": []}, "tracing": False,
            "cluster_state": {node_name(): "running"},
            "messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked,
            "messages_details": rate(r.get("messages")), "messages_ready_details": rate(r.get("messages_ready")),
            "messages_unacknowledged_details": rate(r.get("messages_unacknowledged")),
            "message_stats": stats({"publish": sum(q.publish_count for q in v.queues.values()),
                                    "deliver": sum(q.deliver_count for q in v.queues.values()),
                                    "ack": sum(q.ack_count for q in v.queues.values())}, r),
            "limits": dict(v.limits), **(compat.vhost_extra(server, v) if server is not None else {})}


def user(u):
    return {"name": u.name, "password_hash": u.password_hash,
            "hashing_algorithm": "rabbit_password_hashing_" + u.hashing_algorithm.lower()
            if not u.hashing_algorithm.startswith("rabbit_") else u.hashing_algorithm,
            "tags": list(u.tags), "limits": {}}


def permission(user_name, vhost_name, p):
    return {"user": user_name, "vhost": vhost_name, "configure": p.configure, "write": p.write, "read": p.read}


def exchange(ex):
    out = {"name": ex.name, "vhost": ex.vhost.name, "type": ex.type or "direct", "durable": ex.durable,
           "auto_delete": ex.auto_delete, "internal": ex.internal, "arguments": json_table(ex.arguments),
           "user_who_performed_action": "", "policy": getattr(ex, "policy", None),
           "effective_policy_definition": getattr(ex, "effective_policy_definition", {}),
           "message_stats": stats({"publish_in": ex.publish_in_count, "publish_out": ex.publish_out_count},
                                  rates_for(id(ex))),
           "incoming": [], "outgoing": []}     # per-channel/queue breakdowns: detailed rates mode only
    if ex.persist is not None:
        # a persistent exchange (x-persist-messages / x-persist-ms): what it holds
        out["persist"] = persistent.stats(ex)
    return out


def queue(q, details=False):
    ready, unacked = q.message_count, q.unacked_count
    out = {"name": q.name, "vhost": q.vhost.name, "durable": q.durable, "exclusive": q.exclusive,
           "auto_delete": q.auto_delete, "arguments": json_table(q.arguments), "node": node_name(),
           "type": "mqtt" if q.arguments.get("x-queue-type") == "mqtt" else queue_type(q),
           "state": "closed" if q.closed else "paused" if q.paused else "running",
           "single_active_consumer_tag": q.active.tag if q.single_active and q.active is not None else None,
           "consumers": len(q.consumers), "messages": ready + unacked, "messages_ready": ready,
           "messages_unacknowledged": unacked, "message_bytes_ready": q.store.ready_bytes,
           "message_bytes_unacknowledged": q.unacked_bytes,
           "exclusive_consumer_tag": None, "policy": q.policy, "operator_policy": q.operator_policy,
           "effective_policy_definition": q.effective_policy_definition,
           "message_stats": stats(queue_message_stats(q), rates_for(id(q)))}
    out.update(compat.queue_extra(q, details))
    r = rates_for(id(q)) or {}
    for key in ("messages", "messages_ready", "messages_unacknowledged"):
        out[key + "_details"] = rate(r.get(key))
    stream_details = getattr(q, "stream_details", None)
    if stream_details is not None:
        out["stream"] = stream_details()
        out["type"] = "stream"
        out["message_bytes"] = out["stream"]["message_bytes"]
        out["messages"] = ready         # delivered messages stay in a stream: not counted twice
    if details:
        out["consumer_details"] = [consumer(c) for c in q.consumers]
    return out


def consumer(c):
    ch = c.channel
    out = {"consumer_tag": c.tag, "queue": {"name": c.queue.name, "vhost": c.queue.vhost.name},
           "ack_required": not c.no_ack, "exclusive": c.exclusive, "prefetch_count": c.prefetch,
           "arguments": json_table(c.arguments), "active": _active(c),
           "activity_status": "up" if _active(c) else "waiting",
           "channel_details": channel_ref(ch)}
    if getattr(c.queue, "is_stream", False):
        from lavinmq.queue.stream import consumer_details
        out["stream"] = consumer_details(c)
    return out


def _active(c):
    q = c.queue
    return not q.single_active or q.active is c


def channel_ref(ch):
    conn = ch.connection
    return {"name": f"{conn.name} ({ch.id})", "number": ch.id, "connection_name": conn.name,
            "node": node_name(), "peer_host": conn.peer[0], "peer_port": conn.peer[1],
            "user": conn.user.name if conn.user else ""}


def properties_key(routing_key, arguments):
    """RabbitMQ's binding id in URLs: the routing key, plus a hash of the
    arguments when there are any."""
    key = urllib.parse.quote(routing_key, safe="") or "~"
    if arguments:
        import hashlib
        import json
        key += "~" + hashlib.md5(json.dumps(arguments, sort_keys=True, default=str).encode()).hexdigest()[:22]
    return key


def binding(vhost_, b):
    dest = b.destination
    from lavinmq._core.queue import Queue
    return {"source": b.source.name, "vhost": vhost_.name, "destination": dest.name,
            "destination_type": "queue" if isinstance(dest, Queue) else "exchange",
            "routing_key": b.routing_key, "arguments": json_table(b.arguments),
            "properties_key": properties_key(b.routing_key, b.arguments)}


def default_binding(vhost_, q):
    return {"source": "", "vhost": vhost_.name, "destination": q.name, "destination_type": "queue",
            "routing_key": q.name, "arguments": {}, "properties_key": properties_key(q.name, {})}


def connection(conn, now=None):
    st = conn.state
    chans = conn.open_channels()
    return {"name": conn.name, "node": node_name(), "vhost": conn.vhost.name if conn.vhost else None,
            "user": conn.user.name if conn.user else None, "state": "blocked" if st.blocked else "running",
            "channels": len(chans), "channel_max": conn.channel_max, "frame_max": conn.frame_max,
            "timeout": conn.heartbeat_interval, "protocol": "AMQP 0-9-1", "auth_mechanism": "PLAIN",
            "peer_host": conn.peer[0], "peer_port": conn.peer[1],
            "host": conn.local[0] if hasattr(conn, "local") else None,
            "port": conn.local[1] if hasattr(conn, "local") else None,
            "ssl": bool(getattr(conn, "tls", False)), "type": "network", "connected_at": getattr(conn, "connected_at", None),
            "client_properties": _jsonable(conn.client_properties),
            "send_oct": st.send_oct, "recv_oct": st.recv_oct,
            "send_oct_details": rate((rates_for(id(conn)) or {}).get("send_oct")),
            "recv_oct_details": rate((rates_for(id(conn)) or {}).get("recv_oct")),
            **compat.connection_extra(conn),
            **(conn.api_details() if hasattr(conn, "api_details") else {})}


def channel(ch):
    conn = ch.connection
    return {"name": f"{conn.name} ({ch.id})", "number": ch.id, "node": node_name(),
            "vhost": conn.vhost.name if conn.vhost else None, "user": conn.user.name if conn.user else None,
            "connection_details": {"name": conn.name, "peer_host": conn.peer[0], "peer_port": conn.peer[1]},
            "confirm": bool(ch.confirm), "transactional": bool(ch.tx), "consumer_count": len(ch.consumers),
            "messages_unacknowledged": ch.unacked_total, "prefetch_count": ch.prefetch_consumer,
            "global_prefetch_count": ch.prefetch_global, "state": "closing" if ch.closing else "running",
            "message_stats": stats({"publish": ch.publish_count, "deliver": ch.deliver_count,
                                    "ack": ch.ack_count, **compat.channel_message_stats(ch)}, rates_for(id(ch))),
            **compat.channel_extra(ch)}


_jsonable = json_value      # client properties and message properties: as arguments


def definitions(server, only=None):
    from lavinmq._core.queue import Queue
    import lavinmq
    vhosts = [v for n, v in server.vhosts.items() if only is None or n == only]
    out = {"lavinmq_version": lavinmq.__version__, "rabbit_version": "3.10.8", "rabbitmq_version": "3.10.8",
           "product_name": "LavinMQ", "product_version": lavinmq.__version__}
    if only is None:
        out["users"] = [user(u) for u in server.users.users.values()]      # tags as a list, as 3.10
        stored = getattr(server, "global_parameters", None)
        stored = stored.values if stored is not None else {}
        out["global_parameters"] = [{"name": "cluster_name", "value": node_name()}] * ("cluster_name" not in stored) + \
            [{"name": n, "value": v} for n, v in stored.items()]
        out["topic_permissions"] = []       # no topic permissions here
        out["vhosts"] = [{"name": v.name, "limits": v.limits, "metadata": {"description": "", "tags": []}}
                         for v in vhosts]
        out["permissions"] = [permission(u.name, vn, p) for u in server.users.users.values()
                              for vn, p in u.permissions.items()]
    out["parameters"] = [p for v in vhosts for p in server.parameters.of(v).listing()]
    if only is not None:
        # a vhost's own file carries its limits as LavinMQ and RabbitMQ write them
        out["parameters"] += [{"name": "limits", "component": "vhost-limits", "value": dict(v.limits)}
                              for v in vhosts if v.limits]
    out["policies"] = [p for v in vhosts for p in v.policies.listing()]
    out["operator_policies"] = [p for v in vhosts for p in v.policies.listing(operator=True)]
    out["exchanges"] = [export_exchange(v, ex) for v in vhosts for ex in v.exchanges.values()
                        if ex.durable and not isinstance(ex, DefaultExchange) and not ex.name.startswith("amq.")]
    # internal queues (an x-delayed-message exchange's store) come back with their exchange
    out["queues"] = [{"name": q.name, "vhost": v.name, "durable": True, "auto_delete": q.auto_delete,
                      "arguments": json_table(q.arguments)}
                     for v in vhosts for q in v.queues.values()
                     if q.durable and not q.exclusive and not getattr(q, "internal", False)]
    out["bindings"] = [{"source": b.source.name, "vhost": v.name, "destination": b.destination.name,
                        "destination_type": "queue" if isinstance(b.destination, Queue) else "exchange",
                        "routing_key": b.routing_key, "arguments": json_table(b.arguments)}
                       for v in vhosts for ex in v.exchanges.values() if not isinstance(ex, DefaultExchange)
                       for b in ex.bindings.values()
                       if ex.durable and getattr(b.destination, "durable", False)]
    if only is not None:
        for key in ("parameters", "policies", "operator_policies", "exchanges", "queues", "bindings"):
            for item in out[key]:
                item.pop("vhost", None)
    return out


def export_exchange(v, ex):
    """An exchange in a definitions file. A delaying one is written as the
    x-delayed-message exchange it was declared as (RabbitMQ's plugin and
    LavinMQ both import that form), not as its routing type."""
    arguments = json_table(ex.arguments)
    type_name = ex.type
    if arguments.get("x-delayed-exchange") is True:
        arguments = {k: a for k, a in arguments.items() if k != "x-delayed-exchange"}
        arguments["x-delayed-type"], type_name = type_name, "x-delayed-message"
    return {"name": ex.name, "vhost": v.name, "type": type_name, "durable": ex.durable,
            "auto_delete": ex.auto_delete, "internal": ex.internal, "arguments": arguments}


def uptime_ms(started):
    return int((time.monotonic() - started) * 1000)

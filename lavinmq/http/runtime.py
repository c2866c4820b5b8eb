"""Routes for what is running: overview, nodes, whoami, connections,
channels, consumers, aliveness and health checks."""
import os
import resource
import time

from aiohttp import web

import lavinmq
from lavinmq.http import compat, history, shapes
from lavinmq.process import open_fds, resident_memory
from lavinmq.http.stats import rates_for
from lavinmq.http.app import HTTPError, MANAGEMENT, MONITORING, listing, not_found, require, vhost_of


def _visible_connections(request):
    user = request["user"]
    conns = [c for c in request.app["server"].connections if c.vhost is not None]
    if user.is_administrator or "monitoring" in user.tags:
        return conns
    return [c for c in conns if c.user is not None and c.user.name == user.name]


def totals(server):
    queues = [q for v in server.vhosts.values() for q in v.queues.values()]
    conns = [c for c in server.connections if c.vhost is not None]
    chans = [ch for c in conns for ch in c.open_channels()]
    return queues, conns, chans


def _visible_totals(request):
    """Administrators and monitoring see the whole broker; other users the
    vhosts they have permissions on, as RabbitMQ's overview."""
    server = request.app["server"]
    user = request["user"]
    queues, conns, chans = totals(server)
    if user.is_administrator or "monitoring" in user.tags:
        return queues, conns, chans, list(server.vhosts.values())
    vhosts = [v for n, v in server.vhosts.items() if user.can_access(n)]
    conns = [c for c in conns if c.vhost in vhosts]
    return ([q for q in queues if q.vhost in vhosts], conns,
            [ch for c in conns for ch in c.open_channels()], vhosts)


def _rates(server, vhosts):
    if len(vhosts) == len(server.vhosts):
        return rates_for("overall")
    out = {}
    for v in vhosts:
        for k, r in (rates_for(("vhost", v.name)) or {}).items():
            out[k] = out.get(k, 0) + r
    return out


async def overview(request):
    require(request, MANAGEMENT)
    server = request.app["server"]
    queues, conns, chans, vhosts = _visible_totals(request)
    return web.json_response(history.augment(request, {
        "management_version": lavinmq.__version__, "product_name": "LavinMQ",
        "product_version": lavinmq.__version__, "lavinmq_version": lavinmq.__version__,
        "rabbitmq_version": "3.10.8", "node": shapes.NODE, "cluster_name": shapes.NODE,
        "uptime": shapes.uptime_ms(server.started), "rates_mode": "basic",
        "exchange_types": [{"name": t, "description": "", "enabled": True}
                           for t in ("direct", "fanout", "headers", "topic")],
        "object_totals": {"connections": len(conns), "channels": len(chans),
                          "consumers": sum(len(q.consumers) for q in queues), "queues": len(queues),
                          "exchanges": sum(len(v.exchanges) for v in vhosts)},
        **compat.overview_extra(server, queues, chans, vhosts, _rates(server, vhosts)),
    }, "overall", lengths=history.OVERVIEW_LENGTHS, msg_rates=history.QUEUE_RATES))


async def node(request):
    require(request, MONITORING)
    if request.match_info["name"] != shapes.NODE:
        raise not_found()
    return web.json_response((await _node_list(request))[0])


async def nodes(request):
    require(request, MONITORING)
    return web.json_response(await _node_list(request))


async def _node_list(request):
    server = request.app["server"]
    st = os.statvfs(server.data_dir)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return [{
        "name": shapes.NODE, "type": "disc", "running": True, "os_pid": str(os.getpid()),
        "uptime": shapes.uptime_ms(server.started), "processors": os.cpu_count(),
        "mem_used": rss_bytes(), "mem_alarm": server.memory_alarm, "fd_used": open_fds(),
        "fd_total": soft, "disk_free": st.f_bavail * st.f_frsize,
        "disk_free_limit": server.config.disk_free_limit, "disk_free_alarm": server.disk_alarm,
        "partitions": [], "applications": [], "rates_mode": "basic", **compat.node_extra(server)}]


def rss_bytes():
    return resident_memory()


async def whoami(request):
    user = request["user"]
    return web.json_response({"name": user.name, "tags": list(user.tags)})


async def list_connections(request):
    require(request, MANAGEMENT)
    vhost = request.match_info.get("vhost")
    if vhost is not None:
        vhost_of(request)
    return listing(request, [shapes.connection(c) for c in _visible_connections(request)
                             if vhost is None or c.vhost.name == vhost])


def _connection(request):
    name = request.match_info["name"]
    for c in _visible_connections(request):
        if c.name == name:
            return c
    raise not_found()


async def get_connection(request):
    require(request, MANAGEMENT)
    conn = _connection(request)
    return web.json_response(history.augment(request, shapes.connection(conn), id(conn), conn,
                                             data_rates=history.CONNECTION_DATA))


async def delete_connection(request):
    require(request, MANAGEMENT)
    conn = _connection(request)
    user = request["user"]
    # monitoring may look at every connection; closing one is for administrators or its own user
    if not user.is_administrator and (conn.user is None or conn.user.name != user.name):
        raise HTTPError(403, "Access refused.")
    reason = request.headers.get("X-Reason", "Closed via management plugin")
    conn.close(320, f"CONNECTION_FORCED - {reason}")
    return web.Response(status=204)


async def connection_channels(request):
    require(request, MANAGEMENT)
    conn = _connection(request)
    return listing(request, [shapes.channel(ch) for ch in conn.open_channels()])


async def list_channels(request):
    require(request, MANAGEMENT)
    vhost = request.match_info.get("vhost")
    return listing(request, [shapes.channel(ch) for c in _visible_connections(request)
                             for ch in c.open_channels() if vhost is None or c.vhost.name == vhost])


async def get_channel(request):
    require(request, MANAGEMENT)
    name = request.match_info["name"]
    for c in _visible_connections(request):
        for ch in c.channels:
            if ch is not None and f"{c.name} ({ch.id})" == name:
                out = shapes.channel(ch)
                out["consumer_details"] = [shapes.consumer(x) for x in ch.consumers.values()]
                return web.json_response(history.augment(request, out, id(ch), ch, msg_rates=history.CHANNEL_RATES))
    raise not_found()


async def list_consumers(request):
    require(request, MANAGEMENT)
    vhost = request.match_info.get("vhost")
    return listing(request, [shapes.consumer(cons) for c in _visible_connections(request)
                             for ch in c.open_channels() if vhost is None or c.vhost.name == vhost
                             for cons in ch.consumers.values()])


async def aliveness(request):
    require(request, MANAGEMENT)
    vhost_of(request)
    return web.json_response({"status": "ok"})


async def health_ok(request):
    require(request, MONITORING)
    return web.json_response({"status": "ok"})


async def health_alarms(request):
    require(request, MONITORING)
    server = request.app["server"]
    if server.disk_alarm:
        return web.json_response({"status": "failed", "reason": "resource alarm(s) in effect",
                                  "alarms": [{"resource": "disk", "node": shapes.NODE}]}, status=503)
    return web.json_response({"status": "ok"})


async def health_port(request):
    require(request, MONITORING)
    server = request.app["server"]
    try:
        port = int(request.match_info["port"])
    except ValueError:
        raise HTTPError(400, "port must be a number")
    if port in (server.config.amqp_port, server.config.http_port):
        return web.json_response({"status": "ok", "port": port})
    return web.json_response({"status": "failed", "reason": f"no listener on port {port}",
                              "missing": port}, status=503)


async def health_protocol(request):
    require(request, MONITORING)
    proto = request.match_info["protocol"]
    if proto in ("amqp", "amqp091", "amqp0-9-1", "http"):
        return web.json_response({"status": "ok", "protocol": proto})
    return web.json_response({"status": "failed", "reason": f"no listener for {proto}", "missing": proto},
                             status=503)


async def health_node(request):
    require(request, MONITORING)
    if request.match_info["node"] != shapes.NODE:
        raise not_found()
    return web.json_response({"status": "ok"})


async def cluster_name(request):
    require(request, MANAGEMENT)
    return web.json_response({"name": shapes.NODE})


async def extensions(request):
    require(request, MANAGEMENT)
    return web.json_response([])      # no UI plugins


async def openapi(request):
    from lavinmq.http.openapi import DOCUMENT
    return web.json_response(DOCUMENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/openapi.json", openapi)
    r.add_get("/api/cluster-name", cluster_name)
    r.add_get("/api/extensions", extensions)
    r.add_get("/api/healthchecks/node", health_ok)        # RabbitMQ's older health check
    r.add_get("/api/healthchecks/node/", health_ok)
    r.add_get("/api/healthchecks/node/{node}", health_node)
    r.add_get("/api/nodes/{name}", node)
    r.add_get("/api/overview", overview)
    r.add_get("/api/nodes", nodes)
    r.add_get("/api/whoami", whoami)
    r.add_get("/api/connections", list_connections)
    r.add_get("/api/vhosts/{vhost}/connections", list_connections)
    r.add_get("/api/connections/{name}", get_connection)
    r.add_delete("/api/connections/{name}", delete_connection)
    r.add_get("/api/connections/{name}/channels", connection_channels)
    r.add_get("/api/channels", list_channels)
    r.add_get("/api/vhosts/{vhost}/channels", list_channels)
    r.add_get("/api/channels/{name}", get_channel)
    r.add_get("/api/consumers", list_consumers)
    r.add_get("/api/consumers/{vhost}", list_consumers)
    r.add_get("/api/aliveness-test/{vhost}", aliveness)
    r.add_get("/api/health/checks/alarms", health_alarms)
    r.add_get("/api/health/checks/local-alarms", health_alarms)
    r.add_get("/api/health/checks/virtual-hosts", health_ok)
    r.add_get("/api/health/checks/node-is-quorum-critical", health_ok)
    r.add_get("/api/health/checks/port-listener/{port}", health_port)
    r.add_get("/api/health/checks/protocol-listener/{protocol}", health_protocol)

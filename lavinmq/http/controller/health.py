"""Health checks, RabbitMQ's older /api/healthchecks and its /api/health/checks."""
from aiohttp import web

from lavinmq.http import shapes
from lavinmq.http.helpers import HTTPError, MONITORING, not_found, require


async def health_ok(request):
    require(request, MONITORING)
    return web.json_response({"status": "ok"})


async def health_alarms(request):
    require(request, MONITORING)
    server = request.app["server"]
    if server.disk_alarm:
        return web.json_response({"status": "failed", "reason": "resource alarm(s) in effect",
                                  "alarms": [{"resource": "disk", "node": shapes.node_name()}]}, status=503)
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
    if request.match_info["node"] != shapes.node_name():
        raise not_found()
    return web.json_response({"status": "ok"})


def add_routes(app):
    r = app.router
    r.add_get("/api/healthchecks/node", health_ok)        # RabbitMQ's older health check
    r.add_get("/api/healthchecks/node/", health_ok)
    r.add_get("/api/healthchecks/node/{node}", health_node)
    r.add_get("/api/health/checks/alarms", health_alarms)
    r.add_get("/api/health/checks/local-alarms", health_alarms)
    r.add_get("/api/health/checks/virtual-hosts", health_ok)
    r.add_get("/api/health/checks/node-is-quorum-critical", health_ok)
    r.add_get("/api/health/checks/port-listener/{port}", health_port)
    r.add_get("/api/health/checks/protocol-listener/{protocol}", health_protocol)

"""/api/vhosts and /api/vhost-limits: virtual hosts and their limits."""
from aiohttp import web

from lavinmq.http import history, shapes
from lavinmq.http.helpers import (ADMIN, HTTPError, MANAGEMENT, NO_CONTENT, body_json, created, listing,
                                  methods, not_found, require, vhost_of, visible_vhosts)


async def list_vhosts(request):
    require(request, MANAGEMENT)
    user = request["user"]
    server = request.app["server"]
    return listing(request, [shapes.vhost(v, server) for n, v in server.vhosts.items()
                             if user.is_administrator or user.can_access(n)])


async def get_vhost(request):
    require(request, MANAGEMENT)
    v = vhost_of(request)
    return web.json_response(history.augment(request, shapes.vhost(v, request.app["server"]), ("vhost", v.name),
                                             lengths=history.QUEUE_LENGTHS, msg_rates=history.QUEUE_RATES))


async def put_vhost(request):
    require(request, ADMIN)
    await body_json(request)
    server = request.app["server"]
    name = request.match_info["vhost"]
    existed = name in server.vhosts
    server.add_vhost(name)
    if not existed:     # as RabbitMQ: the creating user may use it
        server.users.set_permissions(request["user"].name, name, ".*", ".*", ".*")
    return created(existed)


async def delete_vhost(request):
    require(request, ADMIN)
    if not request.app["server"].delete_vhost(request.match_info["vhost"]):
        raise not_found()
    return web.Response(status=NO_CONTENT)


async def list_vhost_limits(request):
    require(request, MANAGEMENT)
    return web.json_response([{"vhost": v.name, "value": dict(v.limits)} for v in visible_vhosts(request)
                              if v.limits])


async def put_vhost_limit(request):
    require(request, ADMIN)
    vhost = vhost_of(request)
    body = await body_json(request)
    name = request.match_info["name"]
    value = body.get("value")
    try:
        request.app["server"].set_vhost_limits(vhost.name, {**vhost.limits, name: value})
    except ValueError as exc:
        raise HTTPError(400, str(exc))
    return web.Response(status=NO_CONTENT)


async def delete_vhost_limit(request):
    require(request, ADMIN)
    vhost = vhost_of(request)
    name = request.match_info["name"]
    if name not in vhost.limits:
        raise not_found()
    request.app["server"].set_vhost_limits(vhost.name, {k: v for k, v in vhost.limits.items() if k != name})
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/vhosts", list_vhosts)
    r.add_route("*", "/api/vhosts/{vhost}", methods(get_vhost, put_vhost, delete_vhost))
    r.add_get("/api/vhost-limits", list_vhost_limits)
    r.add_get("/api/vhost-limits/{vhost}", list_vhost_limits)
    r.add_route("*", "/api/vhost-limits/{vhost}/{name}", methods(None, put_vhost_limit, delete_vhost_limit))

"""/api/permissions: what each user may do in each vhost."""
from aiohttp import web

from lavinmq.http import shapes
from lavinmq.http.helpers import (ADMIN, HTTPError, NO_CONTENT, body_json, created, listing, methods, not_found,
                                  require, typed, vhost_of)


async def list_permissions(request):
    require(request, ADMIN)
    users = request.app["server"].users.users.values()
    vhost = request.match_info.get("vhost")
    if vhost is not None:
        vhost_of(request)
    return listing(request, [shapes.permission(u.name, v, p) for u in users for v, p in u.permissions.items()
                             if vhost is None or v == vhost])


async def user_permissions(request):
    require(request, ADMIN)
    u = request.app["server"].users.get(request.match_info["user"])
    if u is None:
        raise not_found()
    return listing(request, [shapes.permission(u.name, v, p) for v, p in u.permissions.items()])


async def get_permission(request):
    require(request, ADMIN)
    u = request.app["server"].users.get(request.match_info["user"])
    vhost = request.match_info["vhost"]
    if u is None or vhost not in u.permissions:
        raise not_found()
    return web.json_response(shapes.permission(u.name, vhost, u.permissions[vhost]))


async def put_permission(request):
    require(request, ADMIN)
    body = await body_json(request)
    server = request.app["server"]
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    if user not in server.users or vhost not in server.vhosts:
        raise HTTPError(400, f"user {user!r} or vhost {vhost!r} does not exist")
    existed = vhost in server.users.get(user).permissions
    try:
        server.users.set_permissions(user, vhost, typed(body, "configure", str, ""), typed(body, "write", str, ""),
                                     typed(body, "read", str, ""))
    except ValueError as exc:
        raise HTTPError(400, str(exc))
    return created(existed)


async def delete_permission(request):
    require(request, ADMIN)
    users = request.app["server"].users
    user = request.match_info["user"]
    if user not in users or not users.clear_permissions(user, request.match_info["vhost"]):
        raise not_found()
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/permissions", list_permissions)
    r.add_get("/api/users/{user}/permissions", user_permissions)
    r.add_get("/api/vhosts/{vhost}/permissions", list_permissions)
    r.add_route("*", "/api/permissions/{vhost}/{user}", methods(get_permission, put_permission, delete_permission))

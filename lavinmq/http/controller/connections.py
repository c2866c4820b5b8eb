"""/api/connections: open client connections; closing one."""
from aiohttp import web

from lavinmq.http import history, shapes
from lavinmq.http.helpers import HTTPError, MANAGEMENT, listing, not_found, require, vhost_of, visible_connections


async def list_connections(request):
    require(request, MANAGEMENT)
    vhost = request.match_info.get("vhost")
    if vhost is not None:
        vhost_of(request)
    return listing(request, [c for c in visible_connections(request) if vhost is None or c.vhost.name == vhost],
                   shapes.connection)


def _connection(request):
    name = request.match_info["name"]
    for c in visible_connections(request):
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


def add_routes(app):
    r = app.router
    r.add_get("/api/connections", list_connections)
    r.add_get("/api/vhosts/{vhost}/connections", list_connections)
    r.add_get("/api/connections/{name}", get_connection)
    r.add_delete("/api/connections/{name}", delete_connection)
    r.add_get("/api/connections/{name}/channels", connection_channels)

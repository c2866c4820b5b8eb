"""/api/channels: the open channels of the connections a user may see."""
from aiohttp import web

from lavinmq.http import history, shapes
from lavinmq.http.helpers import (HTTPError, MANAGEMENT, NO_CONTENT, body_json, listing, not_found, require,
                                  visible_connections)


async def list_channels(request):
    require(request, MANAGEMENT)
    vhost = request.match_info.get("vhost")
    return listing(request, [ch for c in visible_connections(request)
                             for ch in c.open_channels() if vhost is None or c.vhost.name == vhost], shapes.channel)


def _channel(request):
    name = request.match_info["name"]
    for c in visible_connections(request):
        for ch in c.open_channels():
            if f"{c.name} ({ch.id})" == name:
                return c, ch
    raise not_found()


async def get_channel(request):
    require(request, MANAGEMENT)
    _, ch = _channel(request)
    out = shapes.channel(ch)
    out["consumer_details"] = [shapes.consumer(x) for x in ch.consumers.values()]
    return web.json_response(history.augment(request, out, id(ch), ch, msg_rates=history.CHANNEL_RATES))


async def put_channel(request):
    """LavinMQ's PUT /api/channels/{name} {"prefetch": N}: the channel's
    consumer prefetch, for its consumers now and those to come."""
    require(request, MANAGEMENT)
    conn, ch = _channel(request)
    user = request["user"]
    if not user.is_administrator and (conn.user is None or conn.user.name != user.name):
        raise HTTPError(403, "Access refused.")
    body = await body_json(request)
    prefetch = body.get("prefetch")
    if prefetch is not None:
        if not isinstance(prefetch, int) or isinstance(prefetch, bool) or not 0 <= prefetch <= 65535:
            raise HTTPError(400, "prefetch must be between 0 and 65535")
        ch.set_prefetch(prefetch)
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/channels", list_channels)
    r.add_get("/api/vhosts/{vhost}/channels", list_channels)
    r.add_get("/api/channels/{name}", get_channel)
    r.add_put("/api/channels/{name}", put_channel)

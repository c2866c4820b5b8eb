"""/api/consumers: the consumers of the connections a user may see, and
cancelling one (LavinMQ's DELETE /api/consumers/{vhost}/{connection}/
{channel}/{consumer_tag})."""
from aiohttp import web

from lavinmq.http import shapes
from lavinmq.http.helpers import (HTTPError, MANAGEMENT, NO_CONTENT, listing, not_found, require, vhost_of,
                                  visible_connections)


async def list_consumers(request):
    require(request, MANAGEMENT)
    vhost = request.match_info.get("vhost")
    return listing(request, [cons for c in visible_connections(request)
                             for ch in c.open_channels() if vhost is None or c.vhost.name == vhost
                             for cons in ch.consumers.values()], shapes.consumer)


async def cancel_consumer(request):
    require(request, MANAGEMENT)
    vhost = vhost_of(request)
    info = request.match_info
    try:
        number = int(info["channel"])
    except ValueError:
        raise not_found() from None
    conn = next((c for c in visible_connections(request) if c.vhost is vhost and c.name == info["connection"]),
                None)
    ch = conn.get_channel(number) if conn is not None and 0 < number < 65536 else None
    consumer = ch.consumers.get(info["consumer_tag"]) if ch is not None and not ch.closing else None
    if consumer is None:
        raise not_found()
    user = request["user"]
    # as closing a connection: administrators, or the connection's own user
    if not user.is_administrator and (conn.user is None or conn.user.name != user.name):
        raise HTTPError(403, "Access refused.")
    ch.cancel_consumer(consumer)
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/consumers", list_consumers)
    r.add_get("/api/consumers/{vhost}", list_consumers)
    r.add_delete("/api/consumers/{vhost}/{connection}/{channel}/{consumer_tag}", cancel_consumer)

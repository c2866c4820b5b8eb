"""/api/channels: the open channels of the connections a user may see."""
from aiohttp import web

from lavinmq.http import history, shapes
from lavinmq.http.helpers import MANAGEMENT, listing, not_found, require, visible_connections


async def list_channels(request):
    require(request, MANAGEMENT)
    vhost = request.match_info.get("vhost")
    return listing(request, [ch for c in visible_connections(request)
                             for ch in c.open_channels() if vhost is None or c.vhost.name == vhost], shapes.channel)


async def get_channel(request):
    require(request, MANAGEMENT)
    name = request.match_info["name"]
    for c in visible_connections(request):
        for ch in c.channels:
            if ch is not None and f"{c.name} ({ch.id})" == name:
                out = shapes.channel(ch)
                out["consumer_details"] = [shapes.consumer(x) for x in ch.consumers.values()]
                return web.json_response(history.augment(request, out, id(ch), ch, msg_rates=history.CHANNEL_RATES))
    raise not_found()


def add_routes(app):
    r = app.router
    r.add_get("/api/channels", list_channels)
    r.add_get("/api/vhosts/{vhost}/channels", list_channels)
    r.add_get("/api/channels/{name}", get_channel)

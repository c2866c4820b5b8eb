"""/api/consumers: the consumers of the connections a user may see."""
from lavinmq.http import shapes
from lavinmq.http.helpers import MANAGEMENT, listing, require, visible_connections


async def list_consumers(request):
    require(request, MANAGEMENT)
    vhost = request.match_info.get("vhost")
    return listing(request, [cons for c in visible_connections(request)
                             for ch in c.open_channels() if vhost is None or c.vhost.name == vhost
                             for cons in ch.consumers.values()], shapes.consumer)


def add_routes(app):
    r = app.router
    r.add_get("/api/consumers", list_consumers)
    r.add_get("/api/consumers/{vhost}", list_consumers)

"""/api/federation-links[/{vhost}]: each federation link (one per upstream
and federated exchange or queue) and its status, as LavinMQ lists them.
Upstreams and sets are parameters (lavinmq.http.parameters)."""
from lavinmq.http.controller.parameters import params_of
from lavinmq.http.helpers import MANAGEMENT, listing, require, visible_vhosts


async def list_links(request):
    require(request, MANAGEMENT)
    return listing(request, [link for v in visible_vhosts(request)
                             for link in params_of(request, v).federation.listing()])


def add_routes(app):
    app.router.add_get("/api/federation-links", list_links)
    app.router.add_get("/api/federation-links/{vhost}", list_links)

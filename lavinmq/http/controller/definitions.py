"""/api/definitions: export and import of everything operators create."""
from aiohttp import web

from lavinmq.http import shapes, sliced
from lavinmq.http.helpers import ADMIN, NO_CONTENT, body_json, require, vhost_of


async def get_definitions(request):
    require(request, ADMIN)
    server = request.app["server"]
    only = request.match_info.get("vhost")
    if only is not None:
        vhost_of(request)
    # orjson: a backup of thousands of queues is encoded in a few ms, not tens
    return web.Response(body=sliced.dumps(shapes.definitions(server, only)), content_type="application/json")


async def post_definitions(request):
    require(request, ADMIN)
    body = await body_json(request)
    only = request.match_info.get("vhost")
    if only is not None:
        vhost_of(request)
    from lavinmq.http.importer import import_definitions_async
    await import_definitions_async(request.app["server"], body, only)
    from lavinmq.policy import all_applied
    await all_applied(request.app["server"].vhosts.values())   # policies apply in slices
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/definitions", get_definitions)
    r.add_post("/api/definitions", post_definitions)
    r.add_get("/api/definitions/{vhost}", get_definitions)
    r.add_post("/api/definitions/{vhost}", post_definitions)

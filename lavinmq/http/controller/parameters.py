"""/api/parameters: runtime parameters by component (shovel,
federation-upstream, ...)."""
from aiohttp import web

from lavinmq.http.helpers import HTTPError, MANAGEMENT, POLICYMAKER, methods, not_found, require, vhost_of


async def list_parameters(request):
    # no component (shovel, federation-upstream, ...) is implemented yet: nothing to list
    require(request, MANAGEMENT)
    if "vhost" in request.match_info:
        vhost_of(request)
    return web.json_response([])


async def put_parameter(request):
    require(request, POLICYMAKER)
    vhost_of(request)
    raise HTTPError(400, f"component '{request.match_info['component']}' is not supported by this broker")


async def get_parameter(request):
    require(request, MANAGEMENT)
    vhost_of(request)
    raise not_found()


def add_routes(app):
    r = app.router
    r.add_get("/api/parameters", list_parameters)
    r.add_get("/api/parameters/{component}", list_parameters)
    r.add_get("/api/parameters/{component}/{vhost}", list_parameters)
    r.add_route("*", "/api/parameters/{component}/{vhost}/{name}", methods(get_parameter, put_parameter,
                                                                         get_parameter))

"""/api/global-parameters: LavinMQ's (and RabbitMQ's) parameters outside
any vhost, for policymakers; stored in lavinmq.global_parameters."""
from aiohttp import web

from lavinmq.http.helpers import HTTPError, NO_CONTENT, POLICYMAKER, body_json, created, listing, methods, \
    not_found, require


def _store(request):
    return request.app["server"].global_parameters


async def list_parameters(request):
    require(request, POLICYMAKER)
    return listing(request, _store(request).listing())


async def get_parameter(request):
    require(request, POLICYMAKER)
    name = request.match_info["name"]
    store = _store(request)
    if name not in store.values:
        raise not_found()
    return web.json_response({"name": name, "value": store.get(name), "component": None, "vhost": None})


async def put_parameter(request):
    require(request, POLICYMAKER)
    body = await body_json(request)
    if "value" not in body:
        raise HTTPError(400, "Field 'value' is required")
    try:
        new = _store(request).set(request.match_info["name"], body["value"])
    except ValueError as exc:
        raise HTTPError(400, str(exc))
    return created(not new)


async def delete_parameter(request):
    require(request, POLICYMAKER)
    if not _store(request).delete(request.match_info["name"]):
        raise not_found()
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/global-parameters", list_parameters)
    r.add_route("*", "/api/global-parameters/{name}", methods(get_parameter, put_parameter, delete_parameter))

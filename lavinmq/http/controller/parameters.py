"""/api/parameters (runtime parameters: shovel, federation-upstream,
federation-upstream-set), as RabbitMQ's and LavinMQ's management APIs have
them. The values live in lavinmq.parameters, which checks them and starts
what they define; these routes check who may do what (policymakers)."""
from aiohttp import web

from lavinmq.http.helpers import (HTTPError, POLICYMAKER, body_json, listing, not_found, require, vhost_of,
                                  visible_vhosts)
from lavinmq.parameters import ParameterError


def params_of(request, vhost):
    return request.app["server"].parameters.of(vhost)


async def list_parameters(request):
    require(request, POLICYMAKER)
    component = request.match_info.get("component")
    return listing(request, [p for v in visible_vhosts(request)
                             for p in params_of(request, v).listing(component)])


async def one_parameter(request):
    require(request, POLICYMAKER)
    vhost = vhost_of(request)
    component, name = request.match_info["component"], request.match_info["name"]
    params = params_of(request, vhost)
    if request.method in ("GET", "HEAD"):
        value = params.store.get(component, name)
        if value is None:
            raise not_found()
        return web.json_response({"name": name, "vhost": vhost.name, "component": component, "value": value})
    if request.method == "DELETE":
        if not params.delete(component, name):
            raise not_found()
        return web.Response(status=204)
    if request.method != "PUT":
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "PUT", "DELETE"])
    body = await body_json(request)
    if "value" not in body:
        raise HTTPError(400, "Field 'value' is required")
    try:
        existed = params.set(component, name, body["value"], request["user"])
    except ParameterError as exc:
        raise HTTPError(400, str(exc))
    except PermissionError as exc:
        raise HTTPError(403, str(exc))
    return web.Response(status=204 if existed else 201)


def add_routes(app):
    r = app.router
    r.add_get("/api/parameters", list_parameters)
    r.add_get("/api/parameters/{component}", list_parameters)
    r.add_get("/api/parameters/{component}/{vhost}", list_parameters)
    r.add_route("*", "/api/parameters/{component}/{vhost}/{name}", one_parameter)

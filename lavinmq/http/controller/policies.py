"""/api/policies and /api/operator-policies, as RabbitMQ's management API.
The policies themselves live in the vhost (lavinmq.policy), which applies
them at once; these routes only check who may do what."""
from aiohttp import web

from lavinmq.http.helpers import HTTPError, POLICYMAKER, body_json, listing, not_found, require, vhost_of

ADMIN = {"administrator"}


def _vhosts(request):
    server = request.app["server"]
    user = request["user"]
    if "vhost" in request.match_info:
        return [vhost_of(request)]
    return [v for n, v in server.vhosts.items() if user.is_administrator or user.can_access(n)]


def _routes(operator):
    writer = ADMIN if operator else POLICYMAKER

    async def list_all(request):
        require(request, POLICYMAKER)       # as RabbitMQ: policies are not for every management user
        return listing(request, [p for v in _vhosts(request) for p in v.policies.listing(operator)])

    async def one(request):
        vhost = vhost_of(request)
        name = request.match_info["name"]
        if request.method in ("GET", "HEAD"):
            require(request, POLICYMAKER)
            p = vhost.policies.get(name, operator)
            if p is None:
                raise not_found()
            return web.json_response(p)
        require(request, writer)
        if request.method == "DELETE":
            if not vhost.policies.delete(name, operator):
                raise not_found()
            await vhost.policies.applied()      # applied in slices: answered once it is everywhere
            return web.Response(status=204)
        if request.method != "PUT":
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "PUT", "DELETE"])
        body = await body_json(request)
        try:
            existed = vhost.policies.set(name, body, operator)
        except ValueError as exc:
            raise HTTPError(400, str(exc))
        await vhost.policies.applied()
        return web.Response(status=204 if existed else 201)

    return list_all, one


def add_routes(app):
    r = app.router
    for prefix, operator in (("/api/policies", False), ("/api/operator-policies", True)):
        list_all, one = _routes(operator)
        r.add_get(prefix, list_all)
        r.add_get(prefix + "/{vhost}", list_all)
        r.add_route("*", prefix + "/{vhost}/{name}", one)

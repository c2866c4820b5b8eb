"""/api/shovels: each shovel's state (starting, running, paused, error with
its message, terminated) and LavinMQ's pause/resume, plus restart (PUT
.../restart, and RabbitMQ's DELETE /api/shovels/vhost/{vhost}/{name}/restart).
Shovels are defined with PUT /api/parameters/shovel/{vhost}/{name}."""
from aiohttp import web

from lavinmq.http.controller.parameters import params_of
from lavinmq.http.helpers import HTTPError, POLICYMAKER, listing, not_found, require, vhost_of, visible_vhosts


async def list_shovels(request):
    require(request, POLICYMAKER)
    return listing(request, [s.to_json() for v in visible_vhosts(request)
                             for s in params_of(request, v).shovels])


def _shovel(request):
    require(request, POLICYMAKER)
    vhost = vhost_of(request)
    store = params_of(request, vhost).shovels
    shovel = store.get(request.match_info["name"])
    if shovel is None:
        raise not_found()
    return store, shovel


async def get_shovel(request):
    _, shovel = _shovel(request)
    return web.json_response(shovel.to_json())


async def action(request):
    store, shovel = _shovel(request)
    verb = request.match_info["action"]
    if verb == "pause":
        if shovel.state in ("paused", "terminated"):
            raise HTTPError(422, f"shovel '{shovel.name}' is {shovel.state}", "unprocessable_entity")
        await store.pause(shovel.name)
    elif verb == "resume":
        if shovel.state != "paused":
            raise HTTPError(422, f"shovel '{shovel.name}' is not paused", "unprocessable_entity")
        store.resume(shovel.name)
    else:
        store.restart(shovel.name)
    return web.Response(status=204)


def add_routes(app):
    r = app.router
    r.add_get("/api/shovels", list_shovels)
    r.add_get("/api/shovels/{vhost}", list_shovels)
    r.add_get("/api/shovels/{vhost}/{name}", get_shovel)
    r.add_put("/api/shovels/{vhost}/{name}/{action:pause|resume|restart}", action)
    r.add_delete("/api/shovels/vhost/{vhost}/{name}/{action:restart}", action)

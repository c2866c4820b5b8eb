"""/api/queues: declared through the vhost's own methods, so the API shares
AMQP's checks and durability; purge, pause and resume."""
from aiohttp import web

from lavinmq.http import history, paging, shapes
from lavinmq.http.helpers import (MANAGEMENT, NO_CONTENT, body_json, check_user, created, listing, methods,
                                  not_exclusive, queue_of, require, typed, vhost_of, visible_vhosts)


async def list_queues(request):
    require(request, MANAGEMENT)
    queues = [q for v in visible_vhosts(request) for q in v.queues.values()]
    return (paging.fast_page(request, queues, shapes.queue, paging.QUEUE_SORT)
            or listing(request, queues, shapes.queue))


async def get_queue(request):
    require(request, MANAGEMENT)
    q = queue_of(request)[1]
    return web.json_response(history.augment(request, shapes.queue(q, details=True), id(q), q,
                                             lengths=history.QUEUE_LENGTHS, msg_rates=history.QUEUE_RATES))


async def put_queue(request):
    require(request, MANAGEMENT)
    vhost = vhost_of(request)
    body = await body_json(request)
    name = request.match_info["queue"]
    check_user(request, "configure", vhost, name)
    existed = name in vhost.queues
    vhost.declare_queue(name, typed(body, "durable", bool, True), None, typed(body, "auto_delete", bool, False),
                        typed(body, "arguments", dict, {}))
    return created(existed)


async def delete_queue(request):
    require(request, MANAGEMENT)
    vhost, q = queue_of(request)
    check_user(request, "configure", vhost, q.name)
    not_exclusive(vhost, q, 40)
    vhost.delete_queue(q.name, if_unused=request.query.get("if-unused") == "true",
                       if_empty=request.query.get("if-empty") == "true")
    return web.Response(status=NO_CONTENT)


async def purge_queue(request):
    require(request, MANAGEMENT)
    vhost, q = queue_of(request)
    check_user(request, "read", vhost, q.name)
    not_exclusive(vhost, q, 30)
    q.purge()
    return web.Response(status=NO_CONTENT)


async def pause_queue(request):
    """LavinMQ's PUT /api/queues/{vhost}/{name}/pause and /resume."""
    require(request, MANAGEMENT)
    vhost, q = queue_of(request)
    check_user(request, "configure", vhost, q.name)
    not_exclusive(vhost, q, 10)         # another connection's exclusive queue is not ours to stop
    if request.match_info["action"] == "pause":
        q.pause()
    else:
        q.resume()
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/queues", list_queues)
    r.add_get("/api/queues/{vhost}", list_queues)
    r.add_route("*", "/api/queues/{vhost}/{queue}", methods(get_queue, put_queue, delete_queue))
    r.add_delete("/api/queues/{vhost}/{queue}/contents", purge_queue)
    r.add_put("/api/queues/{vhost}/{queue}/{action:pause|resume}", pause_queue)

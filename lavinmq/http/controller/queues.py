"""/api/queues: declared through the vhost's own methods, so the API shares
AMQP's checks and durability; purge, pause, resume and restart."""
from aiohttp import web

from lavinmq.arguments import check_client_queue
from lavinmq.http import history, paging, shapes
from lavinmq.http.helpers import (MANAGEMENT, HTTPError, NO_CONTENT, body_json, check_user, created, listing, methods,
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
    arguments = typed(body, "arguments", dict, {})
    check_client_queue(arguments)
    vhost.declare_queue(name, typed(body, "durable", bool, True), None, typed(body, "auto_delete", bool, False),
                        arguments)
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


async def queue_unacked(request):
    """LavinMQ's GET /api/queues/{vhost}/{name}/unacked: the queue's
    messages delivered and not yet acked, by channel and consumer."""
    import time
    require(request, MANAGEMENT)
    vhost, q = queue_of(request)
    now = time.time() * 1000
    items = []
    for conn in list(vhost.connections):
        for ch in conn.open_channels():
            unacked_of = getattr(ch, "unacked_of", None)
            if unacked_of is None:
                continue
            for tag, consumer_tag, delivered_at in unacked_of(q):
                items.append({"delivery_tag": tag, "consumer_tag": consumer_tag or "Basic get",
                              "unacked_for_seconds": int((now - delivered_at) // 1000) if delivered_at else None,
                              "channel_name": f"{conn.name} ({ch.id})"})
    return listing(request, items)


async def pause_queue(request):
    """LavinMQ's PUT /api/queues/{vhost}/{name}/pause, /resume and /restart
    (a closed queue opened again from its files)."""
    require(request, MANAGEMENT)
    vhost, q = queue_of(request)
    check_user(request, "configure", vhost, q.name)
    not_exclusive(vhost, q, 10)         # another connection's exclusive queue is not ours to stop
    action = request.match_info["action"]
    if action == "pause":
        q.pause()
    elif action == "resume":
        q.resume()
    elif not vhost.restart_queue(q.name):
        # LavinMQ's answer; only a closed queue is restarted
        raise HTTPError(400, "Queue was not restarted" + ("" if q.closed else ": it is not closed"))
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/queues", list_queues)
    r.add_get("/api/queues/{vhost}", list_queues)
    r.add_route("*", "/api/queues/{vhost}/{queue}", methods(get_queue, put_queue, delete_queue))
    r.add_delete("/api/queues/{vhost}/{queue}/contents", purge_queue)
    r.add_get("/api/queues/{vhost}/{queue}/unacked", queue_unacked)
    r.add_put("/api/queues/{vhost}/{queue}/{action:pause|resume|restart}", pause_queue)

"""/api/bindings and the bindings of one exchange or queue."""
import asyncio

from aiohttp import web

from lavinmq.exchange import DefaultExchange
from lavinmq.http import shapes
from lavinmq.http.helpers import (MANAGEMENT, NO_CONTENT, body_json, check_user, exchange_of, listing, methods,
                                  not_found, queue_of, require, typed, vhost_of, visible_vhosts)


def _bindings(vhosts):
    for v in vhosts:
        for ex in v.exchanges.values():
            if isinstance(ex, DefaultExchange):
                continue
            for b in ex.bindings.values():
                yield v, b


async def list_bindings(request):
    require(request, MANAGEMENT)
    return listing(request, list(_bindings(visible_vhosts(request))), _shape)


def _shape(vhost_and_binding):
    return shapes.binding(*vhost_and_binding)


async def exchange_bindings(request):
    require(request, MANAGEMENT)
    vhost, ex = exchange_of(request)
    if request.match_info["dir"] == "source":
        items = [shapes.binding(vhost, b) for b in ex.bindings.values()]
    else:
        items = [shapes.binding(vhost, b) for _, b in _bindings([vhost]) if b.destination is ex]
    return listing(request, items)


async def queue_bindings(request):
    require(request, MANAGEMENT)
    vhost, q = queue_of(request)
    items = [shapes.default_binding(vhost, q)]
    items += [shapes.binding(vhost, b) for _, b in _bindings([vhost]) if b.destination is q]
    return listing(request, items)


def _pair(request):
    vhost = vhost_of(request)
    src = vhost.exchanges.get(request.match_info["source"])
    kind = request.match_info["kind"]
    dest_name = request.match_info["dest"]
    dest = (vhost.queues if kind == "q" else vhost.exchanges).get(dest_name)
    if src is None or dest is None:
        raise not_found()
    return vhost, src, kind, dest


async def pair_bindings(request):
    require(request, MANAGEMENT)
    vhost, src, kind, dest = _pair(request)
    return listing(request, [shapes.binding(vhost, b) for b in src.bindings.values() if b.destination is dest])


async def post_binding(request):
    require(request, MANAGEMENT)
    vhost, src, kind, dest = _pair(request)
    body = await body_json(request)
    rk = typed(body, "routing_key", str, "")
    args = typed(body, "arguments", dict, {})
    check_user(request, "write", vhost, dest.name)
    check_user(request, "read", vhost, src.name)
    if kind == "q":
        replay = vhost.bind_queue(dest.name, src.name, rk, args)
        if replay is not None:
            # a persistent exchange copies stored messages: answered when they are in the queue
            done = asyncio.get_running_loop().create_future()
            replay.when_done(lambda: done.done() or done.set_result(None))
            await done
    else:
        vhost.bind_exchange(dest.name, src.name, rk, args)
    key = shapes.properties_key(rk, args)
    return web.Response(status=201, headers={"Location": key})


async def binding_by_key(request):
    require(request, MANAGEMENT)
    vhost, src, kind, dest = _pair(request)
    key = request.match_info["props"]
    for b in list(src.bindings.values()):
        if b.destination is dest and shapes.properties_key(b.routing_key, b.arguments) == key:
            if request.method == "GET":
                return web.json_response(shapes.binding(vhost, b))
            # as queue.unbind/exchange.unbind: write on the destination, read on the source
            check_user(request, "write", vhost, dest.name)
            check_user(request, "read", vhost, src.name)
            if kind == "q":
                vhost.unbind_queue(dest.name, src.name, b.routing_key, b.arguments)
            else:
                vhost.unbind_exchange(dest.name, src.name, b.routing_key, b.arguments)
            return web.Response(status=NO_CONTENT)
    raise not_found()


def add_routes(app):
    r = app.router
    r.add_get("/api/exchanges/{vhost}/{exchange}/bindings/{dir:source|destination}", exchange_bindings)
    r.add_get("/api/queues/{vhost}/{queue}/bindings", queue_bindings)
    r.add_get("/api/bindings", list_bindings)
    r.add_get("/api/bindings/{vhost}", list_bindings)
    r.add_route("*", "/api/bindings/{vhost}/e/{source}/{kind:q|e}/{dest}", methods(pair_bindings, None, None,
                                                                                  post_binding))
    r.add_route("*", "/api/bindings/{vhost}/e/{source}/{kind:q|e}/{dest}/{props}",
                methods(binding_by_key, None, binding_by_key))

"""/api/exchanges: declared through the vhost's own methods, so the API
shares AMQP's checks and durability (definitions.amqp)."""
from aiohttp import web

from lavinmq.exchange import DefaultExchange
from lavinmq.http import history, paging, shapes
from lavinmq.http.helpers import (HTTPError, MANAGEMENT, NO_CONTENT, body_json, check_user, created, exchange_of,
                                  listing, methods, require, typed, vhost_of, visible_vhosts)


async def list_exchanges(request):
    require(request, MANAGEMENT)
    exchanges = [ex for v in visible_vhosts(request) for ex in v.exchanges.values()]
    return (paging.fast_page(request, exchanges, shapes.exchange, paging.EXCHANGE_SORT)
            or listing(request, exchanges, shapes.exchange))


async def get_exchange(request):
    require(request, MANAGEMENT)
    ex = exchange_of(request)[1]
    return web.json_response(history.augment(request, shapes.exchange(ex), id(ex), ex,
                                             msg_rates=history.EXCHANGE_RATES))


async def put_exchange(request):
    require(request, MANAGEMENT)
    vhost = vhost_of(request)
    body = await body_json(request)
    name = request.match_info["exchange"]
    check_user(request, "configure", vhost, name)
    existed = name in vhost.exchanges
    vhost.declare_exchange(name, typed(body, "type", str), typed(body, "durable", bool, True),
                           typed(body, "auto_delete", bool, False), typed(body, "internal", bool, False),
                           typed(body, "arguments", dict, {}))
    return created(existed)


async def delete_exchange(request):
    require(request, MANAGEMENT)
    vhost, ex = exchange_of(request)
    check_user(request, "configure", vhost, ex.name)
    if isinstance(ex, DefaultExchange) or ex.name.startswith("amq."):
        raise HTTPError(403, f"cannot delete the predeclared exchange '{ex.name}'")
    vhost.delete_exchange(ex.name, if_unused=request.query.get("if-unused") == "true")
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/exchanges", list_exchanges)
    r.add_get("/api/exchanges/{vhost}", list_exchanges)
    r.add_route("*", "/api/exchanges/{vhost}/{exchange}", methods(get_exchange, put_exchange, delete_exchange))

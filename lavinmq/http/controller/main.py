"""The broker as a whole: /api/overview, whoami, aliveness, cluster name,
extensions and the OpenAPI document."""
import lavinmq
from aiohttp import web

from lavinmq.exchange import DECLARABLE_TYPES
from lavinmq.http import compat, history, shapes
from lavinmq.http.helpers import MANAGEMENT, require, vhost_of
from lavinmq.http.stats import rates_for


def totals(server):
    queues = [q for v in server.vhosts.values() for q in v.queues.values()]
    conns = [c for c in server.connections if c.vhost is not None]
    chans = [ch for c in conns for ch in c.open_channels()]
    return queues, conns, chans


def _visible_totals(request):
    """Administrators and monitoring see the whole broker; other users the
    vhosts they have permissions on, as RabbitMQ's overview."""
    server = request.app["server"]
    user = request["user"]
    queues, conns, chans = totals(server)
    if user.is_administrator or "monitoring" in user.tags:
        return queues, conns, chans, list(server.vhosts.values())
    vhosts = [v for n, v in server.vhosts.items() if user.can_access(n)]
    conns = [c for c in conns if c.vhost in vhosts]
    return ([q for q in queues if q.vhost in vhosts], conns,
            [ch for c in conns for ch in c.open_channels()], vhosts)


def _rates(server, vhosts):
    if len(vhosts) == len(server.vhosts):
        return rates_for("overall")
    out = {}
    for v in vhosts:
        for k, r in (rates_for(("vhost", v.name)) or {}).items():
            out[k] = out.get(k, 0) + r
    return out


async def overview(request):
    require(request, MANAGEMENT)
    server = request.app["server"]
    queues, conns, chans, vhosts = _visible_totals(request)
    return web.json_response(history.augment(request, {
        "management_version": lavinmq.__version__, "product_name": "LavinMQ",
        "product_version": lavinmq.__version__, "lavinmq_version": lavinmq.__version__,
        "rabbitmq_version": "3.10.8", "node": shapes.node_name(), "cluster_name": shapes.node_name(),
        "uptime": shapes.uptime_ms(server.started), "rates_mode": "basic",
        "exchange_types": [{"name": t, "description": text, "enabled": True}
                           for t, text in DECLARABLE_TYPES.items()],
        "object_totals": {"connections": len(conns), "channels": len(chans),
                          "consumers": sum(len(q.consumers) for q in queues), "queues": len(queues),
                          "exchanges": sum(len(v.exchanges) for v in vhosts),
                          "bindings": sum(v.binding_count() for v in vhosts)},
        **compat.overview_extra(server, queues, chans, vhosts, _rates(server, vhosts)),
        # a cluster's leader says so (a follower's control socket answers "follower")
        **({"role": "leader"} if getattr(server, "cluster", None) is not None else {}),
    }, "overall", lengths=history.OVERVIEW_LENGTHS, msg_rates=history.QUEUE_RATES))


async def whoami(request):
    user = request["user"]
    return web.json_response({"name": user.name, "tags": list(user.tags)})


async def aliveness(request):
    require(request, MANAGEMENT)
    vhost_of(request)
    return web.json_response({"status": "ok"})


async def cluster_name(request):
    require(request, MANAGEMENT)
    return web.json_response({"name": shapes.node_name()})


async def extensions(request):
    require(request, MANAGEMENT)
    return web.json_response([])      # no UI plugins


async def openapi(request):
    from lavinmq.http.openapi import DOCUMENT
    return web.json_response(DOCUMENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/openapi.json", openapi)
    r.add_get("/api/cluster-name", cluster_name)
    r.add_get("/api/extensions", extensions)
    r.add_get("/api/overview", overview)
    r.add_get("/api/whoami", whoami)
    r.add_get("/api/aliveness-test/{vhost}", aliveness)

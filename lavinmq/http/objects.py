"""Routes for the things operators create: vhosts, users, permissions,
exchanges, queues, bindings, policies and definitions. Declarations go
through the vhost's own methods, so the API shares AMQP's checks and
durability (definitions.amqp)."""
import json
import os

from aiohttp import web

from lavinmq.auth.password import algorithm_name
from lavinmq.exchange import DefaultExchange
from lavinmq.http.app import (HTTPError, MANAGEMENT, POLICYMAKER, body_json, listing, not_found,
                              require, require_vhost, typed, vhost_of)
from lavinmq.http import history, paging, shapes

ADMIN = {"administrator"}
NO_CONTENT = 204


def created(existed):
    return web.Response(status=NO_CONTENT if existed else 201)


# -- vhosts --------------------------------------------------------------------

async def list_vhosts(request):
    require(request, MANAGEMENT)
    user = request["user"]
    server = request.app["server"]
    return listing(request, [shapes.vhost(v, server) for n, v in server.vhosts.items()
                             if user.is_administrator or user.can_access(n)])


async def get_vhost(request):
    require(request, MANAGEMENT)
    v = vhost_of(request)
    return web.json_response(history.augment(request, shapes.vhost(v, request.app["server"]), ("vhost", v.name),
                                             lengths=history.QUEUE_LENGTHS, msg_rates=history.QUEUE_RATES))


async def put_vhost(request):
    require(request, ADMIN)
    await body_json(request)
    server = request.app["server"]
    name = request.match_info["vhost"]
    existed = name in server.vhosts
    server.add_vhost(name)
    if not existed:     # as RabbitMQ: the creating user may use it
        server.users.set_permissions(request["user"].name, name, ".*", ".*", ".*")
    return created(existed)


async def delete_vhost(request):
    require(request, ADMIN)
    if not request.app["server"].delete_vhost(request.match_info["vhost"]):
        raise not_found()
    return web.Response(status=NO_CONTENT)


# -- users and permissions -------------------------------------------------------

async def list_users(request):
    require(request, ADMIN)
    return listing(request, [shapes.user(u) for u in request.app["server"].users.users.values()])


async def get_user(request):
    require(request, ADMIN)
    u = request.app["server"].users.get(request.match_info["user"])
    if u is None:
        raise not_found()
    return web.json_response(shapes.user(u))


async def put_user(request):
    require(request, ADMIN)
    body = await body_json(request)
    users = request.app["server"].users
    name = request.match_info["user"]
    existed = name in users
    tags = body.get("tags", "")
    if isinstance(tags, list) and all(isinstance(t, str) for t in tags):
        tags = ",".join(tags)
    elif not isinstance(tags, str):
        raise HTTPError(400, "tags must be a string or a list of strings")
    try:
        if "password" in body:
            users.add_user(name, password=typed(body, "password", str), tags=tags)
        elif "password_hash" in body:
            users.add_user(name, password_hash=typed(body, "password_hash", str), tags=tags,
                           hashing_algorithm=typed(body, "hashing_algorithm", str,
                                                   "rabbit_password_hashing_sha256") or "rabbit_password_hashing_sha256")
        elif existed:       # as LavinMQ: tags only, the password stays
            users.set_tags(name, tags)
        else:
            raise HTTPError(400, "password or password_hash must be given")
    except ValueError as exc:
        raise HTTPError(400, str(exc))
    return created(existed)


async def delete_user(request):
    require(request, ADMIN)
    if not request.app["server"].users.delete_user(request.match_info["user"]):
        raise not_found()
    return web.Response(status=NO_CONTENT)


async def bulk_delete_users(request):
    """POST /api/users/bulk-delete {"users": [...]}: one write of users.json."""
    require(request, ADMIN)
    body = await body_json(request)
    names = typed(body, "users", list)
    if not all(isinstance(n, str) for n in names):
        raise HTTPError(400, "users must be a list of names")
    users = request.app["server"].users
    with users.batch():
        for name in names:
            users.delete_user(name)
    return web.Response(status=NO_CONTENT)


async def list_permissions(request):
    require(request, ADMIN)
    users = request.app["server"].users.users.values()
    vhost = request.match_info.get("vhost")
    if vhost is not None:
        vhost_of(request)
    return listing(request, [shapes.permission(u.name, v, p) for u in users for v, p in u.permissions.items()
                             if vhost is None or v == vhost])


async def user_permissions(request):
    require(request, ADMIN)
    u = request.app["server"].users.get(request.match_info["user"])
    if u is None:
        raise not_found()
    return listing(request, [shapes.permission(u.name, v, p) for v, p in u.permissions.items()])


async def get_permission(request):
    require(request, ADMIN)
    u = request.app["server"].users.get(request.match_info["user"])
    vhost = request.match_info["vhost"]
    if u is None or vhost not in u.permissions:
        raise not_found()
    return web.json_response(shapes.permission(u.name, vhost, u.permissions[vhost]))


async def put_permission(request):
    require(request, ADMIN)
    body = await body_json(request)
    server = request.app["server"]
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    if user not in server.users or vhost not in server.vhosts:
        raise HTTPError(400, f"user {user!r} or vhost {vhost!r} does not exist")
    existed = vhost in server.users.get(user).permissions
    try:
        server.users.set_permissions(user, vhost, typed(body, "configure", str, ""), typed(body, "write", str, ""),
                                     typed(body, "read", str, ""))
    except ValueError as exc:
        raise HTTPError(400, str(exc))
    return created(existed)


async def delete_permission(request):
    require(request, ADMIN)
    users = request.app["server"].users
    user = request.match_info["user"]
    if user not in users or not users.clear_permissions(user, request.match_info["vhost"]):
        raise not_found()
    return web.Response(status=NO_CONTENT)


# -- exchanges -------------------------------------------------------------------

def _all_vhosts(request):
    server = request.app["server"]
    user = request["user"]
    if "vhost" in request.match_info:
        return [vhost_of(request)]
    return [v for n, v in server.vhosts.items() if user.is_administrator or user.can_access(n)]


async def list_exchanges(request):
    require(request, MANAGEMENT)
    exchanges = [ex for v in _all_vhosts(request) for ex in v.exchanges.values()]
    return (paging.fast_page(request, exchanges, shapes.exchange, paging.EXCHANGE_SORT)
            or listing(request, [shapes.exchange(ex) for ex in exchanges]))


def _exchange(request):
    vhost = vhost_of(request)
    name = request.match_info["exchange"]
    ex = vhost.exchanges.get("" if name == "amq.default" else name)   # RabbitMQ's URL name for ""
    if ex is None:
        raise not_found()
    return vhost, ex


async def get_exchange(request):
    require(request, MANAGEMENT)
    ex = _exchange(request)[1]
    return web.json_response(history.augment(request, shapes.exchange(ex), id(ex), ex,
                                             msg_rates=history.EXCHANGE_RATES))


async def put_exchange(request):
    require(request, MANAGEMENT)
    vhost = vhost_of(request)
    body = await body_json(request)
    name = request.match_info["exchange"]
    _check_user(request, "configure", vhost, name)
    existed = name in vhost.exchanges
    vhost.declare_exchange(name, typed(body, "type", str), typed(body, "durable", bool, True),
                           typed(body, "auto_delete", bool, False), typed(body, "internal", bool, False),
                           typed(body, "arguments", dict, {}))
    return created(existed)


async def delete_exchange(request):
    require(request, MANAGEMENT)
    vhost, ex = _exchange(request)
    _check_user(request, "configure", vhost, ex.name)
    if isinstance(ex, DefaultExchange) or ex.name.startswith("amq."):
        raise HTTPError(403, f"cannot delete the predeclared exchange '{ex.name}'")
    vhost.delete_exchange(ex.name, if_unused=request.query.get("if-unused") == "true")
    return web.Response(status=NO_CONTENT)


# -- queues ----------------------------------------------------------------------

async def list_queues(request):
    require(request, MANAGEMENT)
    queues = [q for v in _all_vhosts(request) for q in v.queues.values()]
    return (paging.fast_page(request, queues, shapes.queue, paging.QUEUE_SORT)
            or listing(request, [shapes.queue(q) for q in queues]))


def _queue(request):
    vhost = vhost_of(request)
    q = vhost.queues.get(request.match_info["queue"])
    if q is None:
        raise not_found()
    return vhost, q


async def get_queue(request):
    require(request, MANAGEMENT)
    q = _queue(request)[1]
    return web.json_response(history.augment(request, shapes.queue(q, details=True), id(q), q,
                                             lengths=history.QUEUE_LENGTHS, msg_rates=history.QUEUE_RATES))


async def put_queue(request):
    require(request, MANAGEMENT)
    vhost = vhost_of(request)
    body = await body_json(request)
    name = request.match_info["queue"]
    _check_user(request, "configure", vhost, name)
    existed = name in vhost.queues
    vhost.declare_queue(name, typed(body, "durable", bool, True), None, typed(body, "auto_delete", bool, False),
                        typed(body, "arguments", dict, {}))
    return created(existed)


def _not_exclusive(vhost, q, method_id):
    """Another connection's exclusive queue is not the API's to touch, as
    over AMQP (405 RESOURCE_LOCKED, answered 400 like RabbitMQ's API)."""
    vhost.check_exclusive(q, None, 50, method_id)


async def delete_queue(request):
    require(request, MANAGEMENT)
    vhost, q = _queue(request)
    _check_user(request, "configure", vhost, q.name)
    _not_exclusive(vhost, q, 40)
    vhost.delete_queue(q.name, if_unused=request.query.get("if-unused") == "true",
                       if_empty=request.query.get("if-empty") == "true")
    return web.Response(status=NO_CONTENT)


async def purge_queue(request):
    require(request, MANAGEMENT)
    vhost, q = _queue(request)
    _check_user(request, "read", vhost, q.name)
    _not_exclusive(vhost, q, 30)
    q.purge()
    return web.Response(status=NO_CONTENT)


async def pause_queue(request):
    """LavinMQ's PUT /api/queues/{vhost}/{name}/pause and /resume."""
    require(request, MANAGEMENT)
    vhost, q = _queue(request)
    _check_user(request, "configure", vhost, q.name)
    _not_exclusive(vhost, q, 10)        # another connection's exclusive queue is not ours to stop
    if request.match_info["action"] == "pause":
        q.pause()
    else:
        q.resume()
    return web.Response(status=NO_CONTENT)


# -- bindings --------------------------------------------------------------------

def _bindings(vhosts):
    for v in vhosts:
        for ex in v.exchanges.values():
            if isinstance(ex, DefaultExchange):
                continue
            for b in ex.bindings.values():
                yield v, b


async def list_bindings(request):
    require(request, MANAGEMENT)
    return listing(request, [shapes.binding(v, b) for v, b in _bindings(_all_vhosts(request))])


async def exchange_bindings(request):
    require(request, MANAGEMENT)
    vhost, ex = _exchange(request)
    if request.match_info["dir"] == "source":
        items = [shapes.binding(vhost, b) for b in ex.bindings.values()]
    else:
        items = [shapes.binding(vhost, b) for _, b in _bindings([vhost]) if b.destination is ex]
    return listing(request, items)


async def queue_bindings(request):
    require(request, MANAGEMENT)
    vhost, q = _queue(request)
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
    _check_user(request, "write", vhost, dest.name)
    _check_user(request, "read", vhost, src.name)
    if kind == "q":
        vhost.bind_queue(dest.name, src.name, rk, args)
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
            _check_user(request, "write", vhost, dest.name)
            _check_user(request, "read", vhost, src.name)
            if kind == "q":
                vhost.unbind_queue(dest.name, src.name, b.routing_key, b.arguments)
            else:
                vhost.unbind_exchange(dest.name, src.name, b.routing_key, b.arguments)
            return web.Response(status=NO_CONTENT)
    raise not_found()


# -- definitions -------------------------------------------------------------------

async def get_definitions(request):
    require(request, ADMIN)
    server = request.app["server"]
    only = request.match_info.get("vhost")
    if only is not None:
        vhost_of(request)
    return web.json_response(shapes.definitions(server, only))


async def post_definitions(request):
    require(request, ADMIN)
    body = await body_json(request)
    only = request.match_info.get("vhost")
    if only is not None:
        vhost_of(request)
    from lavinmq.http.importer import import_definitions
    import_definitions(request.app["server"], body, only)
    from lavinmq.policy import all_applied
    await all_applied(request.app["server"].vhosts.values())   # policies apply in slices
    return web.Response(status=NO_CONTENT)


def _check_user(request, kind, vhost, name):
    user = request["user"]
    allowed = {"configure": user.can_configure, "write": user.can_write, "read": user.can_read}[kind]
    if not allowed(vhost.name, name):
        raise HTTPError(403, f"access to '{name}' in vhost '{vhost.name}' refused for user '{user.name}'")


def add_routes(app):
    r = app.router
    r.add_get("/api/vhosts", list_vhosts)
    r.add_route("*", "/api/vhosts/{vhost}", _method(get_vhost, put_vhost, delete_vhost))
    r.add_get("/api/users", list_users)
    r.add_post("/api/users/bulk-delete", bulk_delete_users)
    r.add_route("*", "/api/users/{user}", _method(get_user, put_user, delete_user))
    r.add_get("/api/permissions", list_permissions)
    r.add_get("/api/users/{user}/permissions", user_permissions)
    r.add_get("/api/vhosts/{vhost}/permissions", list_permissions)
    r.add_route("*", "/api/permissions/{vhost}/{user}", _method(get_permission, put_permission, delete_permission))
    r.add_get("/api/exchanges", list_exchanges)
    r.add_get("/api/exchanges/{vhost}", list_exchanges)
    r.add_route("*", "/api/exchanges/{vhost}/{exchange}", _method(get_exchange, put_exchange, delete_exchange))
    r.add_get("/api/exchanges/{vhost}/{exchange}/bindings/{dir:source|destination}", exchange_bindings)
    r.add_get("/api/queues", list_queues)
    r.add_get("/api/queues/{vhost}", list_queues)
    r.add_route("*", "/api/queues/{vhost}/{queue}", _method(get_queue, put_queue, delete_queue))
    r.add_delete("/api/queues/{vhost}/{queue}/contents", purge_queue)
    r.add_put("/api/queues/{vhost}/{queue}/{action:pause|resume}", pause_queue)
    r.add_get("/api/queues/{vhost}/{queue}/bindings", queue_bindings)
    r.add_get("/api/bindings", list_bindings)
    r.add_get("/api/bindings/{vhost}", list_bindings)
    r.add_route("*", "/api/bindings/{vhost}/e/{source}/{kind:q|e}/{dest}", _method(pair_bindings, None, None,
                                                                                   post_binding))
    r.add_route("*", "/api/bindings/{vhost}/e/{source}/{kind:q|e}/{dest}/{props}",
                _method(binding_by_key, None, binding_by_key))
    add_limit_and_parameter_routes(app)
    r.add_get("/api/definitions", get_definitions)
    r.add_post("/api/definitions", post_definitions)
    r.add_get("/api/definitions/{vhost}", get_definitions)
    r.add_post("/api/definitions/{vhost}", post_definitions)


def _method(get, put=None, delete=None, post=None):
    table = {"GET": get, "HEAD": get, "PUT": put, "DELETE": delete, "POST": post}

    async def dispatch(request):
        handler = table.get(request.method)
        if handler is None:
            raise web.HTTPMethodNotAllowed(request.method, [m for m, h in table.items() if h])
        return await handler(request)
    return dispatch


# -- vhost limits and runtime parameters -----------------------------------------------

async def list_vhost_limits(request):
    require(request, MANAGEMENT)
    return web.json_response([{"vhost": v.name, "value": dict(v.limits)} for v in _all_vhosts(request)
                              if v.limits])


async def put_vhost_limit(request):
    require(request, ADMIN)
    vhost = vhost_of(request)
    body = await body_json(request)
    name = request.match_info["name"]
    value = body.get("value")
    try:
        request.app["server"].set_vhost_limits(vhost.name, {**vhost.limits, name: value})
    except ValueError as exc:
        raise HTTPError(400, str(exc))
    return web.Response(status=NO_CONTENT)


async def delete_vhost_limit(request):
    require(request, ADMIN)
    vhost = vhost_of(request)
    name = request.match_info["name"]
    if name not in vhost.limits:
        raise not_found()
    request.app["server"].set_vhost_limits(vhost.name, {k: v for k, v in vhost.limits.items() if k != name})
    return web.Response(status=NO_CONTENT)


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


def add_limit_and_parameter_routes(app):
    r = app.router
    r.add_get("/api/vhost-limits", list_vhost_limits)
    r.add_get("/api/vhost-limits/{vhost}", list_vhost_limits)
    r.add_route("*", "/api/vhost-limits/{vhost}/{name}", _method(None, put_vhost_limit, delete_vhost_limit))
    r.add_get("/api/parameters", list_parameters)
    r.add_get("/api/parameters/{component}", list_parameters)
    r.add_get("/api/parameters/{component}/{vhost}", list_parameters)
    r.add_route("*", "/api/parameters/{component}/{vhost}/{name}", _method(get_parameter, put_parameter,
                                                                          get_parameter))

"""/api/operator-policies: policies an administrator sets over the users'
own, limited to the keys RabbitMQ accepts in them. Kept per vhost in
operator_policies.json, as policies.json (objects.py) beside it."""
import json
import os

from aiohttp import web

from lavinmq.http.app import HTTPError, MANAGEMENT, body_json, listing, not_found, require, vhost_of

ADMIN = {"administrator"}
# RabbitMQ's operator_policy_validator keys
ALLOWED = {"expires", "message-ttl", "max-length", "max-length-bytes", "max-in-memory-length",
           "max-in-memory-bytes", "delivery-limit", "queue-version", "overflow"}


def _file(vhost):
    return os.path.join(vhost.dir, "operator_policies.json")


def operator_policies_of(vhost):
    if not hasattr(vhost, "operator_policies"):
        try:
            with open(_file(vhost)) as f:
                vhost.operator_policies = json.load(f)
        except (FileNotFoundError, ValueError):
            vhost.operator_policies = {}
    return vhost.operator_policies


def _save(vhost):
    tmp = _file(vhost) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(vhost.operator_policies, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, _file(vhost))


def _vhosts(request):
    server = request.app["server"]
    user = request["user"]
    if "vhost" in request.match_info:
        return [vhost_of(request)]
    return [v for n, v in server.vhosts.items() if user.is_administrator or user.can_access(n)]


async def list_operator_policies(request):
    require(request, MANAGEMENT)
    return listing(request, [dict(p, vhost=v.name, name=n)
                             for v in _vhosts(request) for n, p in operator_policies_of(v).items()])


async def operator_policy(request):
    vhost = vhost_of(request)
    name = request.match_info["name"]
    policies = operator_policies_of(vhost)
    if request.method in ("GET", "HEAD"):
        require(request, MANAGEMENT)
        if name not in policies:
            raise not_found()
        return web.json_response(dict(policies[name], vhost=vhost.name, name=name))
    require(request, ADMIN)
    if request.method == "DELETE":
        if policies.pop(name, None) is None:
            raise not_found()
        _save(vhost)
        return web.Response(status=204)
    if request.method != "PUT":
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "PUT", "DELETE"])
    from lavinmq.http.objects import validate_policy
    policy = validate_policy(await body_json(request))
    unknown = sorted(set(policy["definition"]) - ALLOWED)
    if unknown:
        raise HTTPError(400, f"not allowed in an operator policy: {', '.join(unknown)}")
    if policy["apply-to"] == "exchanges":
        raise HTTPError(400, "operator policies apply to queues")
    existed = name in policies
    policies[name] = policy
    _save(vhost)
    return web.Response(status=204 if existed else 201)


def add_routes(app):
    r = app.router
    r.add_get("/api/operator-policies", list_operator_policies)
    r.add_get("/api/operator-policies/{vhost}", list_operator_policies)
    r.add_route("*", "/api/operator-policies/{vhost}/{name}", operator_policy)

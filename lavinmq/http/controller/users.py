"""/api/users: the broker's users."""
from aiohttp import web

from lavinmq.http import shapes
from lavinmq.http.helpers import ADMIN, HTTPError, NO_CONTENT, body_json, created, listing, methods, not_found, require, typed


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


def add_routes(app):
    r = app.router
    r.add_get("/api/users", list_users)
    r.add_post("/api/users/bulk-delete", bulk_delete_users)
    r.add_route("*", "/api/users/{user}", methods(get_user, put_user, delete_user))

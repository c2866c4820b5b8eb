"""What every route module of the management API uses: the error it
raises (HTTPError), RabbitMQ's tag rules, the JSON body, list parameters
(filter, sort, columns, pages) and lookups of the vhost, exchange, queue or
connection a request names. Imports no route module (tests/unit/
test_import_cycles.py keeps it so)."""
import asyncio
import json

from aiohttp import web

from lavinmq.http import name_filter, sliced

# tags -> what they may do, as RabbitMQ's management plugin
ADMIN = {"administrator"}
MONITORING = {"administrator", "monitoring"}
POLICYMAKER = {"administrator", "policymaker"}
MANAGEMENT = {"administrator", "monitoring", "policymaker", "management"}
NO_CONTENT = 204


class HTTPError(Exception):
    def __init__(self, status, reason, error=None):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.error = error or {400: "bad_request", 401: "not_authorised", 403: "not_authorised",
                               404: "Object Not Found", 405: "method_not_allowed"}.get(status, "error")


_MISSING = object()
KIND_NAMES = {bool: "a boolean", str: "a string", dict: "an object", int: "an integer", list: "a list"}


def not_found():
    return HTTPError(404, "Not Found")


def error_response(status, error, reason):
    return web.json_response({"error": error, "reason": reason}, status=status)


def require(request, tags):
    user = request.get("user")
    if user is None:        # the open metrics listener
        return
    if not set(user.tags) & tags:
        raise HTTPError(403, "Access refused.")


def require_vhost(request, vhost):
    user = request.get("user")
    if user is not None and not user.is_administrator and not user.can_access(vhost):
        raise HTTPError(403, "Access refused.")


async def body_json(request):
    """The request's JSON object, read within http_read_timeout."""
    try:
        async with asyncio.timeout(request.app["server"].config.http_read_timeout):
            raw = await request.read() if request.can_read_body else b""
    except TimeoutError:
        raise HTTPError(408, "request body not received in time (http_read_timeout)")
    data = parse_json(raw) if raw else {}
    if not isinstance(data, dict):
        raise HTTPError(400, "Malformed JSON: expected an object")
    return data


# Objects and arrays a request body may nest: a definitions file nests 5 or
# 6 deep with its arguments, and arguments are AMQP tables (32 levels at
# most). 100,000 levels made the parser raise RecursionError (a 500), and a
# value stored some hundreds deep would fail every listing that shows it.
MAX_JSON_DEPTH = 64


def parse_json(raw):
    """bytes -> the value, or HTTPError 400 (malformed, or nested deeper
    than MAX_JSON_DEPTH)."""
    too_deep = f"Malformed JSON: nested more than {MAX_JSON_DEPTH} levels deep"
    try:
        data = json.loads(raw)
    except RecursionError:
        raise HTTPError(400, too_deep) from None
    except ValueError as exc:
        raise HTTPError(400, f"Malformed JSON: {exc}") from None
    # as deep as it has brackets at most: a body with few is not walked
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _deeper_than(data, MAX_JSON_DEPTH):
        raise HTTPError(400, too_deep)
    return data


def _deeper_than(value, limit):
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        if depth > limit:
            return True
        stack.extend((x, depth + 1) for x in v if isinstance(x, (dict, list)))
    return False


def typed(body, key, kind, default=_MISSING):
    """body[key] checked against kind (bool, str, dict, int); a bad type is a
    400 naming the field. Booleans may also be "true"/"false" as RabbitMQ takes them."""
    value = body.get(key, default)
    if value is _MISSING:
        raise HTTPError(400, f"{key} is required")
    if value is None and default is not _MISSING:
        return default
    if kind is bool and value in ("true", "false"):
        return value == "true"
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise HTTPError(400, f"{key} must be {KIND_NAMES[kind]}, not {type(value).__name__}")


def listing(request, items, shape=None):
    """RabbitMQ's list parameters: name/use_regex filter, sort/sort_reverse,
    columns, page/page_size (which wraps the answer in a page object).
    With `shape`, items are objects it makes the JSON of: shaped, filtered
    and sent a slice of the event loop at a time (lavinmq.http.sliced), as
    a list of every queue must be."""
    q = request.query
    everything = len(items)
    page = _page_params(q)
    name = q.get("name")
    select = None
    if name:
        if q.get("use_regex") == "true":
            rx = linear_regex(name)

            async def select(kept):         # noqa: F811 (RE2, in slices)
                return await name_filter.select(kept, rx, _item_name)
        elif shape is None:
            items = [i for i in items if name in str(i.get("name", ""))]
        else:
            async def select(kept):         # noqa: F811
                return [i for i in kept if name in str(i.get("name", ""))]
    if shape is None and select is None:
        return web.json_response(_listed(q, items, everything, page))
    if select is None and page is None and not q.get("sort") and not q.get("columns"):
        return sliced.SlicedListing(items, shape, None, None)     # every item as it is: streamed
    return sliced.SlicedListing(items, shape, select, lambda kept: _listed(q, kept, everything, page))


def _item_name(item):
    return str(item.get("name", ""))


def _page_params(q):
    """(page, page_size) when a page is asked for, else None."""
    if "page" not in q:
        return None
    try:
        page = int(q["page"])
        size = int(q.get("page_size", 100))
    except ValueError:
        raise HTTPError(400, "page and page_size must be integers")
    if page < 1 or not 1 <= size <= 500:
        raise HTTPError(400, "page must be >= 1 and page_size between 1 and 500")
    return page, size


def _listed(q, items, everything, page):
    """The answer (a JSON value) from the filtered items."""
    sort = q.get("sort")
    if sort:
        def key(item):
            v = item
            for part in sort.split("."):
                v = v.get(part) if isinstance(v, dict) else None
            return (v is None, str(v) if not isinstance(v, (int, float)) else v)
        items = sorted(items, key=key, reverse=q.get("sort_reverse") == "true")
    columns = q.get("columns")
    if columns:
        cols = [c.split(".") for c in columns.split(",")]
        items = [pick(i, cols) for i in items]
    if page is not None:
        page, size = page
        total = len(items)
        chunk = items[(page - 1) * size: page * size]
        return {"filtered_count": total, "item_count": len(chunk), "items": chunk,
                "page": page, "page_count": max(1, -(-total // size)),
                "page_size": size, "total_count": everything}
    return items


def linear_regex(pattern):
    """A client's regex, matched in linear time (RE2: no backtracking;
    backreferences and lookarounds, and patterns that compile to a large
    program, are refused with a 400). lavinmq.http.name_filter bounds the
    matching itself."""
    try:
        return name_filter.compile_pattern(pattern)
    except name_filter.FilterRefused as exc:
        raise HTTPError(400, str(exc))


def pick(item, cols):
    out = {}
    for path in cols:
        src, dst = item, out
        for i, part in enumerate(path):
            if not isinstance(src, dict) or part not in src:
                break
            if i == len(path) - 1:
                dst[part] = src[part]
            else:
                src = src[part]
                dst = dst.setdefault(part, {})
    return out


def vhost_of(request):
    server = request.app["server"]
    name = request.match_info["vhost"]
    vhost = server.vhosts.get(name)
    if vhost is None:
        raise not_found()
    require_vhost(request, name)
    return vhost


def created(existed):
    return web.Response(status=NO_CONTENT if existed else 201)


def visible_vhosts(request):
    server = request.app["server"]
    user = request["user"]
    if "vhost" in request.match_info:
        return [vhost_of(request)]
    return [v for n, v in server.vhosts.items() if user.is_administrator or user.can_access(n)]


def exchange_of(request):
    vhost = vhost_of(request)
    name = request.match_info["exchange"]
    ex = vhost.exchanges.get("" if name == "amq.default" else name)   # RabbitMQ's URL name for ""
    if ex is None:
        raise not_found()
    return vhost, ex


def queue_of(request):
    vhost = vhost_of(request)
    q = vhost.queues.get(request.match_info["queue"])
    if q is None:
        raise not_found()
    return vhost, q


def not_exclusive(vhost, q, method_id):
    """Another connection's exclusive queue is not the API's to touch, as
    over AMQP (405 RESOURCE_LOCKED, answered 400 like RabbitMQ's API)."""
    vhost.check_exclusive(q, None, 50, method_id)


def check_user(request, kind, vhost, name):
    user = request["user"]
    allowed = {"configure": user.can_configure, "write": user.can_write, "read": user.can_read}[kind]
    if not allowed(vhost.name, name):
        raise HTTPError(403, f"access to '{name}' in vhost '{vhost.name}' refused for user '{user.name}'")


def methods(get, put=None, delete=None, post=None):
    table = {"GET": get, "HEAD": get, "PUT": put, "DELETE": delete, "POST": post}

    async def dispatch(request):
        handler = table.get(request.method)
        if handler is None:
            raise web.HTTPMethodNotAllowed(request.method, [m for m, h in table.items() if h])
        return await handler(request)
    return dispatch


def visible_connections(request):
    user = request["user"]
    conns = [c for c in request.app["server"].connections if c.vhost is not None]
    if user.is_administrator or "monitoring" in user.tags:
        return conns
    return [c for c in conns if c.user is not None and c.user.name == user.name]

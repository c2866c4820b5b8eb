"""The management HTTP API (RabbitMQ's routes and JSON shapes): the
aiohttp application, Basic auth by the broker's users with RabbitMQ's tag
rules, JSON errors, list query parameters, and the listeners: the TCP
management port, the control UNIX socket (lavinmqctl) and the
metrics-only port."""
import asyncio
import json
import logging
import os

from aiohttp import web

from lavinmq.errors import AMQPError
from lavinmq.http import name_filter
from lavinmq.listener import RateLimitedLog

log = logging.getLogger("lavinmq.http")
_login_log = RateLimitedLog(log)

# tags -> what they may do, as RabbitMQ's management plugin
MONITORING = {"administrator", "monitoring"}
POLICYMAKER = {"administrator", "policymaker"}
MANAGEMENT = {"administrator", "monitoring", "policymaker", "management"}


class HTTPError(Exception):
    def __init__(self, status, reason, error=None):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.error = error or {400: "bad_request", 401: "not_authorised", 403: "not_authorised",
                               404: "Object Not Found", 405: "method_not_allowed"}.get(status, "error")


def not_found():
    return HTTPError(404, "Not Found")


def error_response(status, error, reason):
    return web.json_response({"error": error, "reason": reason}, status=status)


# AMQP errors raised by the vhost's methods, as RabbitMQ's API answers them
AMQP_STATUS = {404: 404, 403: 403, 405: 400, 406: 400, 530: 400}


@web.middleware
async def errors_and_auth(request, handler):
    try:
        if not request.path.startswith("/api/") and request.path not in ("/metrics", "/metrics/detailed"):
            return await handler(request)
        if request.method not in SAFE_METHODS:
            check_not_cross_site(request)
        if not request.app.get("open"):
            request["user"] = await authenticate(request)
            ticket = getattr(request.protocol, "ticket", None)
            if ticket is not None:
                ticket.login()      # no longer a socket the connection guard may close for room
        return await handler(request)
    except HTTPError as exc:
        headers = {"WWW-Authenticate": 'Basic realm="LavinMQ Management"'} if exc.status == 401 else None
        resp = error_response(exc.status, exc.error, exc.reason)
        if headers:
            resp.headers.update(headers)
        return resp
    except AMQPError as exc:
        return error_response(AMQP_STATUS.get(exc.reply_code, 400), "bad_request", exc.reply_text)
    except (TypeError, ValueError, KeyError, UnicodeError, OverflowError) as exc:
        # input of a shape no handler checked for: still the client's fault, never a 500
        log.warning("HTTP %s %s: unexpected input: %r", request.method, request.path, exc)
        return error_response(400, "bad_request", f"bad request: {exc}")
    except web.HTTPException as exc:
        if exc.status == 405:
            return error_response(405, "Method Not Allowed", f"{request.method} is not allowed here")
        if exc.status == 404:
            return error_response(404, "Object Not Found", "Not Found")
        raise


SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def check_not_cross_site(request):
    """CSRF: a browser that holds the API's Basic credentials must not be
    made to change anything by another site. Forms and no-cors fetches
    cannot send Content-Type application/json, and a browser names the
    page's origin in Origin (and Sec-Fetch-Site) on every such request."""
    origin = request.headers.get("Origin")
    if origin is not None:
        import urllib.parse
        parts = urllib.parse.urlsplit(origin)
        if origin == "null" or parts.netloc.lower() != request.host.lower():
            raise HTTPError(403, f"cross-origin request from {origin} refused", "forbidden")
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        raise HTTPError(403, "cross-site request refused", "forbidden")
    # a body must be declared JSON (no request without a body changes state in
    # a way a form could use: a browser names the Origin of those anyway)
    if request.method in ("POST", "PUT") and request.content_type != "application/json" and (
            request.body_exists or "Content-Type" in request.headers):
        raise HTTPError(415, "Content-Type must be application/json", "unsupported_media_type")


async def authenticate(request):
    import base64
    import binascii
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        raise HTTPError(401, "Not_Authorized")
    try:
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise HTTPError(401, "Not_Authorized")
    server = request.app["server"]
    peer = request.remote or ""
    throttle = server.login_throttle
    key = throttle.key(peer, user, server.users.get(user) is not None)
    delay = throttle.delay_for(*key)
    if delay:
        # backing off (lavinmq.auth.throttle): answered late, whatever the password
        await asyncio.sleep(delay)
    u = server.users.authenticate(user, password)
    if u is None or (u.loopback_only and peer and not _is_loopback(peer)):
        throttle.failed(*key)
        _login_log("HTTP login refused for user %r from %s", user, peer)
        raise HTTPError(401, "Login failed")
    if not u.tags:
        raise HTTPError(401, "Login failed")       # users without any tag have no management access
    return u


def _is_loopback(host):
    from lavinmq.auth.users import is_loopback_address
    return is_loopback_address(host)


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
            data = await request.json() if request.can_read_body else {}
    except TimeoutError:
        raise HTTPError(408, "request body not received in time (http_read_timeout)")
    except ValueError as exc:
        raise HTTPError(400, f"Malformed JSON: {exc}")
    if not isinstance(data, dict):
        raise HTTPError(400, "Malformed JSON: expected an object")
    return data


_MISSING = object()
KIND_NAMES = {bool: "a boolean", str: "a string", dict: "an object", int: "an integer", list: "a list"}


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


def listing(request, items):
    """RabbitMQ's list parameters: name/use_regex filter, sort/sort_reverse,
    columns, page/page_size (which wraps the answer in a page object)."""
    q = request.query
    everything = len(items)
    page = _page_params(q)
    name = q.get("name")
    if name:
        if q.get("use_regex") == "true":
            # matched in slices with yields, in the response's prepare()
            return name_filter.FilteredListing(items, linear_regex(name), _item_name,
                                               lambda kept: _listed(q, kept, everything, page))
        items = [i for i in items if name in str(i.get("name", ""))]
    return _listed(q, items, everything, page)


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
        items = [_pick(i, cols) for i in items]
    if page is not None:
        page, size = page
        total = len(items)
        chunk = items[(page - 1) * size: page * size]
        return web.json_response({"filtered_count": total, "item_count": len(chunk), "items": chunk,
                                  "page": page, "page_count": max(1, -(-total // size)),
                                  "page_size": size, "total_count": everything})
    return web.json_response(items)


def linear_regex(pattern):
    """A client's regex, matched in linear time (RE2: no backtracking;
    backreferences and lookarounds, and patterns that compile to a large
    program, are refused with a 400). lavinmq.http.name_filter bounds the
    matching itself."""
    try:
        return name_filter.compile_pattern(pattern)
    except name_filter.FilterRefused as exc:
        raise HTTPError(400, str(exc))


def _pick(item, cols):
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


def build_app(server, open_access=False):
    from lavinmq.http import logs, messages, objects, policies, runtime, metrics, ui
    app = web.Application(middlewares=[errors_and_auth], client_max_size=64 * 1024 * 1024)
    app["server"] = server
    app["open"] = open_access
    if open_access:
        app.router.add_get("/metrics", metrics.metrics)
        app.router.add_get("/metrics/detailed", metrics.detailed)
        return app
    runtime.add_routes(app)
    objects.add_routes(app)
    policies.add_routes(app)
    messages.add_routes(app)
    logs.add_routes(app)
    ui.add_routes(app)
    app.router.add_get("/metrics", metrics.metrics)
    app.router.add_get("/metrics/detailed", metrics.detailed)
    return app


class HTTPServer:
    """The listeners; started and stopped with the broker."""

    def __init__(self, server):
        from lavinmq.http.stats import Sampler
        self.server = server
        self.runners = []
        self.listeners = []         # lavinmq.listener.Listener (TCP, TLS)
        self.unix_servers = []
        self.sampler = Sampler(server, server.config.stats_interval)
        from lavinmq.http import logs
        logs.install()

    async def start(self):
        from lavinmq.http import listen
        cfg = self.server.config
        guard = self.server.guard
        timeout = cfg.http_read_timeout
        self.sampler.start()
        mgmt = await self._runner(build_app(self.server))
        if cfg.http_port:
            self.listeners.append(listen.tcp_listener(mgmt, guard, cfg.http_bind, cfg.http_port, "HTTP port",
                                                      "--http-port / [mgmt] port", timeout))
        if cfg.https_port and self.server.tls_context is not None:
            self.listeners.append(listen.tcp_listener(mgmt, guard, cfg.http_bind, cfg.https_port, "HTTPS port",
                                                      "--https-port / [mgmt] tls_port", timeout,
                                                      self.server.tls_context))
        path = self.control_path
        control = await self._runner(build_app(self.server))
        self.unix_servers.append(await listen.unix_server(control, path, timeout))
        if cfg.metrics_http_port:
            metrics = await self._runner(build_app(self.server, open_access=True))
            self.listeners.append(listen.tcp_listener(metrics, guard, cfg.metrics_http_bind, cfg.metrics_http_port,
                                                      "metrics port",
                                                      "--metrics-http-port / [main] metrics_http_port", timeout))

    @property
    def control_path(self):
        cfg = self.server.config
        return cfg.control_unix_path or os.path.join(cfg.data_dir, "lavinmqctl.sock")

    def set_tls_context(self, ctx):
        for listener in self.listeners:
            if listener.ssl is not None:
                listener.ssl = ctx

    async def _runner(self, app):
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self.runners.append(runner)
        return runner

    async def stop(self):
        self.sampler.stop()
        for listener in self.listeners:
            listener.close()
        for server in self.unix_servers:
            server.close()
        for runner in self.runners:
            await runner.cleanup()
        # a clean stop leaves no socket file behind (a crash leaves one, replaced at the next start)
        try:
            if self.unix_servers:
                os.unlink(self.control_path)
        except OSError:
            pass


def dumps(value):
    return json.dumps(value, default=str)

"""The management HTTP API (RabbitMQ's routes and JSON shapes): the
aiohttp application, Basic auth by the broker's users with RabbitMQ's tag
rules, JSON errors, list query parameters, and the listeners: the TCP
management port, the control UNIX socket (lavinmqctl) and the
metrics-only port."""
import json
import logging
import os
import re

from aiohttp import web

from lavinmq.errors import AMQPError

log = logging.getLogger("lavinmq.http")

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
        if not request.path.startswith("/api/") and request.path not in ("/metrics",):
            return await handler(request)
        if not request.app.get("open"):
            request["user"] = authenticate(request)
        return await handler(request)
    except HTTPError as exc:
        headers = {"WWW-Authenticate": 'Basic realm="LavinMQ Management"'} if exc.status == 401 else None
        resp = error_response(exc.status, exc.error, exc.reason)
        if headers:
            resp.headers.update(headers)
        return resp
    except AMQPError as exc:
        return error_response(AMQP_STATUS.get(exc.reply_code, 400), "bad_request", exc.reply_text)
    except web.HTTPException as exc:
        if exc.status == 405:
            return error_response(405, "Method Not Allowed", f"{request.method} is not allowed here")
        if exc.status == 404:
            return error_response(404, "Object Not Found", "Not Found")
        raise


def authenticate(request):
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
    u = server.users.authenticate(user, password)
    if u is None:
        raise HTTPError(401, "Login failed")
    if not u.tags:
        raise HTTPError(401, "Login failed")       # users without any tag have no management access
    peer = request.remote or ""
    if u.loopback_only and peer and not _is_loopback(peer):
        raise HTTPError(401, "Login failed")
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
    try:
        data = await request.json() if request.can_read_body else {}
    except ValueError as exc:
        raise HTTPError(400, f"Malformed JSON: {exc}")
    if not isinstance(data, dict):
        raise HTTPError(400, "Malformed JSON: expected an object")
    return data


def listing(request, items):
    """RabbitMQ's list parameters: name/use_regex filter, sort/sort_reverse,
    columns, page/page_size (which wraps the answer in a page object)."""
    q = request.query
    everything = len(items)
    name = q.get("name")
    if name:
        if q.get("use_regex") == "true":
            try:
                rx = re.compile(name)
            except re.error as exc:
                raise HTTPError(400, f"bad regex: {exc}")
            items = [i for i in items if rx.search(str(i.get("name", "")))]
        else:
            items = [i for i in items if name in str(i.get("name", ""))]
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
    if "page" in q:
        try:
            page = int(q["page"])
            size = int(q.get("page_size", 100))
        except ValueError:
            raise HTTPError(400, "page and page_size must be integers")
        if page < 1 or not 1 <= size <= 500:
            raise HTTPError(400, "page must be >= 1 and page_size between 1 and 500")
        total = len(items)
        chunk = items[(page - 1) * size: page * size]
        return web.json_response({"filtered_count": total, "item_count": len(chunk), "items": chunk,
                                  "page": page, "page_count": max(1, -(-total // size)),
                                  "page_size": size, "total_count": everything})
    return web.json_response(items)


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
    from lavinmq.http import logs, messages, objects, operator_policies, runtime, metrics, ui
    app = web.Application(middlewares=[errors_and_auth], client_max_size=64 * 1024 * 1024)
    app["server"] = server
    app["open"] = open_access
    if open_access:
        app.router.add_get("/metrics", metrics.metrics)
        return app
    runtime.add_routes(app)
    objects.add_routes(app)
    messages.add_routes(app)
    operator_policies.add_routes(app)
    logs.add_routes(app)
    ui.add_routes(app)
    app.router.add_get("/metrics", metrics.metrics)
    return app


class HTTPServer:
    """The listeners; started and stopped with the broker."""

    def __init__(self, server):
        from lavinmq.http.stats import Sampler
        self.server = server
        self.runners = []
        self.sampler = Sampler(server, server.config.stats_interval)
        from lavinmq.http import logs
        logs.install()

    async def start(self):
        cfg = self.server.config
        self.sampler.start()
        if cfg.http_port:
            await self._site(build_app(self.server), "tcp", cfg.http_bind, cfg.http_port, "management")
        path = cfg.control_unix_path or os.path.join(cfg.data_dir, "lavinmqctl.sock")
        await self._site(build_app(self.server), "unix", path, None, "control")
        if cfg.metrics_http_port:
            await self._site(build_app(self.server, open_access=True), "tcp", cfg.metrics_http_bind,
                             cfg.metrics_http_port, "metrics")

    async def _site(self, app, kind, host, port, what):
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        if kind == "tcp":
            site = web.TCPSite(runner, host, port, reuse_address=True)
        else:
            try:
                os.unlink(host)
            except FileNotFoundError:
                pass
            site = web.UnixSite(runner, host)
        await site.start()
        if kind == "unix":
            os.chmod(host, 0o660)
        self.runners.append(runner)
        log.info("HTTP %s listening on %s", what, host if kind == "unix" else f"{host}:{port}")

    async def stop(self):
        self.sampler.stop()
        for runner in self.runners:
            await runner.cleanup()


def dumps(value):
    return json.dumps(value, default=str)

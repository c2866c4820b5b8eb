"""The management API's middleware: JSON errors (also for AMQP errors the
vhost raises), Basic auth by the broker's users, and the refusal of
cross-site requests."""
import asyncio
import logging
import re
import urllib.parse

from aiohttp import web

from lavinmq import long_work
from lavinmq.clustering import status as cluster_status
from lavinmq.errors import AMQPError
from lavinmq.http.helpers import HTTPError, error_response
from lavinmq.listener import RateLimitedLog

log = logging.getLogger("lavinmq.http")
_login_log = RateLimitedLog(log)

# AMQP errors raised by the vhost's methods, as RabbitMQ's API answers them
AMQP_STATUS = {404: 404, 403: 403, 405: 400, 406: 400, 530: 400}
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# LavinMQ's definitions upload takes a form's file (multipart/form-data)
UPLOAD_PATH = re.compile(r"\A/api/definitions(/[^/]+)?/upload\Z")


@web.middleware
async def errors_and_auth(request, handler):
    if not request.path.startswith("/api/") and request.path not in ("/metrics", "/metrics/detailed"):
        return await _errors_and_auth(request, handler)
    # an API answer is work on the loop (lists of thousands, policies, scrapes):
    # the fsync threads get the GIL between its slices (lavinmq.long_work)
    with long_work.running():
        return await _errors_and_auth(request, handler)


async def _errors_and_auth(request, handler):
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
        response = await handler(request)
        if request.method not in SAFE_METHODS and not await cluster_status.replicated(request.app["server"]):
            # a cluster's leader: the change is not on the in-sync replicas (the
            # leader lost its lease): it must not be reported done
            raise HTTPError(503, "the change could not be replicated: this node no longer leads",
                            "service_unavailable")
        return response
    except HTTPError as exc:
        headers = {"WWW-Authenticate": 'Basic realm="LavinMQ Management"'} if exc.status == 401 else None
        resp = error_response(exc.status, exc.error, exc.reason)
        if headers:
            resp.headers.update(headers)
        return resp
    except AMQPError as exc:
        return error_response(AMQP_STATUS.get(exc.reply_code, 400), "bad_request", exc.reply_text)
    except (TypeError, ValueError, KeyError, UnicodeError, OverflowError, RecursionError) as exc:
        # input of a shape no handler checked for: still the client's fault, never a 500
        log.warning("HTTP %s %s: unexpected input: %r", request.method, request.path, exc)
        return error_response(400, "bad_request", f"bad request: {exc}")
    except web.HTTPException as exc:
        if exc.status == 405:
            return error_response(405, "Method Not Allowed", f"{request.method} is not allowed here")
        if exc.status == 404:
            return error_response(404, "Object Not Found", "Not Found")
        raise


def check_not_cross_site(request):
    """CSRF: a browser that holds the API's Basic credentials must not be
    made to change anything by another site. Forms and no-cors fetches
    cannot send Content-Type application/json, and a browser names the
    page's origin in Origin (and Sec-Fetch-Site) on every such request."""
    origin = request.headers.get("Origin")
    if origin is not None:
        parts = urllib.parse.urlsplit(origin)
        if origin == "null" or parts.netloc.lower() != request.host.lower():
            raise HTTPError(403, f"cross-origin request from {origin} refused", "forbidden")
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        raise HTTPError(403, "cross-site request refused", "forbidden")
    # a body must be declared JSON (no request without a body changes state in
    # a way a form could use: a browser names the Origin of those anyway)
    if request.method in ("POST", "PUT") and request.content_type != "application/json" and (
            request.body_exists or "Content-Type" in request.headers):
        # the path as sent: a vhost named / is %2F there, a / once decoded
        if request.content_type == "multipart/form-data" and UPLOAD_PATH.match(request.rel_url.raw_path):
            # a form may post here: only from a page of ours (a browser names
            # a foreign page in Origin, checked above, or in Referer)
            referer = request.headers.get("Referer")
            if referer is not None and urllib.parse.urlsplit(referer).netloc.lower() != request.host.lower():
                raise HTTPError(403, "cross-site upload refused", "forbidden")
            return
        raise HTTPError(415, "Content-Type must be application/json", "unsupported_media_type")


def _credentials(request):
    """(user, password) from Basic auth, else from the UI's OAuth session
    cookie (the token, as LavinMQ's oauth_token), else None."""
    import base64
    import binascii
    header = request.headers.get("Authorization", "")
    if header.startswith("Basic "):
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise HTTPError(401, "Not_Authorized")
        return user, password
    token = request.cookies.get("oauth_token")
    if token and getattr(request.app["server"], "auth", None) is not None and \
            request.app["server"].auth.verifier is not None:
        return "", token
    return None


async def authenticate(request):
    creds = _credentials(request)
    if creds is None:
        raise HTTPError(401, "Not_Authorized")
    user, password = creds
    server = request.app["server"]
    peer = request.remote or ""
    throttle = server.login_throttle
    key = throttle.key(peer, user, server.users.get(user) is not None)
    turn = asyncio.get_running_loop().create_future()
    waiting = throttle.admit(*key, _take_turn, turn, alive=lambda: _still_there(request, turn))
    if waiting is not None:
        # backing off (lavinmq.auth.throttle): checked in the address's line, whatever the password
        try:
            await turn
        finally:
            waiting.cancel()    # the client went: its place in the line is given up
    auth = getattr(server, "auth", None) or server.users
    if auth is not server.users and auth.needs_keys(password):
        await auth.ensure_keys()        # a token before the issuer's keys are fetched
    u = auth.authenticate(user, password)
    if u is None or (u.loopback_only and peer and not _is_loopback(peer)):
        if throttle.failed(*key):      # not per attempt while the key backs off: its episode has a line
            _login_log("HTTP login refused for user %r from %s", user, peer)
        raise HTTPError(401, "Login failed")
    if not u.tags:
        raise HTTPError(401, "Login failed")       # users without any tag have no management access
    return u


def _take_turn(turn):
    if not turn.done():
        turn.set_result(None)


def _still_there(request, turn):
    """Asked when a waiting login's turn comes: a client that went is not checked."""
    transport = request.transport
    if transport is not None and not transport.is_closing():
        return True
    if not turn.done():
        turn.cancel()
    return False


def _is_loopback(host):
    from lavinmq.auth.users import is_loopback_address
    return is_loopback_address(host)

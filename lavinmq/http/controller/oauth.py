"""The management UI's OAuth sign-in, as LavinMQ's /oauth routes: the
authorization code flow with PKCE against the `[oauth] issuer`.

    GET /oauth/enabled     {"enabled": bool}: client_id, issuer and mgmt_base_url are set
    GET /oauth/authorize   {"authorize_url"}: where the browser goes to sign in; a state
                           and PKCE verifier wait in an HttpOnly cookie for 5 minutes
    GET /oauth/callback    the issuer sends the browser back with a code: it is exchanged
                           for an access token (the token endpoint), which is checked as
                           any login's, then kept in the HttpOnly cookie oauth_token
                           (SameSite Lax, Secure unless the UI is plain http on localhost)
    GET /oauth/logout      the cookies go

`mgmt_base_url` is where the UI is reached (https, or http on localhost); the
redirect URI given to the issuer is `{mgmt_base_url}/oauth/callback`."""
import base64
import hashlib
import hmac
import logging
import secrets
import urllib.parse

import aiohttp
import orjson
from aiohttp import web

log = logging.getLogger("lavinmq.http.oauth")

STATE_MAX_AGE = 300
SESSION_MAX_AGE = 8 * 3600
TIMEOUT = aiohttp.ClientTimeout(total=15, connect=5)


def _config(request):
    return request.app["server"].config


def _verifier(request):
    auth = getattr(request.app["server"], "auth", None)
    return auth.verifier if auth is not None else None


def ui_enabled(config, verifier):
    """LavinMQ's rule: client_id, issuer and a base URL that is https (or
    http on localhost), with the oauth backend on."""
    base = config.oauth_mgmt_base_url
    if verifier is None or not config.oauth_client_id or not base:
        return False
    u = urllib.parse.urlsplit(base)
    return u.scheme == "https" or (u.scheme == "http" and (u.hostname or "") in ("localhost", "127.0.0.1", "::1"))


def _cookie_path(config):
    path = urllib.parse.urlsplit(config.oauth_mgmt_base_url or "").path.rstrip("/")
    return path or "/"


def _secure(config):
    return urllib.parse.urlsplit(config.oauth_mgmt_base_url or "").scheme != "http"


def _set_cookie(resp, config, name, value, max_age, http_only=True):
    resp.set_cookie(name, value, max_age=max_age, path=_cookie_path(config), httponly=http_only,
                    secure=_secure(config), samesite="Lax")


def _expire(resp, config, name):
    resp.del_cookie(name, path=_cookie_path(config))


def _redirect_uri(config):
    return config.oauth_mgmt_base_url.rstrip("/") + "/oauth/callback"


async def enabled(request):
    return web.json_response({"enabled": ui_enabled(_config(request), _verifier(request))})


async def authorize(request):
    config, verifier = _config(request), _verifier(request)
    if not ui_enabled(config, verifier):
        return web.json_response({"reason": "OAuth not configured"}, status=503)
    try:
        oidc = verifier.fetcher.oidc or await verifier.fetcher.discover()
        endpoint = oidc["authorization_endpoint"]
    except Exception as exc:
        log.error("OAuth authorize failed: %s", exc)
        return web.json_response({"reason": "OAuth authorization failed"}, status=502)
    code_verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(code_verifier.encode()).digest()).rstrip(b"=").decode()
    state = secrets.token_urlsafe(32)
    params = {"client_id": config.oauth_client_id, "redirect_uri": _redirect_uri(config), "response_type": "code",
              "scope": config.oauth_mgmt_scopes, "code_challenge": challenge, "code_challenge_method": "S256",
              "state": state}
    if config.oauth_audience:       # some issuers (Auth0) give JWT access tokens only when asked for one
        params["audience"] = config.oauth_audience
    sep = "&" if "?" in endpoint else "?"
    resp = web.json_response({"authorize_url": f"{endpoint}{sep}{urllib.parse.urlencode(params)}"})
    _set_cookie(resp, config, "oauth_state", f"{state}:{code_verifier}", STATE_MAX_AGE)
    return resp


def _redirect(location):
    return web.Response(status=302, headers={"Location": location})


def _fail(config, message):
    resp = _redirect("../?oauth_error=" + urllib.parse.quote(message))
    _expire(resp, config, "oauth_state")
    return resp


async def callback(request):
    config, verifier = _config(request), _verifier(request)
    if not ui_enabled(config, verifier):
        return _fail(config, "OAuth not configured")
    q = request.query
    if "error" in q:
        return _fail(config, q.get("error_description") or q["error"])
    cookie = request.cookies.get("oauth_state", "")
    state, sep, code_verifier = cookie.partition(":")
    if not sep:
        return _fail(config, "Missing OAuth state")
    if not hmac.compare_digest(state.encode(), q.get("state", "").encode()):
        return _fail(config, "State mismatch")
    code = q.get("code")
    if not code:
        return _fail(config, "Missing authorization code")
    try:
        oidc = verifier.fetcher.oidc or await verifier.fetcher.discover()
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": _redirect_uri(config),
                "client_id": config.oauth_client_id, "code_verifier": code_verifier}
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            async with session.post(oidc["token_endpoint"], data=form, allow_redirects=False) as r:
                if r.status != 200:
                    raise RuntimeError(f"token exchange failed: HTTP {r.status}")
                answer = orjson.loads(await r.content.read(1 << 20))
        token = answer["access_token"]
        try:
            expires_in = int(answer.get("expires_in") or SESSION_MAX_AGE)     # Entra ID sends a string
        except (TypeError, ValueError):
            expires_in = SESSION_MAX_AGE
    except Exception as exc:
        log.error("OAuth callback failed: %s", exc)
        return _fail(config, "OAuth authentication failed")
    auth = request.app["server"].auth
    user = auth.authenticate("", token)
    if user is None or not getattr(user, "oauth", False) or not user.tags:
        return _fail(config, "Token validation failed")
    max_age = min(expires_in, SESSION_MAX_AGE)
    resp = _redirect("..")
    _set_cookie(resp, config, "oauth_token", token, max_age)
    # LavinMQ's UI cookie: who is signed in (no password), readable by scripts
    m = base64.b64encode(f"{user.name}:".encode()).decode()
    _set_cookie(resp, config, "m", "|oauth:" + urllib.parse.quote(m, safe=""), max_age, http_only=False)
    _expire(resp, config, "oauth_state")
    log.info("management UI sign-in of %s through OAuth", user.name)
    return resp


async def logout(request):
    config = _config(request)
    resp = _redirect("..")
    for name in ("oauth_token", "m"):
        _expire(resp, config, name)
    return resp


def add_routes(app):
    r = app.router
    r.add_get("/oauth/enabled", enabled)
    r.add_get("/oauth/authorize", authorize)
    r.add_get("/oauth/callback", callback)
    r.add_get("/oauth/logout", logout)

"""OAuth 2.0 / OpenID Connect sign-in, as LavinMQ's `[oauth]`: a client logs
in with a JWT access token as its password (the user name only names it in
the log). The token is checked as LavinMQ checks it, with PyJWT:

- RS256 only (no algorithm confusion), `exp` required and in the future,
  `iat` not in the future, `nbf` passed;
- signed by the issuer's key named by its `kid` (lavinmq.auth.jwks);
- `iss` is `[oauth] issuer`; with `verify_aud` (default) `aud` holds
  `audience` (else `resource_server_id`).

The user's name is the first of `preferred_username_claims` (sub,
client_id) present; its tags and permissions come from scopes: the `scope`
claim, `resource_access.{resource_server_id}.roles` and the
`additional_scopes_keys` claims, those starting with `scope_prefix` (default
`{resource_server_id}.`), which is cut off:
`tag:administrator`, `configure:{vhost}/{name}`, `write:...`, `read:...`
(URL-encoded; `*` a wildcard in both; an optional third part, a routing
key, is ignored). The connection closes when the token expires;
connection.update-secret with a new token for the same user renews it."""
import base64
import logging
import re
import time
import urllib.parse

import orjson

from lavinmq.auth.users import Permissions, User

log = logging.getLogger("lavinmq.oauth")

TAGS = ("administrator", "monitoring", "management", "policymaker", "impersonator")
MAX_TOKEN = 64 * 1024       # bytes: a password longer than this is no token of ours
IAT_LEEWAY = 0.2            # s, as LavinMQ


class TokenError(Exception):
    """The token does not verify; the text says why (for the log)."""


class NotAToken(TokenError):
    """The password is not a JWT: the next authenticator may take it."""


def _b64(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def looks_like_token(password):
    return isinstance(password, str) and password.startswith("ey") and password.count(".") == 2 \
        and len(password) <= MAX_TOKEN


class TokenVerifier:
    def __init__(self, settings, fetcher):
        self.s = settings
        self.fetcher = fetcher
        self.issuer = settings.issuer.rstrip("/")

    def prevalidate(self, token):
        """LavinMQ's checks before any key is used: the form, RS256, the
        times. -> the unverified header."""
        if not looks_like_token(token):
            raise NotAToken("not a JWT")
        head, body, _ = token.split(".")
        try:
            header = orjson.loads(_b64(head))
            payload = orjson.loads(_b64(body))
        except (ValueError, TypeError) as exc:
            raise TokenError(f"invalid JWT: {exc}") from None
        if not isinstance(header, dict) or not isinstance(payload, dict):
            raise TokenError("invalid JWT")
        if header.get("alg") != "RS256":
            raise TokenError(f"expected RS256, got {header.get('alg')}")
        now = time.time()
        exp = payload.get("exp")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool):
            raise TokenError("missing exp claim in token")
        if exp <= now:
            raise TokenError("token has expired")
        iat = payload.get("iat")
        if isinstance(iat, (int, float)) and iat > now + IAT_LEEWAY:
            raise TokenError("token issued in the future")
        nbf = payload.get("nbf")
        if isinstance(nbf, (int, float)) and nbf > now:
            raise TokenError("token not yet valid")
        return header

    def verify(self, token):
        """-> the token's claims, or TokenError."""
        import jwt
        header = self.prevalidate(token)
        kid = header.get("kid")
        if not kid:
            raise TokenError("token is missing kid header")
        if self.fetcher.empty:
            raise TokenError("the issuer's keys are not fetched yet")
        key = self.fetcher.key(kid)
        if key is None:
            raise TokenError(f"no key matching kid '{kid}'")
        try:
            # one key, the one the token names: a forged token cannot make
            # the broker try every key (LavinMQ's GH #2077)
            claims = jwt.decode(token, key, algorithms=["RS256"],
                                options={"verify_aud": False, "verify_iss": False, "require": ["exp"]})
        except jwt.PyJWTError as exc:
            raise TokenError(f"token verification failed: {exc}") from None
        iss = claims.get("iss")
        if not isinstance(iss, str):
            raise TokenError("missing or invalid iss claim in token")
        if iss.rstrip("/") != self.issuer:
            raise TokenError("token issuer does not match the expected issuer")
        if self.s.verify_aud:
            self._check_audience(claims)
        return claims

    def _check_audience(self, claims):
        aud = claims.get("aud")
        if aud is None:
            raise TokenError("missing aud claim in token")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else None
        if audiences is None:
            raise TokenError("invalid aud claim format")
        expected = self.s.audience or self.s.resource_server_id
        if expected is None:
            raise TokenError("token contains audience claim but no expected audience is configured")
        if expected not in audiences:
            raise TokenError("token audience does not match expected value")

    # -- claims to a user -------------------------------------------------------

    def user_of(self, claims):
        return OAuthUser(self._username(claims), *self._roles(claims), claims["exp"], self)

    def _username(self, claims):
        for claim in self.s.preferred_username_claims:
            value = claims.get(claim)
            if isinstance(value, str) and value:
                return value
        raise TokenError(f"no username found in JWT claims (tried: {', '.join(self.s.preferred_username_claims)})")

    def _roles(self, claims):
        rsid = self.s.resource_server_id
        scopes = []
        if rsid:
            access = claims.get("resource_access")
            roles = access.get(rsid, {}).get("roles") if isinstance(access, dict) and \
                isinstance(access.get(rsid), dict) else None
            if isinstance(roles, list):
                scopes.extend(r for r in roles if isinstance(r, str))
        if isinstance(claims.get("scope"), str):
            scopes.extend(claims["scope"].split())
        for key in self.s.additional_scopes_keys:
            if key in claims:
                scopes.extend(self._scopes_in(claims[key], 0))
        prefix = self.s.scope_prefix if self.s.scope_prefix is not None else (f"{rsid}." if rsid else None)
        if prefix:
            scopes = [s[len(prefix):] for s in scopes if s.startswith(prefix)]
        tags, perms = [], {}
        for scope in scopes:
            if scope.startswith("tag:"):
                tag = scope[4:].lower()
                if tag in TAGS and tag not in tags:
                    tags.append(tag)
            else:
                self._permission(scope, perms)
        permissions = {v: Permissions(p["configure"], p["write"], p["read"]) for v, p in perms.items()}
        return tags, permissions

    def _scopes_in(self, claim, depth):
        if depth > 8:
            return []
        if isinstance(claim, dict):
            rsid = self.s.resource_server_id
            return [s for k, v in claim.items() if not rsid or k == rsid for s in self._scopes_in(v, depth + 1)]
        if isinstance(claim, list):
            return [s for item in claim for s in self._scopes_in(item, depth + 1)]
        if isinstance(claim, str):
            return claim.split()
        return []

    @staticmethod
    def _permission(scope, perms):
        kind, _, rest = scope.partition(":")
        if kind not in ("configure", "write", "read") or not rest:
            return
        parts = rest.split("/")
        if len(parts) not in (2, 3):
            return
        vhost = urllib.parse.unquote_plus(parts[0])
        pattern = wildcard_regex(urllib.parse.unquote_plus(parts[1]))
        p = perms.setdefault(vhost, {"configure": "", "write": "", "read": ""})
        p[kind] = pattern if not p[kind] else f"{p[kind]}|{pattern}"


def wildcard_regex(pattern):
    """LavinMQ's scope name pattern: * is any run of characters, the rest literal."""
    if pattern == "*":
        return ".*"
    return "^" + re.escape(pattern).replace(r"\*", ".*") + "$"


def wildcard_match(pattern, value):
    if pattern == "*":
        return True
    if "*" not in pattern:
        return pattern == value
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), value, re.S) is not None


class OAuthUser(User):
    """A user that exists only as long as its token: never stored, its
    tags and permissions from the token's scopes, vhosts possibly named with
    wildcards (`read:*/*`)."""

    def __init__(self, name, tags, permissions, expires_at, verifier):
        super().__init__(name, tags=tags, permissions=permissions)
        self.expires_at = float(expires_at)
        self.verifier = verifier
        self.oauth = True

    def _vhost_permissions(self, vhost):
        p = self.permissions.get(vhost)
        if p is None:
            for pattern, perm in self.permissions.items():
                if wildcard_match(pattern, vhost):
                    return perm
        return p

    def can_access(self, vhost):
        return self._vhost_permissions(vhost) is not None

    def _allows(self, kind, vhost, name):
        p = self._vhost_permissions(vhost)
        return p is not None and p.allows(kind, name)

    def verify_password(self, password):
        return False

    @property
    def lifetime(self):
        return max(0.0, self.expires_at - time.time())

    def renew_secret(self, connection, token):
        """connection.update-secret: a new token for the same user takes
        over its tags, permissions and expiry. Raises AccessRefusedHard."""
        from lavinmq.errors import AccessRefusedHard
        try:
            claims = self.verifier.verify(token)
            fresh = self.verifier.user_of(claims)
        except TokenError as exc:
            raise AccessRefusedHard(str(exc), 10, 70) from None
        if fresh.name != self.name:
            raise AccessRefusedHard(f"Token username mismatch: expected '{self.name}', got '{fresh.name}'", 10, 70)
        self.tags, self.permissions, self.expires_at = fresh.tags, fresh.permissions, fresh.expires_at
        connection.token_renewed()

    def __repr__(self):
        return f"OAuthUser({self.name!r}, tags={self.tags!r})"

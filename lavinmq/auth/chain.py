"""Who may log in, as LavinMQ's `[main] auth_backends`: the backends in
order (`local`: users.json; `oauth`: a JWT from the `[oauth] issuer`), the
first that accepts the credentials wins. Without the setting only local
users log in."""
import logging
import types

from lavinmq.errors import ConfigError

log = logging.getLogger("lavinmq.auth")
BACKENDS = ("local", "oauth")


def oauth_settings(config):
    split = lambda v: [x.strip() for x in (v or "").split(",") if x.strip()]     # noqa: E731
    return types.SimpleNamespace(
        issuer=config.oauth_issuer, resource_server_id=config.oauth_resource_server_id or None,
        preferred_username_claims=split(config.oauth_preferred_username_claims) or ["sub", "client_id"],
        additional_scopes_keys=split(config.oauth_additional_scopes_keys),
        scope_prefix=config.oauth_scope_prefix, verify_aud=config.oauth_verify_aud,
        audience=config.oauth_audience or None, jwks_cache_ttl=config.oauth_jwks_cache_ttl)


class Authenticator:
    def __init__(self, config, users):
        self.users = users
        self.backends = [b.strip() for b in (config.auth_backends or "").split(",") if b.strip()] or ["local"]
        for b in self.backends:
            if b not in BACKENDS:
                raise ConfigError(f"[main] auth_backends: unsupported authentication backend '{b}' "
                                  f"(local, oauth)")
        self.verifier = None
        if "oauth" in self.backends:
            if not config.oauth_issuer:
                raise ConfigError("[main] auth_backends has oauth but [oauth] issuer is not set")
            from lavinmq.auth.jwks import JWKSFetcher
            from lavinmq.auth.oauth import TokenVerifier
            settings = oauth_settings(config)
            self.verifier = TokenVerifier(settings, JWKSFetcher(settings.issuer, settings.jwks_cache_ttl))

    @property
    def fetcher(self):
        return self.verifier.fetcher if self.verifier is not None else None

    def start(self):
        if self.verifier is not None:
            self.verifier.fetcher.start()

    def stop(self):
        if self.verifier is not None:
            self.verifier.fetcher.stop()

    def needs_keys(self, password):
        """A token that could only be checked once the issuer's keys are
        fetched (the caller awaits ensure_keys, then authenticates)."""
        from lavinmq.auth.oauth import looks_like_token
        return self.verifier is not None and self.verifier.fetcher.empty and looks_like_token(password)

    async def ensure_keys(self):
        if self.verifier is not None:
            await self.verifier.fetcher.ensure_keys()

    def authenticate(self, username, password):
        """The user the credentials name, or None."""
        for backend in self.backends:
            if backend == "local":
                user = self.users.authenticate(username, password)
            else:
                user = self._oauth(username, password)
            if user is not None:
                return user
        return None

    def _oauth(self, username, password):
        from lavinmq.auth.oauth import NotAToken, TokenError
        try:
            return self.verifier.user_of(self.verifier.verify(password))
        except NotAToken:
            return None
        except TokenError as exc:
            log.info("OAuth login refused for user %r: %s", username, exc)
            return None

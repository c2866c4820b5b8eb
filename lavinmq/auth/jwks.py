"""The OAuth issuer's signing keys, as LavinMQ fetches them: OpenID
discovery (`{issuer}/.well-known/openid-configuration`, whose `issuer` must
be the configured one), then its `jwks_uri`. Only RSA signature keys for
RS256 are kept, by `kid`. They are cached for the JWKS answer's
`Cache-Control: max-age`, else `[oauth] jwks_cache_ttl`, and fetched again
in the background before that runs out; a failed fetch is retried from 5 s
doubling to 5 minutes. A login that finds no keys yet waits for one fetch,
at most every 30 s (an unreachable issuer must not slow every login)."""
import asyncio
import logging
import re
import time

import aiohttp
import orjson

log = logging.getLogger("lavinmq.oauth")

ON_DEMAND_COOLDOWN = 30.0
RETRY_FIRST, RETRY_MAX = 5.0, 300.0
MAX_BODY = 1 << 20          # a discovery document or key set larger than this is refused
TIMEOUT = aiohttp.ClientTimeout(total=15, connect=5)


class JWKSFetcher:
    def __init__(self, issuer, default_ttl=3600):
        self.issuer = issuer.rstrip("/")
        self.default_ttl = default_ttl
        self.keys = None            # kid -> public key object (PyJWT's RSA key)
        self.expires_at = 0.0
        self.oidc = None            # the discovery document
        self.fetches = 0
        self._task = None
        self._lock = asyncio.Lock()
        self._last_failure = None

    # -- what verification reads ------------------------------------------------

    def key(self, kid):
        """The key for kid, or None (no keys yet, or expired, or unknown kid)."""
        if self.keys is None or time.monotonic() >= self.expires_at:
            return None
        return self.keys.get(kid)

    @property
    def empty(self):
        return self.keys is None

    # -- fetching -----------------------------------------------------------------

    async def _get(self, session, url):
        async with session.get(url, allow_redirects=False) as resp:
            if resp.status != 200:
                raise RuntimeError(f"GET {url}: HTTP {resp.status}")
            body = await resp.content.read(MAX_BODY + 1)
            if len(body) > MAX_BODY:
                raise RuntimeError(f"GET {url}: answer larger than {MAX_BODY} bytes")
            return orjson.loads(body), resp.headers

    async def discover(self, session=None):
        own = session is None
        session = session or aiohttp.ClientSession(timeout=TIMEOUT)
        try:
            doc, _ = await self._get(session, f"{self.issuer}/.well-known/openid-configuration")
        finally:
            if own:
                await session.close()
        if not isinstance(doc, dict) or not isinstance(doc.get("issuer"), str) or \
                not isinstance(doc.get("jwks_uri"), str):
            raise RuntimeError("the OpenID configuration lacks issuer or jwks_uri")
        if doc["issuer"].rstrip("/") != self.issuer:
            raise RuntimeError(f"OIDC issuer mismatch: expected {self.issuer}, got {doc['issuer']}")
        self.oidc = doc
        return doc

    async def fetch(self):
        from jwt.algorithms import RSAAlgorithm
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            doc = await self.discover(session)
            jwks, headers = await self._get(session, doc["jwks_uri"])
        keys = {}
        for i, jwk in enumerate(jwks.get("keys") or [] if isinstance(jwks, dict) else []):
            if not isinstance(jwk, dict) or jwk.get("kty") != "RSA" or jwk.get("use") != "sig":
                continue
            if jwk.get("alg") not in (None, "RS256"):
                continue
            if not (jwk.get("n") and jwk.get("e")):
                continue
            try:
                keys[str(jwk.get("kid") or f"unknown-{i}")] = RSAAlgorithm.from_jwk(jwk)
            except Exception as exc:        # one bad key must not lose the others
                log.warning("JWKS key %s skipped: %s", jwk.get("kid"), exc)
        ttl = self.default_ttl
        m = re.search(r"max-age=(\d+)", headers.get("Cache-Control", ""))
        if m:
            ttl = int(m.group(1))           # the issuer's word wins over jwks_cache_ttl
        self.keys = keys
        self.expires_at = time.monotonic() + ttl
        self.fetches += 1
        self._last_failure = None
        log.info("refreshed JWKS from %s: %d key(s), TTL %d s", doc["jwks_uri"], len(keys), ttl)

    async def ensure_keys(self):
        """Fetch now if no fetch has worked yet (and the last failure is not
        too recent). Never raises."""
        if not self.empty:
            return
        async with self._lock:
            if not self.empty:
                return
            if self._last_failure is not None and time.monotonic() - self._last_failure < ON_DEMAND_COOLDOWN:
                return
            try:
                await self.fetch()
            except Exception as exc:
                self._last_failure = time.monotonic()
                log.warning("on-demand JWKS fetch from %s failed: %s", self.issuer, exc)

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self._refresh_loop())

    def stop(self):
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _refresh_loop(self):
        delay = RETRY_FIRST
        while True:
            try:
                async with self._lock:
                    await self.fetch()
                delay = RETRY_FIRST
                await asyncio.sleep(max(1.0, self.expires_at - time.monotonic()))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._last_failure = time.monotonic()
                log.error("fetching JWKS from %s failed, retrying in %d s: %s", self.issuer, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

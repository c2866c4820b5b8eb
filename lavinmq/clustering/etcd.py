"""etcd's v3 API through its JSON gateway (POST /v3/<service>/<method>),
over aiohttp, as LavinMQ reaches etcd over HTTP.

What the gateway does that a caller must know (checked on etcd 3.4):
keys and values are base64; every int64 comes back as a string; proto3
leaves out fields at their default (`succeeded` of a failed txn, `kvs` of an
empty range, a PUT event's `type`, a dead lease's `TTL`); errors have two
shapes, {"error": "...", "code": N} from unary calls and {"error": {...}}
on streams; watch responses are one JSON object per line.

Endpoints are tried in turn: a connection error, a timeout or a 503 moves
to the next one, so one stopped member of an etcd cluster costs one
timeout. Requests time out well inside the lease TTL, so a node notices a
lost etcd before its lease would have run out.

Credentials in an endpoint (http://user:pass@host:port) are exchanged for a
token at /v3/auth/authenticate: etcd 3.4's gateway does not take HTTP Basic."""
import asyncio
import base64
import logging

import aiohttp
import orjson

log = logging.getLogger("lavinmq.clustering.etcd")

REQUEST_TIMEOUT = 1.0       # s per attempt of a unary call


class EtcdError(Exception):
    def __init__(self, message, code=None, status=None):
        super().__init__(message)
        self.code = code            # gRPC status code
        self.status = status        # HTTP status


class Unavailable(EtcdError):
    """No endpoint answered."""


class LeaseNotFound(EtcdError):
    pass


class LeaseExists(EtcdError):
    pass


def b64(value):
    if isinstance(value, str):
        value = value.encode()
    return base64.b64encode(value).decode()


def unb64(text):
    return base64.b64decode(text) if text else b""


def prefix_end(prefix):
    """The range_end that covers every key starting with prefix."""
    raw = prefix.encode() if isinstance(prefix, str) else prefix
    return raw[:-1] + bytes([raw[-1] + 1])


def error_of(status, body):
    """An EtcdError from either error shape, or None."""
    err = body.get("error") if isinstance(body, dict) else None
    if err is None:
        return None
    if isinstance(err, dict):       # streaming shape
        message, code = err.get("message", ""), err.get("grpc_code")
    else:
        message, code = body.get("message") or err, body.get("code")
    if "lease not found" in message:
        return LeaseNotFound(message, code, status)
    if "lease already exists" in message:
        return LeaseExists(message, code, status)
    return EtcdError(message, code, status)


class KV:
    __slots__ = ("key", "value", "create_revision", "mod_revision", "version", "lease")

    def __init__(self, raw):
        self.key = unb64(raw.get("key")).decode("utf-8", "replace")
        self.value = unb64(raw.get("value"))
        self.create_revision = int(raw.get("create_revision", 0))
        self.mod_revision = int(raw.get("mod_revision", 0))
        self.version = int(raw.get("version", 0))
        self.lease = int(raw.get("lease", 0))

    def __repr__(self):
        return f"<KV {self.key}={self.value!r} rev={self.mod_revision} lease={self.lease}>"


class Etcd:
    def __init__(self, endpoints, timeout=REQUEST_TIMEOUT):
        """endpoints: [(base URL, user, password)] (settings.parse_endpoint)."""
        self.endpoints = list(endpoints)
        self.current = 0
        self.timeout = timeout
        self.session = None
        self.tokens = {}        # base URL -> auth token

    async def _session(self):
        if self.session is None or self.session.closed:
            # no pooled connection outlives a stopped etcd for long
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=16, keepalive_timeout=5),
                json_serialize=lambda o: orjson.dumps(o).decode())
        return self.session

    async def close(self):
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def _auth_headers(self, base, user, password, session):
        if user is None:
            return {}
        token = self.tokens.get(base)
        if token is None:
            async with session.post(base + "/v3/auth/authenticate", json={"name": user, "password": password or ""},
                                    timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                body = orjson.loads(await resp.read() or b"{}")
            err = error_of(resp.status, body)
            if err is not None:
                raise err
            token = self.tokens[base] = body["token"]
        return {"Authorization": token}

    async def call(self, path, body, timeout=None):
        """One unary call; tries every endpoint once before giving up."""
        session = await self._session()
        last = None
        for _ in range(len(self.endpoints)):
            base, user, password = self.endpoints[self.current]
            try:
                headers = await self._auth_headers(base, user, password, session)
                async with session.post(base + path, json=body, headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=timeout or self.timeout)) as resp:
                    data = await resp.read()
                    status = resp.status
                parsed = orjson.loads(data) if data else {}
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, orjson.JSONDecodeError) as exc:
                last = exc
                self.current = (self.current + 1) % len(self.endpoints)
                continue
            err = error_of(status, parsed)
            if err is not None and "invalid auth token" in str(err):
                self.tokens.pop(base, None)
                last = err
                continue
            if err is not None and status == 503:
                last = err          # this member has no quorum: another may
                self.current = (self.current + 1) % len(self.endpoints)
                continue
            if err is not None:
                raise err
            return parsed
        raise Unavailable(f"no etcd endpoint answered {path}: {last}")

    # -- KV ----------------------------------------------------------------------

    async def get(self, key):
        """-> (KV or None, header revision)."""
        r = await self.call("/v3/kv/range", {"key": b64(key)})
        kvs = r.get("kvs") or []
        return (KV(kvs[0]) if kvs else None), int(r["header"]["revision"])

    async def get_prefix(self, prefix):
        """-> ([KV] sorted by create revision, header revision)."""
        r = await self.call("/v3/kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))})
        kvs = sorted((KV(x) for x in r.get("kvs") or []), key=lambda kv: kv.create_revision)
        return kvs, int(r["header"]["revision"])

    async def put(self, key, value, lease=0):
        body = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        r = await self.call("/v3/kv/put", body)
        return int(r["header"]["revision"])

    async def delete(self, key):
        r = await self.call("/v3/kv/deleterange", {"key": b64(key)})
        return int(r.get("deleted", 0))

    async def txn(self, compare, success, failure=()):
        """-> (succeeded, responses, header revision)."""
        r = await self.call("/v3/kv/txn", {"compare": list(compare), "success": list(success),
                                           "failure": list(failure)})
        return bool(r.get("succeeded", False)), r.get("responses") or [], int(r["header"]["revision"])

    # -- leases ------------------------------------------------------------------

    async def lease_grant(self, ttl, lease_id=0):
        """-> the TTL etcd granted (it raises one below its minimum)."""
        r = await self.call("/v3/lease/grant", {"TTL": ttl, "ID": str(lease_id)})
        err = error_of(200, r)
        if err is not None:
            raise err
        return int(r["TTL"])

    async def lease_revoke(self, lease_id):
        """-> False if there was no such lease."""
        try:
            await self.call("/v3/lease/revoke", {"ID": str(lease_id)})
        except LeaseNotFound:
            return False
        return True

    async def lease_ttl(self, lease_id):
        """Seconds left, or None for no such lease."""
        r = await self.call("/v3/lease/timetolive", {"ID": str(lease_id)})
        ttl = int(r.get("TTL", -1))
        return None if ttl < 0 else ttl

    # -- watch -------------------------------------------------------------------

    async def watch(self, key, start_revision, prefix=False):
        """Yield lists of events ("PUT"|"DELETE", KV) for key (or every key
        under it) from start_revision on, for as long as the caller reads.
        A broken stream is resumed on the next endpoint from the revision
        after the last one seen; Unavailable when none answers."""
        body = {"create_request": {"key": b64(key), "start_revision": str(start_revision)}}
        if prefix:
            body["create_request"]["range_end"] = b64(prefix_end(key))
        session = await self._session()
        failures = 0
        while True:
            base, user, password = self.endpoints[self.current]
            try:
                headers = await self._auth_headers(base, user, password, session)
                async with session.post(base + "/v3/watch", json=body, headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=None, connect=self.timeout)) as resp:
                    while True:
                        line = await resp.content.readline()
                        if not line:
                            raise aiohttp.ClientPayloadError("watch stream ended")
                        msg = orjson.loads(line)
                        err = error_of(resp.status, msg)
                        if err is not None:
                            raise err
                        result = msg.get("result") or {}
                        failures = 0
                        if result.get("canceled"):
                            raise EtcdError(f"watch canceled: {result.get('cancel_reason', '')} "
                                            f"(compacted at {result.get('compact_revision')})")
                        events = result.get("events")
                        if not events:
                            continue
                        out = [("DELETE" if e.get("type") == "DELETE" else "PUT", KV(e.get("kv") or {}))
                               for e in events]
                        last = max(kv.mod_revision for _, kv in out)
                        body["create_request"]["start_revision"] = str(last + 1)
                        yield out
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, orjson.JSONDecodeError, EtcdError) as exc:
                if isinstance(exc, EtcdError) and "canceled" in str(exc):
                    raise
                failures += 1
                self.current = (self.current + 1) % len(self.endpoints)
                if failures >= len(self.endpoints):
                    raise Unavailable(f"etcd watch: {exc}") from None
                await asyncio.sleep(0.05)

"""The node's etcd lease, kept alive from a thread of its own.

The lease id is the node id (LavinMQ's habit), so a restarted node finds
the lease its previous process left: it revokes it at once (the data
directory's lock says that process is gone) instead of waiting out its TTL.

The leader's safety rests on this module's deadline: etcd extends leases
when its own leader changes and never expires them while it has no quorum
(seen on 3.4), so a leader cannot wait for etcd to tell it that it lost.
It keeps `deadline` = the send time of the last keepalive etcd answered +
the granted TTL - a margin: etcd cannot have let the lease go before then,
so no other node can have been elected. A leader confirms nothing once its
own clock passes the deadline (Replicator checks `valid()` before every
release of confirms). The keepalive runs in a thread, not on the event
loop, so a busy loop does not cost the lease; a stopped process (SIGSTOP)
keeps nothing, since the clock runs on while it is stopped.
"""
import http.client
import logging
import threading
import time
import urllib.parse

import orjson

from lavinmq.clustering.etcd import EtcdError, LeaseExists, LeaseNotFound, Unavailable, error_of

log = logging.getLogger("lavinmq.clustering.lease")


class LeaseTaken(EtcdError):
    """Another node leads with this node's id."""

# keepalives per TTL: at 2 s, one every 0.5 s; three may fail before the deadline
KEEPALIVES_PER_TTL = 4


def margin(ttl):
    """How long before etcd could expire the lease the leader stops: clock
    rates differ a little, and the check runs between other work."""
    return min(1.0, 0.1 * ttl)


class BlockingClient:
    """Unary JSON calls from a plain thread (http.client), endpoints in turn."""

    def __init__(self, endpoints, timeout):
        self.endpoints = list(endpoints)
        self.current = 0
        self.timeout = timeout
        self.conns = {}
        self.tokens = {}

    def _conn(self, base):
        conn = self.conns.get(base)
        if conn is None:
            u = urllib.parse.urlsplit(base)
            cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
            conn = self.conns[base] = cls(u.hostname, u.port, timeout=self.timeout)
        return conn

    def _post(self, base, path, body, headers):
        conn = self._conn(base)
        try:
            conn.request("POST", path, orjson.dumps(body), {"Content-Type": "application/json", **headers})
            resp = conn.getresponse()
            data = resp.read()
        except Exception:
            conn.close()
            self.conns.pop(base, None)
            raise
        return resp.status, (orjson.loads(data) if data else {})

    def call(self, path, body):
        last = None
        for _ in range(len(self.endpoints)):
            base, user, password = self.endpoints[self.current]
            try:
                headers = {}
                if user is not None:
                    if base not in self.tokens:
                        status, r = self._post(base, "/v3/auth/authenticate",
                                               {"name": user, "password": password or ""}, {})
                        err = error_of(status, r)
                        if err is not None:
                            raise err
                        self.tokens[base] = r["token"]
                    headers["Authorization"] = self.tokens[base]
                status, r = self._post(base, path, body, headers)
            except (OSError, http.client.HTTPException, orjson.JSONDecodeError) as exc:
                last = exc
                self.current = (self.current + 1) % len(self.endpoints)
                continue
            err = error_of(status, r)
            if err is not None and "invalid auth token" in str(err):
                self.tokens.pop(base, None)
                last = err
                continue
            if err is not None and status == 503:
                last = err
                self.current = (self.current + 1) % len(self.endpoints)
                continue
            if err is not None:
                raise err
            return r
        raise Unavailable(f"no etcd endpoint answered {path}: {last}")

    def close(self):
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()


class Lease:
    """grant() once, then start(); on_lost(reason) is called (from the
    keepalive thread) when the lease is gone or its deadline passed."""

    def __init__(self, endpoints, lease_id, ttl, on_lost=None, uri=None, leader_prefix=None):
        self.lease_id = lease_id
        self.ttl = ttl                  # as asked; granted_ttl is what etcd gave
        self.granted_ttl = ttl
        self.on_lost = on_lost
        self.uri = uri                  # this node's advertised URI, and where leader keys live:
        self.leader_prefix = leader_prefix  # to tell our old lease from another node's with our id
        self.deadline = 0.0             # monotonic; valid() while before it
        self.client = BlockingClient(endpoints, timeout=max(0.2, ttl / KEEPALIVES_PER_TTL))
        self.lost = False
        self.revoked = False
        self.granted = False            # etcd gave us this lease at least once
        self._stop = threading.Event()
        self._thread = None
        self.keepalives = 0

    def valid(self):
        return not self.lost and time.monotonic() < self.deadline

    def remaining(self):
        return self.deadline - time.monotonic()

    def grant(self):
        """Blocking (run it in a thread). Our own lease from a previous
        process of this node is revoked first."""
        while True:
            sent = time.monotonic()
            try:
                r = self.client.call("/v3/lease/grant", {"TTL": self.ttl, "ID": str(self.lease_id)})
                err = error_of(200, r)
                if err is not None:
                    raise err
            except LeaseExists:
                self._check_not_taken()
                log.info("lease %x left by this node's previous process: revoked", self.lease_id)
                try:
                    self.client.call("/v3/lease/revoke", {"ID": str(self.lease_id)})
                except LeaseNotFound:
                    pass
                continue
            self.granted_ttl = int(r["TTL"])
            self.deadline = sent + self.granted_ttl - margin(self.granted_ttl)
            self.lost = False
            self.revoked = False
            self.granted = True
            return self.granted_ttl

    def _check_not_taken(self):
        """The lease of our id exists. It is our previous process's (the data
        directory's lock says that one is gone) unless another node has the
        same id, a copied data directory: if it holds a leader key naming
        another URI, refuse rather than take that node's lease away."""
        if self.uri is None:
            return
        r = self.client.call("/v3/lease/timetolive", {"ID": str(self.lease_id), "keys": True})
        import base64
        for key in r.get("keys") or []:
            name = base64.b64decode(key).decode("utf-8", "replace")
            if self.leader_prefix and name.startswith(self.leader_prefix):
                kv = self.client.call("/v3/kv/range", {"key": key})
                for item in kv.get("kvs") or []:
                    value = base64.b64decode(item.get("value", "")).decode("utf-8", "replace")
                    if value != self.uri:
                        raise LeaseTaken(f"node id {self.lease_id:x} is in use by the leader at {value} (a copied "
                                         f"data directory? remove its .clustering_id to give this node a new id)")

    def start(self):
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="lavinmq-etcd-lease", daemon=True)
        self._thread.start()

    def _run(self):
        interval = self.granted_ttl / KEEPALIVES_PER_TTL
        while not self._stop.wait(interval):
            sent = time.monotonic()
            reason = None
            try:
                r = self.client.call("/v3/lease/keepalive", {"ID": str(self.lease_id)})
                result = r.get("result") or {}
                if "TTL" not in result or int(result["TTL"]) <= 0:
                    reason = "etcd no longer has the lease"
                else:
                    self.deadline = sent + int(result["TTL"]) - margin(int(result["TTL"]))
                    self.keepalives += 1
            except (EtcdError, OSError) as exc:
                if time.monotonic() >= self.deadline:
                    reason = f"no keepalive got through before the lease's deadline ({exc})"
                else:
                    log.warning("etcd lease keepalive failed, %.1f s left: %s", self.remaining(), exc)
            if reason is None and time.monotonic() >= self.deadline:
                reason = "the lease's deadline passed"
            if reason is not None and not self._stop.is_set():
                self.lost = True
                log.warning("etcd lease %x lost: %s", self.lease_id, reason)
                if self.on_lost is not None:
                    self.on_lost(reason)
                return

    def stop(self):
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.client.timeout * 2 + 1)
        self._thread = None

    def revoke(self):
        """Stop keeping it, and give it back: the leader key goes at once.
        Blocking (run it in a thread); best effort."""
        self.stop()
        if self.revoked or not self.granted:
            return True         # nothing of ours to give back (never take another node's)
        self.lost = True
        try:
            self.client.call("/v3/lease/revoke", {"ID": str(self.lease_id)})
            self.revoked = True
            return True
        except LeaseNotFound:
            self.revoked = True
            return True
        except (EtcdError, OSError) as exc:
            log.warning("etcd lease %x not revoked: %s", self.lease_id, exc)
            return False
        finally:
            self.client.close()

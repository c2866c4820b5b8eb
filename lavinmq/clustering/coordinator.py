"""The cluster's keys in etcd, LavinMQ's layout under the prefix P:

    P/leader/<lease id, hex>   the leader's advertised URI, bound to its lease
    P/isr                      the in-sync replicas: base36 node ids, comma-separated
    P/clustering_secret        what followers present to the leader's replication port

The election is one transaction: it puts the leader key only while there is
no key under P/leader/ and the ISR key is unchanged since the candidate read
it and found itself in it. So a node that is not in the ISR never leads, not
even for a moment (LavinMQ campaigns first and steps down after), and the
key etcd's election API and etcdctl know is still the one written.

The ISR key is written by the leader only, in a transaction that compares
the leader key's lease with its own: a node that lost the leadership cannot
change it any more. That is what makes a confirm safe: the leader releases
one only when every ISR member acknowledged it, or after it wrote an ISR
without the member that did not."""
import asyncio
import base64
import logging
import os

from lavinmq.clustering.etcd import Unavailable, b64, prefix_end
from lavinmq.clustering.settings import to_base36

log = logging.getLogger("lavinmq.clustering.coordinator")

RETRY = 0.5         # s between attempts while etcd does not answer


def parse_isr(value):
    ids = set()
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    for part in value.split(","):
        part = part.strip()
        if part:
            try:
                ids.add(int(part, 36))
            except ValueError:
                log.warning("ignoring %r in the ISR key", part)
    return ids


def format_isr(ids):
    return ",".join(to_base36(i) for i in sorted(ids))


class StaleLeadership(Exception):
    """This node's lease no longer holds the leader key."""


class Coordinator:
    def __init__(self, etcd, prefix, node_id, uri):
        self.etcd = etcd
        self.prefix = prefix
        self.node_id = node_id
        self.uri = uri
        self.leader_prefix = f"{prefix}/leader/"
        self.leader_key = f"{prefix}/leader/{node_id:x}"
        self.isr_key = f"{prefix}/isr"
        self.secret_key = f"{prefix}/clustering_secret"

    # -- the shared secret ------------------------------------------------------------

    async def secret(self):
        """The cluster's secret; the first node to ask makes it (the stored
        one wins a race)."""
        value = base64.b64encode(os.urandom(32))
        ok, responses, _ = await self.etcd.txn(
            [{"target": "CREATE", "key": b64(self.secret_key), "result": "EQUAL", "create_revision": "0"}],
            [{"request_put": {"key": b64(self.secret_key), "value": b64(value)}}],
            [{"request_range": {"key": b64(self.secret_key)}}])
        if ok:
            return value
        kvs = responses[0]["response_range"].get("kvs") or []
        return base64.b64decode(kvs[0]["value"])

    # -- reading -------------------------------------------------------------------------

    async def read_isr(self):
        """-> (set of node ids, or None when there is no ISR key; its mod revision
        (0 when absent); the header revision)."""
        kv, rev = await self.etcd.get(self.isr_key)
        if kv is None:
            return None, 0, rev
        return parse_isr(kv.value), kv.mod_revision, rev

    async def leader(self):
        """-> (KV of the leader key or None, header revision)."""
        kvs, rev = await self.etcd.get_prefix(self.leader_prefix)
        return (kvs[0] if kvs else None), rev

    # -- the election ------------------------------------------------------------------

    async def try_lead(self, lease_id, isr_rev):
        """One attempt: -> (elected, header revision)."""
        compare = [
            {"target": "CREATE", "key": b64(self.leader_prefix), "range_end": b64(prefix_end(self.leader_prefix)),
             "result": "EQUAL", "create_revision": "0"},
            {"target": "MOD", "key": b64(self.isr_key), "result": "EQUAL", "mod_revision": str(isr_rev)},
        ]
        success = [{"request_put": {"key": b64(self.leader_key), "value": b64(self.uri), "lease": str(lease_id)}}]
        ok, _, rev = await self.etcd.txn(compare, success)
        return ok, rev

    async def campaign(self, lease_id, eligible=lambda: True, wake=None):
        """Return once this node holds the leader key. It only tries while it
        is in the ISR (or there is none yet: a new cluster) and eligible()
        says its data is whole; otherwise, and after a lost attempt, it waits
        for the leader key or the ISR to change, or for wake (an
        asyncio.Event) to be set."""
        while True:
            try:
                isr, isr_rev, rev = await self.read_isr()
                if (isr is None or self.node_id in isr) and eligible():
                    ok, rev = await self.try_lead(lease_id, isr_rev)
                    if ok:
                        if isr is None:
                            await self.write_isr({self.node_id}, lease_id)
                        return
                await self._wait_for_change(rev + 1, wake)
            except Unavailable as exc:
                log.warning("campaign: %s", exc)
                await asyncio.sleep(RETRY)

    async def _wait_for_change(self, start_revision, wake, timeout=5.0):
        """Until a leader key goes, the ISR changes, wake is set, or timeout."""
        async def watch():
            async for events in self.etcd.watch(self.prefix + "/", start_revision, prefix=True):
                for kind, kv in events:
                    if kv.key == self.isr_key or (kind == "DELETE" and kv.key.startswith(self.leader_prefix)):
                        return
        tasks = [asyncio.ensure_future(watch())]
        if wake is not None:
            tasks.append(asyncio.ensure_future(wake.wait()))
        try:
            done, _ = await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t.exception() is not None and not isinstance(t.exception(), Unavailable):
                    log.warning("campaign watch: %s", t.exception())
            if any(isinstance(t.exception(), Unavailable) for t in done):
                await asyncio.sleep(RETRY)
        finally:
            for t in tasks:
                t.cancel()
            if wake is not None:
                wake.clear()

    # -- the ISR, written by the leader ------------------------------------------------

    async def write_isr(self, ids, lease_id):
        """Put the ISR while the leader key holds this node's lease. Raises
        StaleLeadership when it does not, Unavailable when etcd is away."""
        compare = [{"target": "LEASE", "key": b64(self.leader_key), "result": "EQUAL", "lease": str(lease_id)}]
        ok, _, _ = await self.etcd.txn(compare, [{"request_put": {"key": b64(self.isr_key),
                                                                   "value": b64(format_isr(ids))}}])
        if not ok:
            raise StaleLeadership(f"the leader key {self.leader_key} is not held by lease {lease_id:x}")
        log.info("in-sync replicas: %s", format_isr(ids))

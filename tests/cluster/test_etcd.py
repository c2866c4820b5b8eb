"""The etcd client, the lease and the coordinator against a real etcd."""
import asyncio
import threading
import time

import pytest

from lavinmq.clustering.coordinator import Coordinator, StaleLeadership, format_isr, parse_isr
from lavinmq.clustering.etcd import Etcd, Unavailable
from lavinmq.clustering.lease import Lease
from lavinmq.clustering.settings import parse_endpoint


def client(etcd):
    return Etcd([parse_endpoint(etcd.endpoint)])


async def test_kv_txn_and_watch(etcd, prefix):
    e = client(etcd)
    try:
        kv, _ = await e.get(f"{prefix}/a")
        assert kv is None
        rev = await e.put(f"{prefix}/a", "1")
        await e.put(f"{prefix}/b", b"\x00\xff")
        kv, _ = await e.get(f"{prefix}/a")
        assert kv.value == b"1" and kv.mod_revision == rev
        kvs, _ = await e.get_prefix(f"{prefix}/")
        assert [k.key for k in kvs] == [f"{prefix}/a", f"{prefix}/b"] and kvs[1].value == b"\x00\xff"
        # a txn that fails carries no "succeeded" field at all
        ok, _, _ = await e.txn([{"target": "VALUE", "key": __import__("base64").b64encode(
            f"{prefix}/a".encode()).decode(), "result": "EQUAL", "value": "Mg=="}], [])
        assert ok is False
        seen = []

        async def watch():
            async for events in e.watch(f"{prefix}/", rev + 1, prefix=True):
                seen.extend(events)
                if any(kind == "DELETE" for kind, _ in events):
                    return
        task = asyncio.ensure_future(watch())
        await asyncio.sleep(0.1)
        await e.delete(f"{prefix}/a")
        await asyncio.wait_for(task, 5)
        assert ("PUT", f"{prefix}/b") in [(k, kv.key) for k, kv in seen]    # replayed from rev + 1
        assert ("DELETE", f"{prefix}/a") in [(k, kv.key) for k, kv in seen]
    finally:
        await e.close()


async def test_unreachable_endpoints_rotate_then_give_up(etcd):
    dead = parse_endpoint("127.0.0.1:1")
    e = Etcd([dead, parse_endpoint(etcd.endpoint)], timeout=0.5)
    try:
        await e.put("rotate-test", "x")         # the dead one first, then the live one
        assert e.current == 1
    finally:
        await e.close()
    e = Etcd([dead], timeout=0.5)
    try:
        with pytest.raises(Unavailable):
            await e.get("x")
    finally:
        await e.close()


def test_lease_keepalive_and_revoke(etcd, prefix):
    lease = Lease([parse_endpoint(etcd.endpoint)], 0x5eed0001, ttl=2)
    assert lease.grant() == 2
    lease.start()
    try:
        time.sleep(1.3)
        assert lease.keepalives >= 2 and lease.valid()
        assert 0 < lease.remaining() <= 2
        asyncio.run(_put_with_lease(etcd, f"{prefix}/k", 0x5eed0001))
        assert etcd.get(f"{prefix}/k") == "v"
    finally:
        assert lease.revoke()
    assert etcd.get(f"{prefix}/k") is None          # revoked: its keys go at once
    assert not lease.valid()


async def _put_with_lease(etcd, key, lease_id):
    e = client(etcd)
    try:
        await e.put(key, "v", lease=lease_id)
    finally:
        await e.close()


def test_lease_left_by_a_previous_process_is_taken_over(etcd, prefix):
    etcd.call("/v3/lease/grant", {"TTL": 60, "ID": str(0x5eed0002)})
    asyncio.run(_put_with_lease(etcd, f"{prefix}/old", 0x5eed0002))
    lease = Lease([parse_endpoint(etcd.endpoint)], 0x5eed0002, ttl=2)
    t0 = time.monotonic()
    assert lease.grant() == 2
    assert time.monotonic() - t0 < 1            # not after the old TTL (60 s)
    assert etcd.get(f"{prefix}/old") is None    # the old lease's keys went with it
    lease.revoke()


def test_lease_deadline_passes_while_etcd_is_stopped(etcd):
    """etcd keeps leases alive while it has no quorum, so the node must
    judge by its own clock: stopped etcd, the deadline passes within the TTL."""
    lost = threading.Event()
    lease = Lease([parse_endpoint(etcd.endpoint)], 0x5eed0003, ttl=2, on_lost=lambda reason: lost.set())
    lease.grant()
    lease.start()
    try:
        time.sleep(0.6)
        etcd.pause()
        t0 = time.monotonic()
        try:
            assert lost.wait(5)
            took = time.monotonic() - t0
            assert not lease.valid()
            assert took <= 2.0, took        # at the latest one TTL after the last keepalive
        finally:
            etcd.resume()
    finally:
        lease.revoke()


def test_isr_format():
    assert parse_isr(format_isr({1, 36, 2 ** 31 - 1})) == {1, 36, 2 ** 31 - 1}
    assert format_isr({36, 35}) == "z,10"      # by id, base36
    assert parse_isr(b"a,,zz?,b") == {10, 11}


async def _node(etcd, prefix, node_id):
    lease = Lease([parse_endpoint(etcd.endpoint)], node_id, ttl=2)
    await asyncio.to_thread(lease.grant)
    lease.start()
    return Coordinator(client(etcd), prefix, node_id, f"tcp://node{node_id}:5679"), lease


async def test_one_leader_and_only_from_the_isr(etcd, prefix):
    nodes = [await _node(etcd, prefix, 0x7e570000 + i) for i in range(3)]
    try:
        assert await nodes[0][0].secret() == await nodes[1][0].secret()     # put-if-absent: one secret
        tasks = {asyncio.ensure_future(c.campaign(lease.lease_id)): (c, lease) for c, lease in nodes}
        done, pending = await asyncio.wait(tasks, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1
        await asyncio.sleep(0.3)
        assert all(not t.done() for t in pending)      # nobody else leads
        winner, wlease = tasks[done.pop()]
        assert etcd.get(f"{prefix}/leader/{winner.node_id:x}") == winner.uri
        assert parse_isr(etcd.get(f"{prefix}/isr").encode()) == {winner.node_id}   # a new cluster's ISR
        losers = [(c, lease) for c, lease in nodes if c is not winner]
        with pytest.raises(StaleLeadership):
            await losers[0][0].write_isr({losers[0][0].node_id}, losers[0][1].lease_id)
        # the ISR: the winner and one loser; the other is out and must never lead
        inside, outside = losers
        await winner.write_isr({winner.node_id, inside[0].node_id}, wlease.lease_id)
        t0 = time.monotonic()
        await asyncio.to_thread(wlease.revoke)       # the leader stops cleanly: hands over at once
        by_node = {tasks_c: t for t, (tasks_c, _) in tasks.items()}
        await asyncio.wait_for(asyncio.shield(by_node[inside[0]]), 3)
        assert time.monotonic() - t0 < 1.0
        assert etcd.get(f"{prefix}/leader/{inside[0].node_id:x}") == inside[0].uri
        await asyncio.sleep(0.3)
        assert not by_node[outside[0]].done()
        # the out-of-ISR node does not lead even with no leader at all
        await asyncio.to_thread(inside[1].revoke)
        await asyncio.sleep(0.5)
        assert not by_node[outside[0]].done()
        assert etcd.get_prefix(f"{prefix}/leader/") == {}
        # the ISR takes it in again (an operator, or a leader after its sync): it leads
        etcd.call("/v3/kv/put", {"key": __import__("base64").b64encode(f"{prefix}/isr".encode()).decode(),
                                 "value": __import__("base64").b64encode(
                                     format_isr({outside[0].node_id}).encode()).decode()})
        await asyncio.wait_for(asyncio.shield(by_node[outside[0]]), 3)
        for t in tasks:
            t.cancel()
    finally:
        for c, lease in nodes:
            await asyncio.to_thread(lease.revoke)
            await c.etcd.close()


async def test_a_crashed_leaders_lease_expires(etcd, prefix):
    (a, alease), (b, blease) = [await _node(etcd, prefix, 0x7e580000 + i) for i in range(2)]
    try:
        await a.campaign(alease.lease_id)
        await a.write_isr({a.node_id, b.node_id}, alease.lease_id)
        task = asyncio.ensure_future(b.campaign(blease.lease_id))
        alease.stop()           # a "crash": no keepalive, no revoke
        t0 = time.monotonic()
        await asyncio.wait_for(task, 6)
        took = time.monotonic() - t0
        assert 0.5 < took < 3.5, took           # about one TTL (2 s), less the time since the last keepalive
        with pytest.raises(StaleLeadership):
            await a.write_isr({a.node_id}, alease.lease_id)
    finally:
        for c, lease in ((a, alease), (b, blease)):
            await asyncio.to_thread(lease.revoke)
            await c.etcd.close()


def test_a_node_id_another_leader_holds_is_refused(etcd, prefix):
    """Two nodes with one id (a copied data directory): the second must not
    take the first one's lease away."""
    from lavinmq.clustering.lease import LeaseTaken
    first = Lease([parse_endpoint(etcd.endpoint)], 0x5eed0004, ttl=2, uri="tcp://a:1",
                  leader_prefix=f"{prefix}/leader/")
    first.grant()
    first.start()
    try:
        asyncio.run(_put_with_lease(etcd, f"{prefix}/leader/5eed0004", 0x5eed0004))    # it leads (value "v")
        second = Lease([parse_endpoint(etcd.endpoint)], 0x5eed0004, ttl=2, uri="tcp://b:1",
                       leader_prefix=f"{prefix}/leader/")
        with pytest.raises(LeaseTaken, match="in use by the leader at v"):
            second.grant()
        second.revoke()                 # never granted: gives nothing back
        time.sleep(0.7)
        assert first.valid() and etcd.get(f"{prefix}/leader/5eed0004") == "v"
    finally:
        first.revoke()

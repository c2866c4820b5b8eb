"""What the management API, lavinmqctl and Prometheus show of a cluster,
and the wait that makes an API change durable on the in-sync replicas
before its answer goes out (as an AMQP declare-ok waits)."""
import asyncio

from lavinmq.clustering.settings import to_base36

REPLICATED_TIMEOUT = 30.0


def node_of(server):
    return getattr(server, "cluster", None)


async def replicated(server):
    """On a cluster's leader: until what was written so far is on every
    in-sync replica's disk. -> False if that did not happen (the leader
    lost its lease meanwhile, or timed out): the caller answers 503."""
    syncer = server.syncer
    if syncer is None or syncer.replicator is None:
        return True
    fut = asyncio.get_running_loop().create_future()

    def done():
        if not fut.done():
            fut.set_result(True)
    syncer.after_flush(done)
    try:
        return await asyncio.wait_for(asyncio.shield(fut), REPLICATED_TIMEOUT)
    except asyncio.TimeoutError:
        return False


def nodes(server, this_node):
    """/api/nodes in a cluster: this node (the leader) with its followers
    (LavinMQ's `followers`), then an entry per other node it knows of:
    connected followers, and ISR members that are not connected. Every node
    has one name wherever it appears (its own entry, the leader's `isr`,
    the Nodes page): lavinmq@<host of its advertised URI>."""
    node = node_of(server)
    if node is None or node.replicator is None:
        return [this_node]
    rep = node.replicator
    followers = []
    for f in rep.followers():
        node.peers[f["id"]] = f["uri"]
        followers.append({"id": to_base36(f["id"]), "name": node.peer_name(f["id"]), "uri": f["uri"],
                          "remote_address": f["address"], "state": f["state"], "in_isr": f["in_isr"],
                          "sent_bytes": f["sent_bytes"], "acked_bytes": f["acked_bytes"],
                          "lag_in_bytes": f["lag_in_bytes"]})
    this_node = dict(this_node, name=node.name, role="leader", cluster_node_id=to_base36(node.node_id), uri=node.uri,
                     in_isr=node.node_id in rep.etcd_isr, isr=sorted(node.peer_name(i) for i in rep.etcd_isr),
                     followers=followers)
    out = [this_node]
    seen = set()
    for f in followers:
        seen.add(f["id"])
        out.append({"name": f["name"], "type": "disc", "running": True, "role": "follower",
                    "cluster_node_id": f["id"], "uri": f["uri"], "in_isr": f["in_isr"], "state": f["state"],
                    "lag_in_bytes": f["lag_in_bytes"]})
    for i in sorted(rep.etcd_isr - {node.node_id}):
        if to_base36(i) not in seen:
            out.append({"name": node.peer_name(i), "type": "disc", "running": False, "role": "follower",
                        "cluster_node_id": to_base36(i), "uri": node.peers.get(i), "in_isr": True,
                        "state": "disconnected", "lag_in_bytes": None})
    return out


def metrics(server, w):
    """LavinMQ's names: <prefix>_total_connected_followers and
    <prefix>_follower_lag_in_bytes{id=<node id, base36>}."""
    node = node_of(server)
    rep = node.replicator if node is not None else None
    links = list(rep.links.values()) if rep is not None else []
    w.metric("total_connected_followers", "gauge", "Amount of follower nodes connected", len(links))
    if links:
        w.series("follower_lag_in_bytes", "gauge", "Bytes the follower has not acknowledged yet",
                 [({"id": to_base36(link.node_id)}, link.lag) for link in links])

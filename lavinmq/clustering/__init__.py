"""Clustering, as LavinMQ 2.x: one leader serves every client; followers
hold a copy of its data directory, kept in step file change by file change,
and proxy their clients to the leader; etcd elects the leader and keeps the
set of in-sync replicas (ISR), the nodes that hold every confirmed message.

Modules, in the order a node uses them:

    settings     the [clustering] settings checked, the node id file
    etcd         etcd's v3 JSON gateway over aiohttp (KV, txn, lease, watch)
    lease        the node's lease, kept alive from a thread; the deadline a
                 leader fences itself at, on its own clock
    coordinator  the keys: leader election gated on the ISR, the ISR written
                 by the leader only (fenced on its lease), the shared secret
    changes      the hook the broker's writers call (a no-op on a single node)
    protocol     the replication stream's frames
    files        the data directory as replicated: listing, checksums, paths
    replicator   leader: what a group commit flushes becomes one batch of
                 frames per follower; confirms wait until every ISR member
                 acknowledged the batch from its disk
    server       leader: the port followers connect to, full sync, streaming
    follower     follower: connect, sync, apply, fsync, acknowledge
    proxy        follower: AMQP, HTTP and metrics clients piped to the leader
    control      follower: the control socket (lavinmqctl)
    status       the nodes as the API, lavinmqctl and Prometheus show them
    node         a node's life: follow, campaign, lead, fence, hand over

Nothing here runs per message: the broker's hot path only meets the
replicator once per group commit (lavinmq/sync.py)."""

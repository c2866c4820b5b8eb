"""How the broker's writers tell replication about files they changed.

The group commit already reports what it flushes (segment ranges, ack
files, definitions appended: lavinmq/sync.py hands them to the
replicator once per flush). Everything else the broker writes goes through
one of these two calls, at the places that write: users.json, vhosts.json,
policies, a queue's paused mark, stream consumer offsets, and the removal
of segments, queues and vhosts. They cost one global lookup when this
process does not lead a cluster, and they never run per message.
"""
recorder = None     # the Replicator while this process leads a cluster


def changed(path):
    """The file at path (absolute) was written, replaced or created."""
    if recorder is not None:
        recorder.changed(path)


def removed(path):
    """The file or directory tree at path (absolute) is gone."""
    if recorder is not None:
        recorder.removed(path)

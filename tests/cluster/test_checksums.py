"""The checksums a full sync compares: one cache per node, whatever its
role, kept over a clean stop (lavinmq/clustering/files.py ChecksumCache).
Without it every node of a cluster hashed its whole data directory after
each failover."""
import os
import re
import tempfile

import pytest

from lavinmq.clustering import files
from tests.cluster.harness import wait_same_data
from tests.cluster.test_replication import publish

LEADER_LINE = re.compile(r"sync pass \d: \d+ files listed, \d+ sent \(\d+ bytes\), (\d+) hashed \((\d+) bytes\)")
FOLLOWER_LINE = re.compile(r"sync pass \d from \S+: \d+ files listed, \d+ to fetch, (\d+) hashed \((\d+) bytes\)")


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def listing(data_dir, cache):
    return {rel: digest for rel, _, digest in files.listing(data_dir, {}, cache)}


def test_a_saved_cache_is_taken_in_once_and_still_checks_the_files(tmp_path):
    data = tmp_path / "data"
    write(str(data / "vhost" / "q" / "msgs.0000000001"), b"a" * 100_000)
    write(str(data / "vhost" / "q" / "acks.0000000001"), b"b" * 10)
    cache = files.ChecksumCache()
    first = listing(str(data), cache)
    assert cache.hashed_files == 2
    cache.save(str(data))
    assert files.CHECKSUMS not in listing(str(data), cache)        # the node's own, never replicated
    again = files.ChecksumCache.restore(str(data))
    assert not os.path.exists(data / files.CHECKSUMS)              # it vouched for one stop only
    assert listing(str(data), again) == first
    assert again.hashed_files == 0
    # a file that changed since is hashed again, whatever the cache says
    with open(data / "vhost" / "q" / "acks.0000000001", "ab") as f:
        f.write(b"c")
    changed = listing(str(data), again)
    assert again.hashed_files == 1
    assert changed["vhost/q/acks.0000000001"] != first["vhost/q/acks.0000000001"]
    # nothing saved: an empty cache
    assert files.ChecksumCache.restore(str(data)).entries == {}


def test_a_damaged_cache_file_is_ignored(tmp_path):
    for damage in (b"", b"something else\n", files.ChecksumCache.HEADER + b"zz 1 2 3\n",
                   files.ChecksumCache.HEADER + b"%s x 1 1 1 a\n" % (b"0" * 40)):
        write(str(tmp_path / files.CHECKSUMS), damage)
        assert files.ChecksumCache.restore(str(tmp_path)).entries == {}
        assert not os.path.exists(tmp_path / files.CHECKSUMS)


def hashed_since(node, offset):
    """Bytes the node hashed for full syncs, in its log past offset, as
    leader and as follower; and how many sync lines said so."""
    text = node.log_text()[offset:]
    found = [int(m.group(2)) for m in LEADER_LINE.finditer(text)]
    found += [int(m.group(2)) for m in FOLLOWER_LINE.finditer(text)]
    return sum(found), len(found)


def data_bytes(data_dir):
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(data_dir)
               for name in names if name.startswith("msgs."))


# small segments: the data lies in closed segments, as most of a large
# data directory does. A write segment is hashed again after a failover
# all the same: the new leader's store extends it (its mtime changes).
SMALL_SEGMENTS = os.path.join(tempfile.gettempdir(), f"lavinmq-test-checksums-{os.getpid()}.ini")
with open(SMALL_SEGMENTS, "w") as _f:
    _f.write("[main]\nsegment_size = 262144\n")


@pytest.mark.cluster_args("-c", SMALL_SEGMENTS)
def test_a_failover_hashes_only_what_changed(cluster):
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    for q in range(3):
        publish(leader.url, f"q{q}", [bytes([i % 251]) * 1000 for i in range(2000)])
    # a first clean failover: every node hashes the data once, as leader or follower
    assert leader.stop() == 0
    second = cluster.wait_leader(other_than=leader)
    leader.start()
    cluster.wait_isr(3)
    wait_same_data(cluster.nodes)
    size = min(data_bytes(n.data_dir) for n in cluster.nodes)
    assert size > 5_000_000
    assert sum(name.startswith("msgs.") for _, _, names in os.walk(leader.data_dir) for name in names) > 20

    # the second: nothing changed since, so nothing but the commit files is hashed again
    offsets = [len(n.log_text()) for n in cluster.nodes]
    assert second.stop() == 0
    cluster.wait_leader(other_than=second)
    second.start()
    cluster.wait_isr(3)
    wait_same_data(cluster.nodes)
    total, lines = 0, 0
    for n, offset in zip(cluster.nodes, offsets):
        got, count = hashed_since(n, offset)
        total, lines = total + got, lines + count
    assert lines >= 4, "two followers' two passes each, as the leader and the followers logged them"
    # what is hashed again: the commit files (rewritten in place, always
    # hashed, in every pass of both ends), the three write segments and the
    # definitions, where every pass hashed the whole data before
    commit_bytes = sum(os.path.getsize(os.path.join(root, "commit")) for root, _, names in os.walk(second.data_dir)
                       if "commit" in names)
    assert total - lines * commit_bytes < 3 * 262144 + 4096, (total, lines, commit_bytes, size)
    assert "took in" in second.log_text()[offsets[second.index]:]

    # a node that crashed takes in nothing saved: it hashes all it holds
    victim = next(n for n in cluster.nodes if n is not cluster.leader())
    offset = len(victim.log_text())
    victim.kill()
    victim.start()
    cluster.wait_isr(3)
    assert hashed_since(victim, offset)[0] >= size

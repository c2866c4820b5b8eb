"""The replication frames and what a follower does with them, without a
network: paths from a leader are checked, writes land at their offsets, a
replaced file is never seen half written, a commit record is the
follower's own."""
import os

import pytest

from lavinmq import commit as commits
from lavinmq.clustering import files, protocol
from lavinmq.clustering.follower import ReplicationClient
from lavinmq.clustering.server import PAGE, pages_not_zero


def frames(data):
    """Split a byte string of frames -> [(type, body)]."""
    out, pos = [], 0
    while pos < len(data):
        kind, length = protocol.HEADER.unpack_from(data, pos)
        out.append((kind, data[pos + 5:pos + 5 + length]))
        pos += 5 + length
    assert pos == len(data)
    return out


def apply_all(client, data):
    for kind, body in frames(data):
        client._apply(kind, memoryview(body))


@pytest.fixture
def client(tmp_path):
    c = ReplicationClient(str(tmp_path), 1, b"s", "127.0.0.1", 1)
    c._listing = None       # streaming, not in a sync
    yield c
    c._close_fds()


def test_writes_replaces_deletes(client, tmp_path):
    out = bytearray()
    protocol.write_frames(out, "v/q/msgs.0000000001", 0, b"\x04\x00\x00\x00hello")
    protocol.write_frames(out, "v/q/msgs.0000000001", 9, b" world")
    out += protocol.sync_file_frame("users.json", 0, True, b"[]")
    apply_all(client, bytes(out))
    assert (tmp_path / "v/q/msgs.0000000001").read_bytes() == b"\x04\x00\x00\x00hello world"
    assert (tmp_path / "users.json").read_bytes() == b"[]"
    assert oct((tmp_path / "users.json").stat().st_mode & 0o777) == "0o600"     # hashes: owner only
    # a segment's first write brings the queue's commit file first (as on the leader)
    assert (tmp_path / "v/q/commit").exists()
    # a write applied twice changes nothing: the stream and a sync may overlap
    apply_all(client, bytes(out))
    assert (tmp_path / "v/q/msgs.0000000001").read_bytes() == b"\x04\x00\x00\x00hello world"
    apply_all(client, protocol.delete_frame("v/q/msgs.0000000001") + protocol.delete_frame("v"))
    assert not (tmp_path / "v").exists()
    apply_all(client, protocol.delete_frame("v/never/was"))          # gone already: fine


def test_a_replaced_file_arrives_whole(client, tmp_path):
    big = os.urandom(3 * 1024 * 1024)
    apply_all(client, protocol.sync_file_frame("vhosts.json", 0, False, big[:1 << 20]))
    assert not (tmp_path / "vhosts.json").exists()          # written aside until its last chunk
    apply_all(client, protocol.sync_file_frame("vhosts.json", 1 << 20, True, big[1 << 20:]))
    assert (tmp_path / "vhosts.json").read_bytes() == big
    assert not (tmp_path / "vhosts.json.tmp").exists()


def test_the_commit_record_is_the_followers_own(client, tmp_path):
    seg = b"\x04\x00\x00\x00" + os.urandom(1000)
    out = bytearray()
    protocol.write_frames(out, "v/q/msgs.0000000001", 0, seg)
    out += protocol.commit_frame("v/q", 5, 1, 4, [(1, len(seg))])
    apply_all(client, bytes(out))
    slot = commits.read_slots(str(tmp_path / "v/q"))[1][0]
    assert (slot.seq, slot.first, slot.start, slot.boot) == (5, 1, 4, commits.BOOT_ID)
    keep, remove = commits.recovery_plan(str(tmp_path / "v/q"), [1], [slot])
    assert keep == {1: len(seg)} and remove == []            # its checksum matches its own bytes


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a/../../b", "a//b", ".lock", ".clustering_id",
                                  "a\x00b", ""])
def test_paths_from_a_leader_are_checked(client, path):
    with pytest.raises((ValueError, protocol.ProtocolError)):
        apply_all(client, protocol.delete_frame(path))


def test_bad_frames(client):
    with pytest.raises(protocol.ProtocolError):
        client._apply(99, memoryview(b""))
    with pytest.raises(protocol.ProtocolError):
        client._apply(protocol.WRITE, memoryview(b"\x05\x00ab"))        # a path longer than the frame
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_commit(protocol.commit_frame("d", 1, 1, 4, [(1, 10)])[5:-1])


def test_what_is_replicated():
    assert files.replicated("users.json") and files.replicated("abc/def/msgs.0000000001")
    assert not files.replicated(".lock") and not files.replicated("abc/transient/q/msgs.1")
    assert not files.replicated("users.json.tmp")
    assert protocol.parse_list(b"".join(f[5:] for f in protocol.list_frames([("a/b", 7, b"x" * 20)]))) == \
        [("a/b", 7, b"x" * 20)]


def test_pages_of_zeros_are_left_out_but_not_the_first_or_last():
    commit_like = bytearray(3 * 65536 + 52)
    for off in (0, 65536, 131072, 196608):
        commit_like[off] = 1
    runs = pages_not_zero(bytes(commit_like), first=True, last=True)
    assert [(start, len(piece)) for start, piece in runs] == [(0, PAGE), (65536, PAGE), (131072, PAGE), (196608, 52)]
    assert pages_not_zero(bytes(3 * PAGE), first=False, last=False) == []        # inside a file: nothing
    assert [(s, len(p)) for s, p in pages_not_zero(bytes(3 * PAGE), first=True, last=True)] == \
        [(0, PAGE), (2 * PAGE, PAGE)]                                              # a file of zeros keeps its ends
    assert pages_not_zero(b"", first=True, last=True) == [(0, b"")]               # an empty file
    dense = bytes(range(256)) * 40
    assert pages_not_zero(dense, first=False, last=False) == [(0, dense)]         # one frame, not one per page

"""definitions.amqp: replay, compaction, a damaged tail."""
import os

from lavinmq import definitions
from lavinmq.vhost import VHost
from tests.unit.records import record


def make(tmp_path):
    return VHost("/", str(tmp_path))


def test_replay_restores_durable_state(tmp_path):
    v = make(tmp_path)
    v.declare_exchange("ex", "topic", True, False, False, {"alternate-exchange": "ae"})
    v.declare_exchange("tmp-ex", "direct", False, False, False, {})
    v.declare_queue("q", True, None, False, {"x-max-length": 10})
    v.declare_queue("tq", False, None, False, {})
    v.bind_queue("q", "ex", "a.#", {})
    v.bind_exchange("ex", "amq.direct", "k", {})
    v.close()
    v2 = make(tmp_path)
    assert set(v2.exchanges) >= {"ex"} and "tmp-ex" not in v2.exchanges
    assert set(v2.queues) == {"q"}
    assert v2.queues["q"].arguments == {"x-max-length": 10}
    assert v2.exchanges["ex"].arguments == {"alternate-exchange": "ae"}
    assert [(b.destination.name, b.routing_key) for b in v2.exchanges["ex"].bindings.values()] == [("q", "a.#")]
    assert [b.destination.name for b in v2.exchanges["amq.direct"].bindings.values()] == ["ex"]
    v2.close()


def test_compaction_after_many_deletes(tmp_path, monkeypatch):
    monkeypatch.setattr(definitions, "COMPACT_AFTER", 50)
    v = make(tmp_path)
    for i in range(200):
        v.declare_queue(f"q{i}", True, None, False, {})
        v.delete_queue(f"q{i}")
    v.declare_queue("kept", True, None, False, {})
    size = os.path.getsize(v.definitions.file.path)
    assert size < 50 * 40, f"definitions file not compacted ({size} bytes)"
    v.close()
    assert set(make(tmp_path).queues) == {"kept"}


def test_damaged_tail_cut_at_last_whole_frame(tmp_path):
    v = make(tmp_path)
    v.declare_queue("a", True, None, False, {})
    v.declare_queue("b", True, None, False, {})
    v.close()
    path = v.definitions.file.path
    with open(path, "ab") as f:
        f.write(b"\x01\x00\x00\x00\x00\x00\x40garbage")      # a frame cut short
    v2 = make(tmp_path)
    assert set(v2.queues) == {"a", "b"}
    v2.declare_queue("c", True, None, False, {})
    v2.close()
    assert set(make(tmp_path).queues) == {"a", "b", "c"}


def _frames(*steps):
    D = definitions
    out = []
    for step in steps:
        kind, *rest = step
        if kind == "xd":
            out.append((D.EXCHANGE_DECLARE, (0, rest[0], "direct", False, True, False, False, False, {})))
        elif kind == "xdel":
            out.append((D.EXCHANGE_DELETE, (0, rest[0], False, False)))
        elif kind == "qd":
            out.append((D.QUEUE_DECLARE, (0, rest[0], False, True, False, False, False, {})))
        elif kind == "qdel":
            out.append((D.QUEUE_DELETE, (0, rest[0], False, False, False)))
        elif kind == "qb":
            out.append((D.QUEUE_BIND, (0, rest[0], rest[1], rest[2], False, {"a": [1]})))
        elif kind == "qu":
            out.append((D.QUEUE_UNBIND, (0, rest[0], rest[1], rest[2], {"a": [1]})))
        elif kind == "xb":
            out.append((D.EXCHANGE_BIND, (0, rest[0], rest[1], rest[2], False, {})))
    return out


def test_live_frames_skip_every_removal_and_what_it_took():
    frames = _frames(
        ("xd", "ex"), ("qd", "q"), ("qb", "q", "ex", "k"),      # 0 1 2
        ("qdel", "q"), ("qd", "q"),                              # 3 4: the binding went with q
        ("qb", "q", "ex", "k2"), ("qu", "q", "ex", "k2"),        # 5 6: bound and unbound
        ("qb", "q", "ex", "k3"),                                 # 7
        ("xd", "src"), ("xb", "ex", "src", "e"),                 # 8 9: ex <- src
        ("xdel", "ex"), ("xd", "ex"),                            # 10 11: took 7 (from ex) and 9 (to ex)
        ("qb", "q", "ex", "k4"), ("qb", "q", "ex", "k4"),        # 12 13: the same binding twice
    )
    assert definitions.live_frames(frames) == {4, 8, 11, 12}


def test_queue_declared_deleted_and_declared_again_keeps_its_messages(tmp_path):
    """The issue's reproduction at the store level: replaying the delete
    removed the directory that the second declaration's messages live in."""
    v = make(tmp_path)
    v.declare_queue("q", True, None, False, {})
    v.delete_queue("q")
    q = v.declare_queue("q", True, None, False, {})
    for i in range(3):
        q.store.py_append(record(b"m%d" % i))
    assert q.store.ready == 3
    v.close()
    v2 = make(tmp_path)
    assert v2.queues["q"].store.ready == 3
    v2.close()


def test_crash_left_tombstone_is_swept(tmp_path):
    v = make(tmp_path)
    v.declare_queue("q", True, None, False, {})
    qdir = v.queues["q"].store.dir
    v.close()
    stone = qdir + ".deleted.0badf00d"
    os.makedirs(stone)
    open(os.path.join(stone, "msgs.0000000001"), "wb").close()
    v2 = make(tmp_path)
    assert not os.path.exists(stone)
    assert os.path.isdir(qdir) and "q" in v2.queues
    assert not os.path.exists(os.path.join(v2.dir, "orphaned"))
    v2.close()

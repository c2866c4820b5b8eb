"""definitions.amqp: replay, compaction, a damaged tail."""
import os

from lavinmq import definitions
from lavinmq.vhost import VHost


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

"""x-consistent-hash as LavinMQ: its default algorithm (ring) and
`[main] default_consistent_hash_algorithm` honoured, so the same keys land
on the same queues as in LavinMQ (the vectors of its spec: queues 1, 2, 3
of weight 3; r1 -> 1, r2 -> 3, r3 -> 3 on the ring)."""
import pika

from tests.conftest import BrokerProcess, unique
from tests.parity.helpers import api


def routed(url, vhost, **exchange_args):
    conn = pika.BlockingConnection(pika.URLParameters(url.rsplit("/", 1)[0] + "/" + vhost))
    ch = conn.channel()
    x = unique("chx")
    ch.exchange_declare(x, "x-consistent-hash", auto_delete=True, arguments=exchange_args or None)
    for q in ("1", "2", "3"):
        ch.queue_declare(q, auto_delete=True)
        ch.queue_purge(q)
        ch.queue_bind(q, x, "3")
    ch.confirm_delivery()
    for rk in ("r1", "r2", "r3"):
        ch.basic_publish(x, rk, rk.encode())
    where = {}
    for q in ("1", "2", "3"):
        while (m := ch.basic_get(q, auto_ack=True))[0] is not None:
            where[m[2].decode()] = q
    conn.close()
    return [where[k] for k in ("r1", "r2", "r3")]


def test_ring_is_the_default_and_x_algorithm_picks(broker):
    vhost = unique("chash")
    assert api(broker, "PUT", f"/api/vhosts/{vhost}")[0] == 201
    all_ = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api(broker, "PUT", f"/api/permissions/{vhost}/guest", all_)[0] in (201, 204)
    assert routed(broker.url, vhost) == ["1", "3", "3"]
    assert routed(broker.url, vhost, **{"x-algorithm": "jump"}) == ["1", "3", "1"]
    assert routed(broker.url, vhost, **{"x-algorithm": "Ring"}) == ["1", "3", "3"]     # Crystal's enum parse
    api(broker, "DELETE", f"/api/vhosts/{vhost}")


def test_default_algorithm_from_the_ini(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\ndefault_consistent_hash_algorithm = jump\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        assert routed(b.url, "%2F") == ["1", "3", "1"]
        assert routed(b.url, "%2F", **{"x-algorithm": "ring"}) == ["1", "3", "3"]
    finally:
        b.stop()
    ini.write_text("[main]\ndefault_consistent_hash_algorithm = rendezvous\n")
    b = BrokerProcess(tmp_path / "data2", extra_args=["-c", str(ini)])
    try:
        b.start()
        raise AssertionError("an unknown algorithm must stop the start")
    except RuntimeError as exc:
        assert "default_consistent_hash_algorithm" in str(exc)

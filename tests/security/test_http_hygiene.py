"""Issue 14 item 13: bad input over HTTP is a 400 with a reason, never a
500; a queue name that is not UTF-8 does not break /metrics or the API;
.../get checks `truncate` before it takes messages (it used to take, then
fail, and the messages were gone)."""
import pytest
from pamqp import commands

from tests.helpers.rawclient import RawClient
from tests.security.conftest import call, start_broker


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    b = start_broker(tmp_path_factory.mktemp("hygiene"))
    yield b
    assert b.stop() == 0
    b.check_clean()


def test_non_utf8_queue_name_everywhere(make_broker):
    b = make_broker()
    c = RawClient(b.host, b.port)
    c.open_channel()
    c.send(1, commands.Queue.Declare(queue="ok"))
    c.expect(commands.Queue.DeclareOk)
    # pamqp encodes str as UTF-8: a name with a raw 0xff byte goes in by hand
    payload = (b"\x00\x32\x00\x0a" + b"\x00\x00" + b"\x04q\xff\xfeq" + b"\x00" + b"\x00\x00\x00\x00")
    c.sendall(b"\x01\x00\x01" + len(payload).to_bytes(4, "big") + payload + b"\xce")
    kind, _, answer = c.read_raw_frame()           # pamqp can't decode the name it carries
    assert kind == 1 and answer[:4] == b"\x00\x32\x00\x0b" and b"q\xff\xfeq" in answer
    assert call(b, "GET", "/metrics")[0] == 200
    status, text = call(b, "GET", "/metrics/detailed?family=queue_coarse_metrics&family=queue_consumer_count")
    assert status == 200 and 'queue="q\\\\xff\\\\xfeq"' in text
    status, queues = call(b, "GET", "/api/queues")
    assert status == 200 and len(queues) == 2
    c.close()


@pytest.mark.parametrize("method,path,body", [
    ("PUT", "/api/queues/%2F/t1", {"durable": "yes"}),
    ("PUT", "/api/queues/%2F/t1", {"arguments": ["x"]}),
    ("PUT", "/api/queues/%2F/t1", {"auto_delete": 3}),
    ("PUT", "/api/exchanges/%2F/x1", {"type": 5}),
    ("PUT", "/api/exchanges/%2F/x1", {"type": "direct", "arguments": "no"}),
    ("PUT", "/api/users/u1", {"password": 5}),
    ("PUT", "/api/users/u1", {"password": "x", "tags": 5}),
    ("PUT", "/api/permissions/%2F/guest", {"configure": 5}),
    ("POST", "/api/bindings/%2F/e/amq.direct/q/target", {"routing_key": ["a"]}),
    ("POST", "/api/bindings/%2F/e/amq.direct/q/target", {"arguments": "a"}),
    ("POST", "/api/exchanges/%2F/amq.direct/publish", {"routing_key": 1, "payload": "x",
                                                       "payload_encoding": "string"}),
    ("POST", "/api/exchanges/%2F/amq.direct/publish", {"routing_key": "a", "payload": {"x": 1},
                                                       "payload_encoding": "string"}),
    ("POST", "/api/exchanges/%2F/amq.direct/publish", {"routing_key": "a", "payload": "x",
                                                       "payload_encoding": "string", "properties": "p"}),
    ("POST", "/api/queues/%2F/target/get", {"count": "1", "ackmode": "ack_requeue_true", "encoding": "auto"}),
    ("POST", "/api/queues/%2F/target/get", {"count": 1, "ackmode": 1, "encoding": "auto"}),
    ("PUT", "/api/vhost-limits/%2F/max-queues", {"value": "ten"}),
    ("PUT", "/api/policies/%2F/p", {"pattern": 1, "definition": {}}),
    ("POST", "/api/definitions", {"users": "x"}),
    ("POST", "/api/definitions", {"queues": [{"name": 5}]}),
])
def test_bad_types_are_400(shared, method, path, body):
    b = shared
    call(b, "PUT", "/api/queues/%2F/target", {})
    status, answer = call(b, method, path, body)
    assert status == 400, (status, answer)
    assert answer["reason"]


def test_get_checks_truncate_before_taking(make_broker):
    b = make_broker()
    assert call(b, "PUT", "/api/queues/%2F/keep", {})[0] == 201
    msg = {"routing_key": "keep", "payload": "important", "payload_encoding": "string"}
    assert call(b, "POST", "/api/exchanges/%2F/amq.default/publish", msg)[1] == {"routed": True}
    for truncate in ("abc", -1, 1.5):
        status, _ = call(b, "POST", "/api/queues/%2F/keep/get", {"count": 1, "ackmode": "ack_requeue_false",
                                                                 "encoding": "auto", "truncate": truncate})
        assert status == 400
    assert call(b, "GET", "/api/queues/%2F/keep")[1]["messages"] == 1
    status, got = call(b, "POST", "/api/queues/%2F/keep/get", {"count": 1, "ackmode": "ack_requeue_false",
                                                               "encoding": "auto", "truncate": 4})
    assert status == 200 and got[0]["payload"] == "impo" and got[0]["payload_bytes"] == 9

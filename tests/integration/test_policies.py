"""Policies and operator policies take effect: applied over HTTP to queues
that already hold messages, un-applied when deleted, the stricter limit
wins, shown by the API, set by lavinmqctl, exported and imported."""
import io
import time

import pika
import pytest

from lavinmq import ctl
from tests.conftest import unique
from tests.integration.test_http_api import call


@pytest.fixture
def api(broker):
    if broker.external:
        pytest.skip("uses our broker's HTTP API")
    return broker


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def count(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def wait_for(fn, want, timeout=2.0):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def test_policy_applies_to_existing_queue_and_unapplies(api):
    c = connect(api)
    ch = c.channel()
    prefix = unique("pol")
    q = prefix + ".q"
    ch.queue_declare(q, durable=True)
    for i in range(10):
        ch.basic_publish("", q, b"%d" % i)
    name = unique("p")
    t0 = time.monotonic()
    assert call(api, "PUT", f"/api/policies/%2F/{name}",
                {"pattern": f"^{prefix}\\.", "definition": {"max-length": 4}, "apply-to": "queues"})[0] == 201
    assert wait_for(lambda: count(ch, q), 4, timeout=1.0) == 4
    assert time.monotonic() - t0 < 1.0
    status, shape = call(api, "GET", f"/api/queues/%2F/{q}")
    assert shape["policy"] == name and shape["effective_policy_definition"] == {"max-length": 4}
    # a new queue matching the pattern gets it too
    q2 = prefix + ".later"
    ch.queue_declare(q2, durable=True)
    for i in range(6):
        ch.basic_publish("", q2, b"%d" % i)
    assert wait_for(lambda: count(ch, q2), 4) == 4
    assert call(api, "DELETE", f"/api/policies/%2F/{name}")[0] == 204
    for i in range(6):
        ch.basic_publish("", q, b"x%d" % i)
    assert wait_for(lambda: count(ch, q), 10) == 10
    assert call(api, "GET", f"/api/queues/%2F/{q}")[1]["policy"] is None
    ch.queue_delete(q)
    ch.queue_delete(q2)
    c.close()


def test_policy_ttl_and_dead_letter_on_existing_messages(api):
    c = connect(api)
    ch = c.channel()
    prefix = unique("ttl")
    q, dlq = prefix + ".q", prefix + ".dead"
    ch.queue_declare(q, exclusive=True)
    ch.queue_declare(dlq, exclusive=True)
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    name = unique("p")
    call(api, "PUT", f"/api/policies/%2F/{name}",
         {"pattern": f"^{prefix}\\.q$", "definition": {"message-ttl": 100, "dead-letter-exchange": "",
                                                       "dead-letter-routing-key": dlq}})
    assert wait_for(lambda: count(ch, dlq), 3) == 3
    m, p, _ = ch.basic_get(dlq, auto_ack=True)
    assert p.headers["x-death"][0]["reason"] == "expired"
    call(api, "DELETE", f"/api/policies/%2F/{name}")
    c.close()


def test_stricter_of_argument_policy_and_operator_policy(api):
    c = connect(api)
    ch = c.channel()
    prefix = unique("cap")
    q = prefix + ".q"
    ch.queue_declare(q, exclusive=True, arguments={"x-max-length": 50})
    user_p, op_p = unique("user"), unique("op")
    call(api, "PUT", f"/api/policies/%2F/{user_p}",
         {"pattern": f"^{prefix}", "definition": {"max-length": 100, "overflow": "reject-publish"}})
    assert call(api, "PUT", f"/api/operator-policies/%2F/{op_p}",
                {"pattern": f"^{prefix}", "definition": {"max-length": 3}, "apply-to": "queues"})[0] == 201
    shape = call(api, "GET", f"/api/queues/%2F/{q}")[1]
    assert shape["policy"] == user_p and shape["operator_policy"] == op_p
    assert shape["effective_policy_definition"]["max-length"] == 3
    for i in range(6):
        ch.basic_publish("", q, b"%d" % i)
    assert wait_for(lambda: count(ch, q), 3) == 3
    # operator policies are for administrators, and only for limits
    status, body = call(api, "PUT", f"/api/operator-policies/%2F/{unique('bad')}",
                        {"pattern": ".", "definition": {"dead-letter-exchange": "x"}})
    assert status == 400 and "operator policy" in body["reason"]
    status, body = call(api, "PUT", f"/api/policies/%2F/{unique('bad')}",
                        {"pattern": ".", "definition": {"max-length": "lots"}})
    assert status == 400 and "max-length" in body["reason"]
    for kind, n in (("policies", user_p), ("operator-policies", op_p)):
        assert call(api, "DELETE", f"/api/{kind}/%2F/{n}")[0] == 204
    c.close()


def test_lavinmqctl_and_definitions_cover_both_kinds(api):
    sock = f"{api.data_dir}/lavinmqctl.sock"
    name, op = unique("ctl"), unique("ctlop")

    def run(*args):
        out = io.StringIO()
        rc = ctl.main(["--socket", sock, *args], out=out)
        return rc, out.getvalue()
    assert run("set_policy", name, "^ctl-", '{"message-ttl": 1000}', "--apply-to", "queues")[0] == 0
    assert run("set_operator_policy", op, "^ctl-", '{"max-length": 5}')[0] == 0
    assert name in run("list_policies")[1]
    assert op in run("list_operator_policies")[1]
    status, defs = call(api, "GET", "/api/definitions")
    assert any(p["name"] == name for p in defs["policies"])
    assert any(p["name"] == op for p in defs["operator_policies"])
    assert run("clear_policy", name)[0] == 0
    assert run("clear_operator_policy", op)[0] == 0
    assert call(api, "GET", f"/api/policies/%2F/{name}")[0] == 404
    # and back from the export
    assert call(api, "POST", "/api/definitions", defs)[0] in (200, 201, 204)
    assert call(api, "GET", f"/api/operator-policies/%2F/{op}")[1]["definition"] == {"max-length": 5}
    call(api, "DELETE", f"/api/operator-policies/%2F/{op}")
    call(api, "DELETE", f"/api/policies/%2F/{name}")


def test_policies_survive_restart(fresh_broker):
    b = fresh_broker
    prefix = unique("keep")
    call(b, "PUT", "/api/policies/%2F/keep", {"pattern": f"^{prefix}", "definition": {"max-length": 2}})
    b.restart()
    c = connect(b)
    ch = c.channel()
    ch.queue_declare(prefix + ".q", durable=True)
    for i in range(5):
        ch.basic_publish("", prefix + ".q", b"%d" % i)
    assert wait_for(lambda: count(ch, prefix + ".q"), 2) == 2
    c.close()


@pytest.mark.parametrize("apply_to, classic, quorum, stream", [
    ("streams", False, False, True),
    ("classic_queues", True, True, False),      # LavinMQ: both reach every queue but streams
    ("quorum_queues", True, True, False),
    ("queues", True, True, True),
])
def test_apply_to_by_queue_type(api, apply_to, classic, quorum, stream):
    """A streams policy with max-length 5 used to cut a classic queue of 20
    messages to 5: apply-to by queue type was read as "queues"."""
    c = connect(api)
    ch = c.channel()
    prefix = unique("kind")
    queues = {prefix + ".classic": {}, prefix + ".quorum": {"x-queue-type": "quorum"},
              prefix + ".stream": {"x-queue-type": "stream"}}
    for q, args in queues.items():
        ch.queue_declare(q, durable=True, arguments=args)
        for i in range(20):
            ch.basic_publish("", q, b"%d" % i)
    name = unique("p")
    assert call(api, "PUT", f"/api/policies/%2F/{name}",
                {"pattern": f"^{prefix}\\.", "definition": {"max-length": 5}, "apply-to": apply_to})[0] == 201
    # an operator policy follows the same rule
    op = unique("op")
    assert call(api, "PUT", f"/api/operator-policies/%2F/{op}",
                {"pattern": f"^{prefix}\\.", "definition": {"message-ttl": 600000}, "apply-to": apply_to})[0] == 201
    for q, wanted in zip(queues, (classic, quorum, stream)):
        shape = wait_for(lambda: call(api, "GET", f"/api/queues/%2F/{q}")[1]["policy"], name if wanted else None)
        assert shape == (name if wanted else None), (apply_to, q)
        _, shape = call(api, "GET", f"/api/queues/%2F/{q}")
        assert shape["operator_policy"] == (op if wanted else None), (apply_to, q)
        if not q.endswith("stream"):
            assert wait_for(lambda: count(ch, q), 5 if wanted else 20) == (5 if wanted else 20), (apply_to, q)
    assert call(api, "GET", f"/api/queues/%2F/{prefix}.quorum")[1]["type"] == "quorum"
    assert call(api, "DELETE", f"/api/policies/%2F/{name}")[0] == 204
    assert call(api, "DELETE", f"/api/operator-policies/%2F/{op}")[0] == 204
    for q in queues:
        ch.queue_delete(q)
    c.close()

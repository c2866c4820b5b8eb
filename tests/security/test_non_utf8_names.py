"""Issue 25 finding 6: a queue whose name is not UTF-8 escaped policies
and operator policies: RE2 refused the surrogate-escaped name, the queue
was left without any policy and every boot logged a traceback for it."""
import struct

from tests.helpers.rawclient import RawClient
from tests.security.conftest import call

NAME = b"bin-\xff\xfe-q"


def _method(ch, cid, mid, payload):
    p = struct.pack(">HH", cid, mid) + payload
    return struct.pack(">BHI", 1, ch, len(p)) + p + b"\xce"


def _declare(c, passive=False):
    c.sendall(_method(1, 50, 10, struct.pack(">HB", 0, len(NAME)) + NAME + (b"\x03" if passive else b"\x02")
                      + struct.pack(">I", 0)))
    kind, _, payload = c.read_raw_frame()          # pamqp cannot decode the name
    assert kind == 1 and payload[:4] == struct.pack(">HH", 50, 11), payload
    n = payload[4]
    assert payload[5:5 + n] == NAME
    return struct.unpack_from(">I", payload, 5 + n)[0]


def _publish(c, n):
    for i in range(n):
        c.sendall(_method(1, 60, 40, struct.pack(">HB", 0, 0) + struct.pack(">B", len(NAME)) + NAME + b"\x00"))
        header = struct.pack(">HHQH", 60, 0, 1, 0)
        c.sendall(struct.pack(">BHI", 2, 1, len(header)) + header + b"\xce" + struct.pack(">BHI", 3, 1, 1) + b"m\xce")


def test_policies_reach_queues_whose_names_are_not_utf8(make_broker):
    b = make_broker()
    c = RawClient(b.host, b.port)
    c.open_channel(1)
    _declare(c)
    assert call(b, "PUT", "/api/policies/%2F/cap", {"pattern": "^bin-", "apply-to": "queues",
                                                    "definition": {"max-length": 3}})[0] == 201
    # an operator policy as operators write a catch-all
    assert call(b, "PUT", "/api/operator-policies/%2F/all", {"pattern": "^.*$", "apply-to": "queues",
                                                             "definition": {"max-length": 2}})[0] == 201
    _publish(c, 5)
    assert _declare(c, passive=True) == 2          # the stricter of the two applies
    status, queues = call(b, "GET", "/api/queues/%2F")
    mine = [q for q in queues if q["name"].startswith("bin-")]
    assert status == 200 and len(mine) == 1
    assert mine[0]["policy"] == "cap" and mine[0]["operator_policy"] == "all"
    # the name filter of the listing too
    status, body = call(b, "GET", "/api/queues?use_regex=true&name=%5Ebin-..-q%24")
    assert status == 200 and len(body) == 1, body
    status, body = call(b, "GET", "/api/queues?page=1&use_regex=true&name=-q%24")
    assert status == 200 and body["filtered_count"] == 1, body
    c.close()
    # durable: after a restart it has its policies again, without a traceback (checked at teardown)
    b.restart()
    c = RawClient(b.host, b.port)
    c.open_channel(1)
    _publish(c, 3)
    assert _declare(c, passive=True) == 2
    c.close()
    assert "applying policies" not in b.log_text()

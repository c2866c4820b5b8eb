"""Definitions round trip, as a property: Hypothesis draws topologies
(vhosts, users with their hashes, permissions, policies, operator policies,
vhost limits, global and runtime parameters, exchanges of every type with
their arguments, queues of every kind, queue and exchange-to-exchange
bindings, and LavinMQ's and RabbitMQ's ways of writing some of them),
imports each into a real broker, exports it, imports the export into a
second broker that started empty, exports again and compares. Every drawn
object must be in the first export, and the two exports must be the same.
Each draw has names of its own, so the brokers are shared by the draws."""
import base64
import hashlib
import itertools
import json
import os
import urllib.parse

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import BrokerProcess
from tests.integration.test_http_api import call

NAME_CHARS = "abcxyz019._-: /åé€ü"
names = st.text(NAME_CHARS, min_size=1, max_size=8)
_draws = itertools.count()

HASHES = {"rabbit_password_hashing_sha256": hashlib.sha256, "rabbit_password_hashing_sha512": hashlib.sha512,
          "rabbit_password_hashing_md5": hashlib.md5}
json_values = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 40, 2 ** 40) | st.text(max_size=6),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3),
                           max_leaves=6)


@st.composite
def password_hash(draw, algorithm):
    salt = draw(st.binary(min_size=4, max_size=4))
    return base64.b64encode(salt + HASHES[algorithm](salt + draw(st.binary(max_size=8))).digest()).decode()


@st.composite
def users(draw):
    algorithm = draw(st.sampled_from(sorted(HASHES)))
    user = {"hashing_algorithm": algorithm,
            "tags": draw(st.lists(st.sampled_from(["administrator", "management", "monitoring", "policymaker"]),
                                  unique=True, max_size=2))}
    if draw(st.booleans()):
        user["password_hash"] = draw(password_hash(algorithm))
    else:
        user["password"] = draw(st.text(min_size=1, max_size=8))
        user["hashing_algorithm"] = "rabbit_password_hashing_sha256"
    return user


@st.composite
def exchange(draw, others):
    kind = draw(st.sampled_from(["direct", "fanout", "topic", "headers", "x-consistent-hash",
                                 "x-delayed-message", "x-delayed-exchange"]))
    args = {}
    if kind in ("x-delayed-message", "x-delayed-exchange"):     # RabbitMQ's plugin's and LavinMQ's forms
        args["x-delayed-type"] = draw(st.sampled_from(["direct", "fanout", "topic", "headers"]))
    if kind == "x-consistent-hash" and draw(st.booleans()):
        args["x-algorithm"] = draw(st.sampled_from(["ring", "jump"]))
    if others and draw(st.booleans()):
        args[draw(st.sampled_from(["alternate-exchange", "x-alternate-exchange"]))] = draw(st.sampled_from(others))
    if draw(st.booleans()):
        args[draw(st.sampled_from(["x-persist-messages", "x-persist-ms"]))] = draw(st.integers(0, 10 ** 6))
    if draw(st.booleans()):
        args.update({"x-message-deduplication": True, "x-cache-size": draw(st.integers(1, 1000))})
    return {"type": kind, "durable": True, "auto_delete": draw(st.booleans()), "internal": draw(st.booleans()),
            "arguments": args}


@st.composite
def queue(draw, exchanges):
    kind = draw(st.sampled_from(["classic", "priority", "stream", "quorum"]))
    args = {}
    if kind == "stream":
        args["x-queue-type"] = "stream"
        for key, value in (("x-max-age", st.sampled_from(["1D", "7D", "12h"])),
                           ("x-max-length-bytes", st.integers(1, 10 ** 12))):
            if draw(st.booleans()):
                args[key] = draw(value)
        return {"durable": True, "auto_delete": False, "arguments": args}
    if kind == "priority":
        args["x-max-priority"] = draw(st.integers(1, 255))
    if kind == "quorum":
        args["x-queue-type"] = "quorum"
    optional = {"x-max-length": st.integers(0, 10 ** 6), "x-message-ttl": st.integers(0, 10 ** 7),
                "x-overflow": st.sampled_from(["drop-head", "reject-publish", "reject-publish-dlx"]),
                "x-delivery-limit": st.integers(0, 100), "x-single-active-consumer": st.booleans(),
                "x-max-length-bytes": st.integers(0, 10 ** 9)}
    for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True, max_size=3)):
        args[key] = draw(optional[key])
    if exchanges and draw(st.booleans()):
        args["x-dead-letter-exchange"] = draw(st.sampled_from(exchanges))
        if draw(st.booleans()):
            args["x-dead-letter-routing-key"] = draw(names)
    # a quorum queue cannot be auto-delete (RabbitMQ's rule, lavinmq/queue/quorum.py)
    return {"durable": True, "auto_delete": kind != "quorum" and draw(st.booleans()), "arguments": args}


POLICY_KEYS = {"max-length": st.integers(0, 10 ** 6), "message-ttl": st.integers(0, 10 ** 7),
               "max-length-bytes": st.integers(0, 10 ** 9), "delivery-limit": st.integers(0, 50),
               "overflow": st.sampled_from(["drop-head", "reject-publish"]),
               "dead-letter-exchange": names, "alternate-exchange": names, "max-age": st.sampled_from(["1D", "3h"]),
               "delayed-message": st.just(True)}
OPERATOR_KEYS = ("max-length", "message-ttl", "max-length-bytes", "delivery-limit", "overflow")


@st.composite
def policy(draw, operator):
    keys = draw(st.lists(st.sampled_from(OPERATOR_KEYS if operator else sorted(POLICY_KEYS)), unique=True,
                         min_size=1, max_size=3))
    apply_to = ["all", "queues", "classic_queues", "quorum_queues", "streams"] + ([] if operator else ["exchanges"])
    return {"pattern": draw(st.sampled_from(["^a", "b", ".*", "^x.z$", "é|ü"])),
            "apply-to": draw(st.sampled_from(apply_to)), "priority": draw(st.integers(-5, 5)),
            "definition": {k: draw(POLICY_KEYS[k]) for k in keys}}


@st.composite
def vhost_topology(draw):
    """One vhost's objects, named by index; named for real by _render."""
    ex_names = draw(st.lists(names, unique=True, max_size=4))
    exchanges = {n: draw(exchange([o for o in ex_names if o != n])) for n in ex_names}
    q_names = draw(st.lists(names, unique=True, max_size=4))
    queues = {n: draw(queue(ex_names)) for n in q_names}
    bindings = []
    for _ in range(draw(st.integers(0, 6)) if ex_names else 0):
        source = draw(st.sampled_from(ex_names))
        kinds = (["queue"] if q_names else []) + (["exchange"] if len(ex_names) > 1 else [])
        if not kinds:
            break
        kind = draw(st.sampled_from(kinds))
        dest = draw(st.sampled_from(q_names if kind == "queue" else [n for n in ex_names if n != source]))
        source_type = exchanges[source]["arguments"].get("x-delayed-type", exchanges[source]["type"])
        if source_type == "x-consistent-hash":
            key = str(draw(st.integers(1, 100)))          # the destination's weight
        else:
            key = draw(st.text(NAME_CHARS + "*#", max_size=8))
        args = {}
        if source_type == "headers" and draw(st.booleans()):
            args = {"x-match": draw(st.sampled_from(["all", "any"])), "h": draw(st.text(max_size=4))}
        bindings.append({"source": source, "destination": dest, "destination_type": kind,
                         "routing_key": key, "arguments": args})
    return {"exchanges": exchanges, "queues": queues, "bindings": bindings,
            "policies": draw(st.dictionaries(names, policy(False), max_size=2)),
            "operator_policies": draw(st.dictionaries(names, policy(True), max_size=1)),
            "limits": draw(st.fixed_dictionaries({}, optional={"max-connections": st.integers(0, 100),
                                                                "max-queues": st.integers(0, 100)})),
            "limits_as_parameter": draw(st.booleans()),
            "delay_stores_listed": draw(st.booleans()),
            "shovel": draw(st.booleans()), "upstream": draw(st.booleans())}


@st.composite
def topology(draw):
    return {"vhosts": draw(st.lists(vhost_topology(), min_size=1, max_size=2)),
            "users": draw(st.lists(users(), max_size=2)),
            "permissions": draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1),
                                                   st.sampled_from([".*", "", "^app\\.", "a|b"])), max_size=3)),
            "global_parameters": draw(st.lists(json_values, max_size=2))}


def _render(t):
    """The definitions file of a drawn topology, every name unique to this
    draw; also what the export must then hold."""
    tag = f"d{next(_draws)}-"
    body = {k: [] for k in ("vhosts", "users", "permissions", "exchanges", "queues", "bindings", "policies",
                            "operator_policies", "parameters", "global_parameters")}
    expected = {k: [] for k in body}
    users = [dict(u, name=f"{tag}u{i}") for i, u in enumerate(t["users"])]
    body["users"] = users
    expected["users"] = [{"name": u["name"], "tags": u["tags"]} for u in users]
    vhost_names = [f"{tag}v{i}" for i in range(len(t["vhosts"]))]
    for vi, (v, vt) in enumerate(zip(vhost_names, t["vhosts"])):
        q = lambda n: tag + "q" + n     # noqa: E731
        x = lambda n: tag + "x" + n     # noqa: E731
        body["vhosts"].append({"name": v})
        limits = vt["limits"]
        if limits and vt["limits_as_parameter"]:        # RabbitMQ's and LavinMQ's form
            body["parameters"].append({"name": "limits", "vhost": v, "component": "vhost-limits", "value": limits})
        elif limits:
            body["vhosts"][-1]["limits"] = limits
        expected["vhosts"].append({"name": v, "limits": limits})
        for n, e in vt["exchanges"].items():
            args = dict(e["arguments"])
            for key in ("alternate-exchange", "x-alternate-exchange"):
                if key in args:
                    args[key] = x(args[key])
            body["exchanges"].append(dict(e, name=x(n), vhost=v, arguments=args))
            expected["exchanges"].append(dict(e, name=x(n), vhost=v, arguments=args, type=(
                "x-delayed-message" if e["type"] == "x-delayed-exchange" else e["type"])))
            if "x-delayed-type" in args and vt["delay_stores_listed"]:
                # LavinMQ lists a delayed exchange's store among the queues
                body["queues"].append({"name": "amq.delayed-" + x(n), "vhost": v, "durable": True,
                                       "auto_delete": False, "arguments": {"x-dead-letter-exchange": x(n)}})
        for n, qd in vt["queues"].items():
            args = dict(qd["arguments"])
            if "x-dead-letter-exchange" in args:
                args["x-dead-letter-exchange"] = x(args["x-dead-letter-exchange"])
            item = dict(qd, name=q(n), vhost=v, arguments=args)
            body["queues"].append(item)
            expected["queues"].append(item)
        for b in vt["bindings"]:
            item = dict(b, vhost=v, source=x(b["source"]),
                        destination=(q if b["destination_type"] == "queue" else x)(b["destination"]))
            body["bindings"].append(item)
            expected["bindings"].append(item)
        for key in ("policies", "operator_policies"):
            for n, p in vt[key].items():
                item = dict(p, name=tag + n, vhost=v)
                if key == "operator_policies" and vi == 0:     # RabbitMQ's and LavinMQ's form
                    body["parameters"].append({"name": tag + n, "vhost": v, "component": "operator_policy",
                                               "value": p})
                else:
                    body[key].append(item)
                expected[key].append(item)
        params = []
        if vt["shovel"]:
            params.append({"name": tag + "shovel", "vhost": v, "component": "shovel",
                           "value": {"src-uri": "amqp://127.0.0.1:1", "src-queue": "a",
                                     "dest-uri": "amqp://127.0.0.1:1", "dest-queue": "b"}})
        if vt["upstream"]:
            params.append({"name": tag + "upstream", "vhost": v, "component": "federation-upstream",
                           "value": {"uri": "amqp://127.0.0.1:1", "prefetch-count": 10}})
        body["parameters"] += params
        expected["parameters"] += params
    for ui, vi, pattern in t["permissions"]:
        if ui < len(users) and vi < len(vhost_names):
            p = {"user": users[ui]["name"], "vhost": vhost_names[vi], "configure": pattern, "write": pattern,
                 "read": ".*"}
            body["permissions"].append(p)
            expected["permissions"].append(p)
    body["global_parameters"] = [{"name": f"{tag}g{i}", "value": value}
                                 for i, value in enumerate(t["global_parameters"])]
    expected["global_parameters"] = body["global_parameters"]
    # permissions are unique by (user, vhost): the last one drawn wins
    expected["permissions"] = list({(p["user"], p["vhost"]): p for p in expected["permissions"]}.values())
    return body, expected


def _key(item):
    return json.dumps(item, sort_keys=True)


def normalised(export):
    """An export with lists as sorted sets, without version fields."""
    return {k: sorted(map(_key, v)) for k, v in export.items() if isinstance(v, list)}


def _held(export, expected):
    have = {k: {_key(i) for i in v} for k, v in export.items() if isinstance(v, list)}
    for key, items in expected.items():
        for item in items:
            if key == "users":
                match = [u for u in export["users"] if u["name"] == item["name"]]
                assert match and sorted(match[0]["tags"]) == sorted(item["tags"]), (key, item, match)
                continue
            if key == "vhosts":
                match = [v for v in export["vhosts"] if v["name"] == item["name"]]
                assert match and match[0]["limits"] == item["limits"], (key, item, match)
                continue
            assert _key(item) in have[key], (key, item, [i for i in export[key] if i.get("vhost") == item.get("vhost")])


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    a = BrokerProcess(tmp_path_factory.mktemp("a") / "data").start()
    b = BrokerProcess(tmp_path_factory.mktemp("b") / "data").start()
    yield a, b
    for broker in (a, b):
        assert broker.stop() == 0, broker.log_tail()
        broker.check_clean()


@pytest.mark.timeout(600)      # 40 draws take ~30 s on a quiet machine
@settings(max_examples=int(os.environ.get("LAVINMQ_DEFINITIONS_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(topology())
def test_definitions_round_trip(pair, t):
    a, b = pair
    body, expected = _render(t)
    status, reason = call(a, "POST", "/api/definitions", body)
    assert status == 204, reason
    _, first = call(a, "GET", "/api/definitions")
    _held(first, expected)
    for u in body["users"]:         # a user's own hash comes back as it was given
        if "password_hash" in u:
            assert {"name": u["name"], "password_hash": u["password_hash"], "hashing_algorithm": u["hashing_algorithm"],
                    "tags": u["tags"], "limits": {}} in first["users"]
    assert not any(q["name"].startswith("amq.delayed") for q in first["queues"])
    status, reason = call(b, "POST", "/api/definitions", first)
    assert status == 204, reason
    _, second = call(b, "GET", "/api/definitions")
    assert normalised(second) == normalised(first)
    # a vhost's own export goes back into that vhost the same way
    for v in body["vhosts"]:
        path = "/api/definitions/" + urllib.parse.quote(v["name"], safe="")
        _, mine = call(a, "GET", path)
        status, reason = call(b, "POST", path, mine)
        assert status == 204, reason
        assert normalised(call(b, "GET", path)[1]) == normalised(mine)


@pytest.mark.timeout(600)
@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(topology())
def test_a_broker_started_with_an_export_holds_it(pair, tmp_path_factory, t):
    """load_definitions of an export: the broker starts, holds what the
    export holds, and starts again with the same file over its data."""
    a, _ = pair
    body, _ = _render(t)
    assert call(a, "POST", "/api/definitions", body)[0] == 204
    _, exported = call(a, "GET", "/api/definitions")
    path = tmp_path_factory.mktemp("load")
    (path / "backup.json").write_text(json.dumps(exported))
    (path / "lavinmq.ini").write_text(f"[main]\nload_definitions = {path / 'backup.json'}\n")
    c = BrokerProcess(path / "data", extra_args=["-c", str(path / "lavinmq.ini")]).start()
    want = normalised(exported)
    # guest is the new broker's own: what exists is kept, its hash too
    want["users"] = [u for u in want["users"] if '"name": "guest"' not in u]
    try:
        for restarted in (False, True):
            if restarted:
                c.restart()
            loaded = normalised(call(c, "GET", "/api/definitions")[1])
            loaded["users"] = [u for u in loaded["users"] if '"name": "guest"' not in u]
            assert loaded == want, restarted
    finally:
        c.stop()
    c.check_clean()

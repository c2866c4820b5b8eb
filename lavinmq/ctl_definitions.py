"""`lavinmqctl definitions DATA_DIR`, as LavinMQ's: the definitions JSON of a
data directory read from its files (users.json, vhosts.json, each vhost's
definitions.amqp, policy and parameter files), without a broker — to rescue the
topology of a broker that does not start. Only reads: a damaged tail of
definitions.amqp is skipped, not cut. The output has the shape of GET
/api/definitions, so POST /api/definitions (or import_definitions) takes it."""
import os

import orjson

import lavinmq
from lavinmq import definitions as defs


def _json_file(path, default):
    try:
        with open(path, "rb") as f:
            return orjson.loads(f.read())
    except FileNotFoundError:
        return default


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode(errors="replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _replay(path):
    """(exchanges, queues, bindings) that the frames of one definitions.amqp
    leave declared, in declaration order."""
    exchanges, queues, bindings = {}, {}, {}
    for key, args in defs.DefinitionsFile(path).frames(repair=False):
        if key == defs.EXCHANGE_DECLARE:
            _, name, type_name, _, durable, auto_delete, internal, _, arguments = args
            arguments = _jsonable(arguments or {})
            if arguments.get("x-delayed-exchange") is True:     # as the API exports it
                arguments = {k: v for k, v in arguments.items() if k != "x-delayed-exchange"}
                arguments["x-delayed-type"], type_name = type_name, "x-delayed-message"
            exchanges.setdefault(name, {"name": name, "type": type_name, "durable": durable,
                                        "auto_delete": auto_delete, "internal": internal,
                                        "arguments": arguments})
        elif key == defs.EXCHANGE_DELETE:
            exchanges.pop(args[1], None)
            for k in [k for k in bindings if k[0] == args[1] or (k[1] == "exchange" and k[2] == args[1])]:
                del bindings[k]
        elif key == defs.QUEUE_DECLARE:
            _, name, _, durable, _, auto_delete, _, arguments = args
            queues.setdefault(name, {"name": name, "durable": durable, "auto_delete": auto_delete,
                                     "arguments": _jsonable(arguments or {})})
        elif key == defs.QUEUE_DELETE:
            queues.pop(args[1], None)
            for k in [k for k in bindings if k[1] == "queue" and k[2] == args[1]]:
                del bindings[k]
        elif key in (defs.QUEUE_BIND, defs.QUEUE_UNBIND, defs.EXCHANGE_BIND, defs.EXCHANGE_UNBIND):
            if key in (defs.QUEUE_BIND, defs.QUEUE_UNBIND):
                dest, source, rk = args[1], args[2], args[3]
                kind = "queue"
            else:
                dest, source, rk = args[1], args[2], args[3]
                kind = "exchange"
            arguments = _jsonable(args[-1] or {})
            k = (source, kind, dest, rk, orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS))
            if key in (defs.QUEUE_BIND, defs.EXCHANGE_BIND):
                bindings.setdefault(k, {"source": source, "destination": dest, "destination_type": kind,
                                        "routing_key": rk, "arguments": arguments})
            else:
                bindings.pop(k, None)
    return list(exchanges.values()), list(queues.values()), list(bindings.values())


def from_data_dir(data_dir):
    for f in ("vhosts.json", "users.json"):
        if not os.path.isfile(os.path.join(data_dir, f)):
            raise ValueError(f"{f} not found. Is {data_dir} a data directory?")
    vhosts = _json_file(os.path.join(data_dir, "vhosts.json"), [])
    users = _json_file(os.path.join(data_dir, "users.json"), [])
    out = {"lavinmq_version": lavinmq.__version__, "product_name": "LavinMQ",
           "users": [], "vhosts": [], "permissions": [], "exchanges": [], "queues": [], "bindings": [],
           "policies": [], "operator_policies": [], "parameters": [], "global_parameters": []}
    for u in users:
        tags = u.get("tags") or ""
        out["users"].append({"name": u["name"], "password_hash": u.get("password_hash", ""),
                             "hashing_algorithm": u.get("hashing_algorithm", "rabbit_password_hashing_sha256"),
                             "tags": tags.split(",") if isinstance(tags, str) and tags else
                             (tags if isinstance(tags, list) else [])})
        for vhost, p in (u.get("permissions") or {}).items():
            out["permissions"].append({"user": u["name"], "vhost": vhost, "configure": p.get("config", ""),
                                       "write": p.get("write", ""), "read": p.get("read", "")})
    for v in vhosts:
        name = v["name"]
        out["vhosts"].append({"name": name, "limits": v.get("limits") or {}})
        vdir = os.path.join(data_dir, v.get("dir") or "")
        exchanges, queues, bindings = _replay(os.path.join(vdir, "definitions.amqp"))
        out["exchanges"] += [{**e, "vhost": name} for e in exchanges]
        out["queues"] += [{**q, "vhost": name} for q in queues]
        out["bindings"] += [{**b, "vhost": name} for b in bindings]
        for key, filename in (("policies", "policies.json"), ("operator_policies", "operator_policies.json")):
            for pname, body in _json_file(os.path.join(vdir, filename), {}).items():
                out[key].append({"name": pname, "vhost": name, **body})
        out["parameters"] += [{"name": p["name"], "vhost": name, "component": p["component"], "value": p["value"]}
                              for p in _entries(os.path.join(vdir, "parameters.json"))]
    out["global_parameters"] = [{"name": p["name"], "value": p["value"]}
                                for p in _entries(os.path.join(data_dir, "parameters.json"))]
    return out


def _entries(path):
    """A parameters.json's [{"component", "name", "value"}] (a damaged one: none)."""
    try:
        entries = _json_file(path, [])
    except ValueError:
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str) and "value" in e]

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
    leave declared, in declaration order (defs.live_frames, as a boot)."""
    f = defs.DefinitionsFile(path)
    live = defs.live_frames(f.frames(repair=False))
    exchanges, queues, bindings = [], [], []
    for i, (key, args) in enumerate(f.frames(repair=False)):
        if i not in live:
            continue
        if key == defs.EXCHANGE_DECLARE:
            _, name, type_name, _, durable, auto_delete, internal, _, arguments = args
            arguments = _jsonable(arguments or {})
            if arguments.get("x-delayed-exchange") is True:     # as the API exports it
                arguments = {k: v for k, v in arguments.items() if k != "x-delayed-exchange"}
                arguments["x-delayed-type"], type_name = type_name, "x-delayed-message"
            exchanges.append({"name": name, "type": type_name, "durable": durable,
                              "auto_delete": auto_delete, "internal": internal,
                              "arguments": arguments})
        elif key == defs.QUEUE_DECLARE:
            _, name, _, durable, _, auto_delete, _, arguments = args
            queues.append({"name": name, "durable": durable, "auto_delete": auto_delete,
                           "arguments": _jsonable(arguments or {})})
        elif key in (defs.QUEUE_BIND, defs.EXCHANGE_BIND):
            bindings.append({"source": args[2], "destination": args[1],
                             "destination_type": "queue" if key == defs.QUEUE_BIND else "exchange",
                             "routing_key": args[3], "arguments": _jsonable(args[-1] or {})})
    return exchanges, queues, bindings


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

"""lavinmqctl's commands, as LavinMQ's `src/lavinmqctl/cli.cr` has them (and
a few of ours: streams, operator policies). Each takes the HTTP client and
the parsed arguments and returns what lavinmq.ctl prints: None (nothing,
as LavinMQ prints nothing after a change), Info (a line hidden by -q),
Table, Fields, a JSON-able value, or a list of those."""
import json
import sys
import urllib.parse

from lavinmq.auth.password import hash_password


class CtlError(Exception):
    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


EX_USAGE = 2


class Info(str):
    """An informational line ("Listing users ..."), hidden by -q/-s and json."""


class Table:
    """Rows under a header line (tab-separated), or a JSON list of objects."""

    def __init__(self, columns, rows, info=None):
        self.columns, self.rows, self.info = columns, rows, info


class Fields(dict):
    """LavinMQ's "Key: value" lines, or one JSON object."""


def q(name):
    """A path segment: vhost '/' is %2F, as the API expects."""
    return urllib.parse.quote(name, safe="")


def _tags(tags):
    return ",".join(tags) if isinstance(tags, list) else (tags or "")


def _json_arg(text, what):
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CtlError(f"{what} is not JSON: {exc}", EX_USAGE)
    if not isinstance(value, dict):
        raise CtlError(f"{what} must be a JSON object", EX_USAGE)
    return value


# -- users ------------------------------------------------------------------------

def list_users(c, a):
    return Table(["name", "tags"], [[u["name"], _tags(u.get("tags"))] for u in c.get("/users")],
                 "Listing users ...")


def add_user(c, a):
    c.put(f"/users/{q(a.username)}", {"password": a.password, "tags": ",".join(a.tags)})


def delete_user(c, a):
    c.delete(f"/users/{q(a.username)}")


def change_password(c, a):
    user = c.get(f"/users/{q(a.username)}")
    c.put(f"/users/{q(a.username)}", {"password": a.password, "tags": _tags(user.get("tags"))})


def set_user_tags(c, a):
    user = c.get(f"/users/{q(a.username)}")
    c.put(f"/users/{q(a.username)}", {"password_hash": user.get("password_hash", ""),
                                      "hashing_algorithm": user.get("hashing_algorithm",
                                                                    "rabbit_password_hashing_sha256"),
                                      "tags": ",".join(a.tags)})


def set_permissions(c, a):
    c.put(f"/permissions/{q(a.vhost)}/{q(a.username)}",
          {"configure": a.configure, "write": a.write, "read": a.read})


def hash_password_cmd(c, a):
    return hash_password(a.password)


# -- vhosts -----------------------------------------------------------------------

def list_vhosts(c, a):
    return Table(["name"], [[v["name"]] for v in c.get("/vhosts")], "Listing vhosts ...")


def add_vhost(c, a):
    c.put(f"/vhosts/{q(a.name)}", {})


def delete_vhost(c, a):
    c.delete(f"/vhosts/{q(a.name)}")


def set_vhost_limits(c, a):
    """LavinMQ's set_vhost_limits '{"max-connections": 10, "max-queues": 5}'."""
    limits = _json_arg(a.json, "the limits")
    known = {k: v for k, v in limits.items() if k in ("max-connections", "max-queues")
             and isinstance(v, int) and not isinstance(v, bool)}
    if not known:
        raise CtlError("max-queues or max-connections required", EX_USAGE)
    for key, value in known.items():
        c.put(f"/vhost-limits/{q(a.vhost)}/{key}", {"value": value})


# -- queues -----------------------------------------------------------------------

def list_queues(c, a):
    # LavinMQ's columns (name, messages) first, then ours
    rows = [[x["name"], x.get("messages", 0), x.get("messages_ready", 0),
             x.get("messages_unacknowledged", 0), x.get("consumers", 0)]
            for x in c.get(f"/queues/{q(a.vhost)}")]
    return Table(["name", "messages", "ready", "unacked", "consumers"], rows,
                 f"Listing queues for vhost {a.vhost} ...")


def list_streams(c, a):
    rows = [[x["name"], x.get("messages", 0), x["stream"]["first_offset"], x["stream"]["last_offset"],
             x["stream"]["message_bytes"], x["stream"]["segments"], x.get("consumers", 0)]
            for x in c.get(f"/queues/{q(a.vhost)}") if x.get("type") == "stream"]
    return Table(["name", "messages", "first_offset", "last_offset", "bytes", "segments", "consumers"], rows,
                 f"Listing streams for vhost {a.vhost} ...")


def list_stream_consumers(c, a):
    """Connected stream consumers with their cursor, and the offsets stored
    for tracked consumer tags (connected or not)."""
    streams = {x["name"]: x for x in c.get(f"/queues/{q(a.vhost)}") if x.get("type") == "stream"}
    rows, seen = [], set()
    for x in c.get(f"/consumers/{q(a.vhost)}"):
        name = x["queue"]["name"]
        if name in streams and "stream" in x:
            st = x["stream"]
            seen.add((name, x["consumer_tag"]))
            rows.append([name, x["consumer_tag"], True, st["offset"], st.get("last_delivered_offset"),
                         st.get("committed_offset")])
    for name, info in streams.items():
        for tag, offset in info["stream"].get("consumer_offsets", {}).items():
            if (name, tag) not in seen:
                rows.append([name, tag, False, None, None, offset])
    return Table(["stream", "consumer_tag", "connected", "offset", "last_delivered", "stored_offset"], rows,
                 f"Listing stream consumers for vhost {a.vhost} ...")


def create_queue(c, a):
    args = _json_arg(a.args, "--args")
    # LavinMQ's flags for the common arguments
    for key, value in (("x-expires", a.expires), ("x-max-length", a.max_length),
                       ("x-message-ttl", a.message_ttl), ("x-delivery-limit", a.delivery_limit),
                       ("x-dead-letter-exchange", a.dead_letter_exchange),
                       ("x-dead-letter-routing-key", a.dead_letter_routing_key)):
        if value is not None:
            args[key] = value
    if a.reject_on_overflow:
        args["x-overflow"] = "reject-publish"
    if a.stream_queue:
        args["x-queue-type"] = "stream"
    c.put(f"/queues/{q(a.vhost)}/{q(a.name)}", {"durable": a.durable, "auto_delete": a.auto_delete,
                                                "arguments": args})


def purge_queue(c, a):
    c.delete(f"/queues/{q(a.vhost)}/{q(a.name)}/contents")


def _queue_action(action):
    def run(c, a):
        c.put(f"/queues/{q(a.vhost)}/{q(a.name)}/{action}", None)
    run.__name__ = f"{action}_queue"
    return run


pause_queue = _queue_action("pause")
resume_queue = _queue_action("resume")
restart_queue = _queue_action("restart")


def delete_queue(c, a):
    c.delete(f"/queues/{q(a.vhost)}/{q(a.name)}")


# -- exchanges --------------------------------------------------------------------

def list_exchanges(c, a):
    rows = [[x["name"], x["type"], x.get("durable"), x.get("auto_delete"), x.get("internal")]
            for x in c.get(f"/exchanges/{q(a.vhost)}")]
    return Table(["name", "type", "durable", "auto_delete", "internal"], rows,
                 f"Listing exchanges for vhost {a.vhost} ...")


def create_exchange(c, a):
    args = _json_arg(a.args, "--args")
    for key, value in (("x-alternate-exchange", a.alternate_exchange), ("x-persist-messages", a.persist_messages),
                       ("x-persist-ms", a.persist_ms)):
        if value is not None:
            args[key] = value
    body = {"type": a.type, "durable": a.durable, "auto_delete": a.auto_delete, "internal": a.internal,
            "arguments": args}
    if a.delayed:
        body["delayed"] = True
    c.put(f"/exchanges/{q(a.vhost)}/{q(a.name)}", body)


def delete_exchange(c, a):
    c.delete(f"/exchanges/{q(a.vhost)}/{q(a.name)}")


# -- policies ---------------------------------------------------------------------

def _policy_commands(path, what):
    def list_(c, a):
        rows = [[p["vhost"], p["name"], p["pattern"], p.get("apply-to", "all"),
                 json.dumps(p.get("definition", {})), p.get("priority", 0)]
                for p in c.get(f"/{path}/{q(a.vhost)}")]
        return Table(["vhost", "name", "pattern", "apply-to", "definition", "priority"], rows,
                     f"Listing {what.replace('policy', 'policies')} for vhost {a.vhost} ...")

    def set_(c, a):
        c.put(f"/{path}/{q(a.vhost)}/{q(a.name)}",
              {"pattern": a.pattern, "definition": _json_arg(a.definition, "definition"),
               "priority": a.priority, "apply-to": a.apply_to})

    def clear(c, a):
        c.delete(f"/{path}/{q(a.vhost)}/{q(a.name)}")
    return list_, set_, clear


list_policies, set_policy, clear_policy = _policy_commands("policies", "policy")
list_operator_policies, set_operator_policy, clear_operator_policy = _policy_commands(
    "operator-policies", "operator policy")


# -- connections ------------------------------------------------------------------

CONNECTION_COLUMNS = ["user", "peer_host", "peer_port", "state"]     # LavinMQ's default


def erlang_terms(value):
    """client_properties as LavinMQ (and rabbitmqctl) print them."""
    if isinstance(value, dict):
        return "[" + ",".join(f'{{"{k}",{erlang_terms(v)}}}' for k, v in value.items()) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def list_connections(c, a):
    """LavinMQ's list_connections [column ...] (default user, peer_host,
    peer_port, state); any field of /api/connections is a column."""
    columns = a.columns or CONNECTION_COLUMNS
    rows = []
    for conn in c.get("/connections"):
        rows.append([erlang_terms(conn.get(col)) if col == "client_properties" and a.format != "json"
                     else conn.get(col) for col in columns])
    return Table(columns, rows, "Listing connections ...")


def close_connection(c, a):
    c.delete(f"/connections/{q(a.name)}", headers={"X-Reason": a.reason})
    return Info(f"Closing connection {a.name} ...")


def close_all_connections(c, a):
    """Every connection of the node, or of -p VHOST when one is given."""
    out, closed = [], []
    for conn in c.get("/connections"):
        if a.vhost_given and conn.get("vhost") != a.vhost:
            continue
        out.append(Info(f"Closing connection {conn['name']} ..."))
        try:
            c.delete(f"/connections/{q(conn['name'])}", headers={"X-Reason": a.reason})
        except CtlError as exc:
            if "404" not in str(exc):       # closed meanwhile: that is what was asked
                raise
        closed.append([conn["name"]])
    out.append(Table(["closed_connections"], closed))
    return out


# -- shovels and federation upstreams (runtime parameters) --------------------------

# LavinMQ's lavinmqctl fills in what add_shovel / add_federation are not given
SHOVEL_DEFAULTS = {"src-prefetch-count": 1000, "reconnect-delay": 5, "ack-mode": "on-confirm",
                   "src-delete-after": "never"}
FEDERATION_DEFAULTS = {"prefetch-count": 1000, "reconnect-delay": 1, "ack-mode": "on-confirm", "max-hops": 1}


def list_shovels(c, a):
    rows = [[s["name"], s.get("vhost"), s.get("state") or "N/A"] for s in c.get(f"/shovels/{q(a.vhost)}")]
    return Table(["name", "vhost", "state"], rows, f"Listing shovels for vhost {a.vhost} ...")


def _given(a, keys, rename=None):
    rename = rename or {}
    attr = lambda k: rename.get(k, k.replace("-", "_"))     # noqa: E731
    return {k: getattr(a, attr(k)) for k in keys if getattr(a, attr(k), None) is not None}


SHOVEL_KEYS = ("src-uri", "dest-uri", "src-queue", "dest-queue", "src-exchange", "dest-exchange",
               "src-exchange-key", "dest-exchange-key", "src-prefetch-count", "src-delete-after", "ack-mode",
               "reconnect-delay")
FEDERATION_KEYS = ("uri", "expires", "message-ttl", "max-hops", "prefetch-count", "reconnect-delay", "ack-mode",
                   "consumer-tag", "exchange", "queue")


def add_shovel(c, a):
    value = _given(a, SHOVEL_KEYS)
    if "src-uri" not in value or "dest-uri" not in value:
        raise CtlError("Fields '--src-uri' and '--dest-uri' are required", EX_USAGE)
    c.put(f"/parameters/shovel/{q(a.vhost)}/{q(a.name)}", {"value": {**SHOVEL_DEFAULTS, **value}})


def delete_shovel(c, a):
    c.delete(f"/parameters/shovel/{q(a.vhost)}/{q(a.name)}")


def list_federations(c, a):
    rows = [[f["name"], f.get("component")] for f in c.get(f"/parameters/federation-upstream/{q(a.vhost)}")]
    return Table(["name", "component"], rows, f"Listing federation upstreams for vhost {a.vhost} ...")


def add_federation(c, a):
    value = _given(a, FEDERATION_KEYS, {"uri": "upstream_uri"})
    if "uri" not in value:
        raise CtlError("Field '--uri' is required", EX_USAGE)
    c.put(f"/parameters/federation-upstream/{q(a.vhost)}/{q(a.name)}",
          {"value": {**FEDERATION_DEFAULTS, **value}})


def delete_federation(c, a):
    c.delete(f"/parameters/federation-upstream/{q(a.vhost)}/{q(a.name)}")


# -- definitions ------------------------------------------------------------------

def export_definitions(c, a):
    return c.get(f"/definitions/{q(a.vhost)}" if a.vhost_given else "/definitions")


def import_definitions(c, a):
    try:
        with (sys.stdin if a.file == "-" else open(a.file)) as f:
            body = json.load(f)
    except (OSError, ValueError) as exc:
        raise CtlError(f"cannot read definitions from {a.file}: {exc}", 1)
    c.post(f"/definitions/{q(a.vhost)}" if a.vhost_given else "/definitions", body)


def definitions(c, a):
    """Definitions JSON from a data directory, read directly (the broker
    may be stopped), as LavinMQ's lavinmqctl definitions DATADIR."""
    from lavinmq.ctl_definitions import from_data_dir
    try:
        return from_data_dir(a.data_dir_path)
    except (OSError, ValueError) as exc:
        raise CtlError(str(exc), 1)


# -- the server -------------------------------------------------------------------

def status(c, a):
    """LavinMQ's status: its keys, "Key: value" lines; the uptime in ms
    in JSON (LavinMQ's), with its units in text (issue 14: a bare number
    was read as seconds)."""
    o = c.get("/overview")
    totals = o.get("object_totals", {})
    msgs = o.get("queue_totals", {})
    uptime = o.get("uptime") if a.format == "json" else format_uptime(o.get("uptime"))
    if o.get("role") not in (None, "leader"):
        # a cluster's follower (lavinmq/clustering/control.py): no clients of its own
        repl = o.get("replication") or {}
        return Fields(Version=o.get("lavinmq_version"), Node=o.get("node"), Uptime=uptime, Role=o.get("role"),
                      Leader=o.get("leader") or "none", Leader_API=o.get("leader_api"),
                      Replication=repl.get("state"))
    role = {"Role": "leader"} if o.get("role") == "leader" else {}
    return Fields(Version=o.get("lavinmq_version") or o.get("rabbitmq_version") or o.get("product_version"),
                  Node=o.get("node"), Uptime=uptime, **role,
                  Connections=totals.get("connections"), Channels=totals.get("channels"),
                  Consumers=totals.get("consumers"), Exchanges=totals.get("exchanges"),
                  Queues=totals.get("queues"), Bindings=totals.get("bindings"),
                  Messages=msgs.get("messages", 0), Messages_ready=msgs.get("messages_ready", 0),
                  Messages_unacked=msgs.get("messages_unacknowledged", 0))


def format_uptime(ms):
    """The API's uptime (milliseconds) with its units: 1d 2h 3m 4s."""
    if not isinstance(ms, int):
        return ms
    s = ms // 1000
    parts = [(s // 86400, "d"), (s // 3600 % 24, "h"), (s // 60 % 60, "m")]
    text = " ".join(f"{n}{unit}" for n, unit in parts if n)
    return f"{text} {s % 60}s".strip()


def cluster_status(c, a):
    """The nodes as the leader sees them (a follower passes the request on):
    role, in-sync replica, replication lag; a single node says so."""
    rows = []
    for n in c.get("/nodes"):
        if "role" not in n:
            rows.append([n.get("name"), "single node", None, None, None, None])
            continue
        rows.append([n.get("name"), n.get("role"), n.get("uri"), n.get("in_isr"),
                     0 if n.get("role") == "leader" else n.get("lag_in_bytes"), n.get("state", "leading")])
    return Table(["node", "role", "uri", "in_isr", "lag_in_bytes", "state"], rows)


def gc_collect(c, a):
    c.post("/nodes/gc_collect", None)
    return Fields(c.get("/nodes/gc_stats"))


def app_noop(c, a):
    """stop_app / start_app: LavinMQ accepts them and does nothing."""

"""lavinmqctl: manage a running broker through its HTTP API, over TCP
(--uri) or the control UNIX socket the broker listens on (LavinMQ's
`control_unix_path`, where the same API is served). The API is
RabbitMQ's, so this also works against RabbitMQ's management plugin.

Exit codes: 0 ok, 1 the broker refused (not found, bad request), 2 bad
usage, 69 broker unreachable, 77 not authorised."""
import argparse
import base64
import http.client
import json
import os
import socket
import struct
import sys
import urllib.parse

from lavinmq.auth.password import hash_password
from lavinmq.safetext import escape_controls

# the broker listens on DATA_DIR/lavinmqctl.sock: the packages' data dir
# first (the service's /tmp is private), then LavinMQ's own default, then
# ./data (where `./dev run` keeps its data, for a fresh clone). Each is used
# only if root, the broker's user or we own it (see trusted_socket).
DEFAULT_SOCKETS = ("/var/lib/lavinmq/lavinmqctl.sock", "/tmp/lavinmqctl.sock", "data/lavinmqctl.sock")
BROKER_USER = "lavinmq"
DEFAULT_URI = "http://127.0.0.1:15672"
EX_USAGE, EX_UNAVAILABLE, EX_NOPERM = 2, 69, 77


class Info(str):
    """An informational line ("Adding user ..."), hidden by --quiet."""


class CtlError(Exception):
    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)
        # What the path looked like before (trusted_socket) proves nothing:
        # it may be swapped (a symlink flipped in a writable directory)
        # between that look and connect(). The kernel's word on the process
        # that listens on the socket we are connected to is what counts.
        uid = peer_uid(self.sock)
        if uid not in trusted_uids():
            self.sock.close()
            self.sock = None
            raise CtlError(f"refusing to send credentials to {self.unix_path}: the process listening there runs "
                           f"as uid {uid}, not as root, {BROKER_USER} or you", EX_NOPERM)


def peer_uid(sock):
    """The user id of the process at the other end of a connected UNIX socket (SO_PEERCRED)."""
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                        struct.calcsize("3i")))
    return uid


class Client:
    """One HTTP request per call; JSON in, JSON out."""

    def __init__(self, uri=None, user=None, password=None, unix_path=None):
        self.unix_path = unix_path
        u = urllib.parse.urlsplit(uri or DEFAULT_URI)
        if u.scheme not in ("http", "https"):
            raise CtlError(f"--uri must be http:// or https://, not {uri!r}", EX_USAGE)
        self.scheme, self.host, self.port = u.scheme, u.hostname or "127.0.0.1", u.port
        self.prefix = u.path.rstrip("/")
        user = user or urllib.parse.unquote(u.username or "") or "guest"
        password = password or urllib.parse.unquote(u.password or "") or "guest"
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def _connection(self):
        if self.unix_path:
            return UnixHTTPConnection(self.unix_path)
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=30)

    def request(self, method, path, body=None, headers=None):
        conn = self._connection()
        hdrs = {"Authorization": self.auth, **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        where = self.unix_path or f"{self.host}:{self.port}"
        try:
            conn.request(method, self.prefix + "/api" + path, data, hdrs)
            resp = conn.getresponse()
            raw = resp.read()
        except (ConnectionRefusedError, FileNotFoundError, socket.gaierror, socket.timeout, OSError) as exc:
            raise CtlError(f"cannot reach the broker at {where}: {exc}", EX_UNAVAILABLE)
        finally:
            conn.close()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode(errors="replace")
        if resp.status >= 400:
            reason = payload.get("reason") if isinstance(payload, dict) else payload
            code = EX_NOPERM if resp.status in (401, 403) else 1
            raise CtlError(f"{method} {path}: {resp.status} {reason or resp.reason}", code)
        return payload

    get = lambda self, path: self.request("GET", path)                     # noqa: E731
    put = lambda self, path, body: self.request("PUT", path, body)         # noqa: E731
    delete = lambda self, path, **kw: self.request("DELETE", path, **kw)   # noqa: E731
    post = lambda self, path, body: self.request("POST", path, body)       # noqa: E731


def q(name):
    """A path segment: vhost '/' is %2F, as the API expects."""
    return urllib.parse.quote(name, safe="")


# -- commands: each returns (columns, rows) to print, a str, or None ------------

def list_users(c, a):
    return ["name", "tags"], [[u["name"], _tags(u.get("tags"))] for u in c.get("/users")]


def _tags(tags):
    return ",".join(tags) if isinstance(tags, list) else (tags or "")


def add_user(c, a):
    c.put(f"/users/{q(a.username)}", {"password": a.password, "tags": ",".join(a.tags)})
    return Info(f"Adding user {a.username}")


def delete_user(c, a):
    c.delete(f"/users/{q(a.username)}")
    return Info(f"Deleting user {a.username}")


def change_password(c, a):
    user = c.get(f"/users/{q(a.username)}")
    c.put(f"/users/{q(a.username)}", {"password": a.password, "tags": _tags(user.get("tags"))})
    return Info(f"Changing password for user {a.username}")


def set_user_tags(c, a):
    user = c.get(f"/users/{q(a.username)}")
    c.put(f"/users/{q(a.username)}", {"password_hash": user.get("password_hash", ""),
                                      "hashing_algorithm": user.get("hashing_algorithm",
                                                                    "rabbit_password_hashing_sha256"),
                                      "tags": ",".join(a.tags)})
    return Info(f"Setting tags for user {a.username} to {a.tags}")


def set_permissions(c, a):
    c.put(f"/permissions/{q(a.vhost)}/{q(a.username)}",
          {"configure": a.configure, "write": a.write, "read": a.read})
    return Info(f"Setting permissions for user {a.username} in vhost {a.vhost}")


def hash_password_cmd(c, a):
    return hash_password(a.password)


def list_vhosts(c, a):
    return ["name"], [[v["name"]] for v in c.get("/vhosts")]


def add_vhost(c, a):
    c.put(f"/vhosts/{q(a.name)}", {})
    return Info(f"Adding vhost {a.name}")


def delete_vhost(c, a):
    c.delete(f"/vhosts/{q(a.name)}")
    return Info(f"Deleting vhost {a.name}")


def list_queues(c, a):
    rows = [[x["name"], x.get("messages", 0), x.get("messages_ready", 0),
             x.get("messages_unacknowledged", 0), x.get("consumers", 0)]
            for x in c.get(f"/queues/{q(a.vhost)}")]
    return ["name", "messages", "ready", "unacked", "consumers"], rows


def list_streams(c, a):
    rows = [[x["name"], x.get("messages", 0), x["stream"]["first_offset"], x["stream"]["last_offset"],
             x["stream"]["message_bytes"], x["stream"]["segments"], x.get("consumers", 0)]
            for x in c.get(f"/queues/{q(a.vhost)}") if x.get("type") == "stream"]
    return ["name", "messages", "first_offset", "last_offset", "bytes", "segments", "consumers"], rows


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
    return ["stream", "consumer_tag", "connected", "offset", "last_delivered", "stored_offset"], rows


def create_queue(c, a):
    c.put(f"/queues/{q(a.vhost)}/{q(a.name)}",
          {"durable": a.durable, "auto_delete": a.auto_delete, "arguments": _json_arg(a.args, "--args")})
    return Info(f"Creating queue {a.name} in vhost {a.vhost}")


def purge_queue(c, a):
    c.delete(f"/queues/{q(a.vhost)}/{q(a.name)}/contents")
    return Info(f"Purging queue {a.name} in vhost {a.vhost}")


def delete_queue(c, a):
    c.delete(f"/queues/{q(a.vhost)}/{q(a.name)}")
    return Info(f"Deleting queue {a.name} in vhost {a.vhost}")


def list_exchanges(c, a):
    rows = [[x["name"], x["type"], x.get("durable"), x.get("auto_delete"), x.get("internal")]
            for x in c.get(f"/exchanges/{q(a.vhost)}")]
    return ["name", "type", "durable", "auto_delete", "internal"], rows


def create_exchange(c, a):
    args = _json_arg(a.args, "--args")
    # AvalancheMQ's avalanchemqctl flags for a persistent exchange
    if a.persist_messages is not None:
        args["x-persist-messages"] = a.persist_messages
    if a.persist_ms is not None:
        args["x-persist-ms"] = a.persist_ms
    c.put(f"/exchanges/{q(a.vhost)}/{q(a.name)}",
          {"type": a.type, "durable": a.durable, "auto_delete": a.auto_delete, "internal": a.internal,
           "arguments": args})
    return Info(f"Creating {a.type} exchange {a.name} in vhost {a.vhost}")


def delete_exchange(c, a):
    c.delete(f"/exchanges/{q(a.vhost)}/{q(a.name)}")
    return Info(f"Deleting exchange {a.name} in vhost {a.vhost}")


def _policy_commands(path, what):
    def list_(c, a):
        rows = [[p["vhost"], p["name"], p["pattern"], p.get("apply-to", "all"),
                 json.dumps(p.get("definition", {})), p.get("priority", 0)]
                for p in c.get(f"/{path}/{q(a.vhost)}")]
        return ["vhost", "name", "pattern", "apply-to", "definition", "priority"], rows

    def set_(c, a):
        c.put(f"/{path}/{q(a.vhost)}/{q(a.name)}",
              {"pattern": a.pattern, "definition": _json_arg(a.definition, "definition"),
               "priority": a.priority, "apply-to": a.apply_to})
        return Info(f"Setting {what} {a.name} in vhost {a.vhost}")

    def clear(c, a):
        c.delete(f"/{path}/{q(a.vhost)}/{q(a.name)}")
        return Info(f"Clearing {what} {a.name} in vhost {a.vhost}")
    return list_, set_, clear


list_policies, set_policy, clear_policy = _policy_commands("policies", "policy")
list_operator_policies, set_operator_policy, clear_operator_policy = _policy_commands(
    "operator-policies", "operator policy")


def list_connections(c, a):
    rows = [[x["name"], x.get("user"), x.get("vhost"), x.get("state", "running"), x.get("channels", 0)]
            for x in c.get("/connections")]
    return ["name", "user", "vhost", "state", "channels"], rows


def close_connection(c, a):
    c.delete(f"/connections/{q(a.name)}", headers={"X-Reason": a.reason})
    return Info(f"Closing connection {a.name}")


def export_definitions(c, a):
    return c.get("/definitions")


def import_definitions(c, a):
    try:
        with (sys.stdin if a.file == "-" else open(a.file)) as f:
            body = json.load(f)
    except (OSError, ValueError) as exc:
        raise CtlError(f"cannot read definitions from {a.file}: {exc}", 1)
    c.post("/definitions", body)
    return Info(f"Imported definitions from {a.file}")


def status(c, a):
    o = c.get("/overview")
    totals = o.get("object_totals", {})
    msgs = o.get("queue_totals", {})
    return ["key", "value"], [
        ["version", o.get("lavinmq_version") or o.get("rabbitmq_version") or o.get("product_version")],
        ["node", o.get("node")],
        ["uptime", format_uptime(o.get("uptime"))],
        ["connections", totals.get("connections")],
        ["channels", totals.get("channels")],
        ["consumers", totals.get("consumers")],
        ["queues", totals.get("queues")],
        ["exchanges", totals.get("exchanges")],
        ["messages", msgs.get("messages", 0)],
        ["messages_ready", msgs.get("messages_ready", 0)],
        ["messages_unacknowledged", msgs.get("messages_unacknowledged", 0)],
    ]


def cluster_status(c, a):
    """The nodes as the leader sees them (a follower passes the request on)."""
    rows = []
    for n in c.get("/nodes"):
        if "role" not in n:
            rows.append([n.get("name"), "single node", None, None, None, None])
            continue
        rows.append([n.get("name"), n.get("role"), n.get("uri"), n.get("in_isr"),
                     0 if n.get("role") == "leader" else n.get("lag_in_bytes"), n.get("state", "leading")])
    return ["node", "role", "uri", "in_isr", "lag_in_bytes", "state"], rows


def format_uptime(ms):
    """The API's uptime (milliseconds) with its units: 1d 2h 3m 4s."""
    if not isinstance(ms, int):
        return ms
    s = ms // 1000
    parts = [(s // 86400, "d"), (s // 3600 % 24, "h"), (s // 60 % 60, "m")]
    text = " ".join(f"{n}{unit}" for n, unit in parts if n)
    return f"{text} {s % 60}s".strip()


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


# -- command line ---------------------------------------------------------------

def build_parser():
    p = argparse.ArgumentParser(prog="lavinmqctl", description="Manage a running lavinmq broker.")
    p.add_argument("-U", "--uri", help=f"HTTP API, e.g. {DEFAULT_URI} (default: the control socket, "
                                       f"else {DEFAULT_URI})")
    p.add_argument("-u", "--user", dest="api_user", help="user (default guest, or the one in --uri)")
    p.add_argument("-p", "--password", dest="api_password", help="password")
    p.add_argument("--socket", default=os.environ.get("LAVINMQCTL_SOCKET"),
                   help=f"control UNIX socket (default $LAVINMQCTL_SOCKET, else the first of "
                        f"{', '.join(DEFAULT_SOCKETS)} that exists)")
    p.add_argument("-D", "--data-dir", help="the broker's data directory: use its control socket "
                                            "(DATA_DIR/lavinmqctl.sock)")
    p.add_argument("-f", "--format", choices=("text", "json"), default="text")
    p.add_argument("-q", "--quiet", action="store_true", help="no informational messages")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def cmd(name, fn, help_, *args, vhost=False):
        s = sub.add_parser(name, help=help_)
        for a in args:
            s.add_argument(*a[0], **a[1])
        if vhost:
            s.add_argument("-n", "--vhost", default="/", help="vhost (default /)")
        s.set_defaults(func=fn)
        return s

    A = lambda *names, **kw: (names, kw)      # noqa: E731
    flag = lambda name, h: A(name, action="store_true", help=h)    # noqa: E731
    cmd("list_users", list_users, "list users")
    cmd("add_user", add_user, "create a user", A("username"), A("password"),
        A("--tags", nargs="*", default=[], help="administrator, monitoring, management, policymaker"))
    cmd("delete_user", delete_user, "delete a user", A("username"))
    cmd("change_password", change_password, "set a user's password", A("username"), A("password"))
    cmd("set_user_tags", set_user_tags, "set a user's tags", A("username"), A("tags", nargs="*"))
    cmd("set_permissions", set_permissions, "set a user's permissions in a vhost", A("username"),
        A("configure"), A("write"), A("read"), vhost=True)
    cmd("hash_password", hash_password_cmd, "print a password hash for users.json / definitions",
        A("password"))
    cmd("list_vhosts", list_vhosts, "list vhosts")
    cmd("add_vhost", add_vhost, "create a vhost", A("name"))
    cmd("delete_vhost", delete_vhost, "delete a vhost and everything in it", A("name"))
    cmd("list_queues", list_queues, "list queues", vhost=True)
    cmd("create_queue", create_queue, "declare a queue", A("name"), flag("--durable", "survive restarts"),
        flag("--auto-delete", "delete when the last consumer goes"), A("--args", help="JSON arguments"),
        vhost=True)
    cmd("list_streams", list_streams, "list stream queues with their first and last offset and size",
        vhost=True)
    cmd("list_stream_consumers", list_stream_consumers, "stream consumers' offsets (connected and stored)",
        vhost=True)
    cmd("purge_queue", purge_queue, "remove every ready message of a queue", A("name"), vhost=True)
    cmd("delete_queue", delete_queue, "delete a queue", A("name"), vhost=True)
    cmd("list_exchanges", list_exchanges, "list exchanges", vhost=True)
    cmd("create_exchange", create_exchange, "declare an exchange", A("type"), A("name"),
        flag("--durable", "survive restarts"), flag("--auto-delete", "delete with its last binding"),
        flag("--internal", "only exchange-to-exchange publishes"), A("--args", help="JSON arguments"),
        A("--persist-messages", type=int, help="keep this many messages (x-persist-messages)"),
        A("--persist-ms", type=int, help="keep messages this many ms (x-persist-ms)"),
        vhost=True)
    cmd("delete_exchange", delete_exchange, "delete an exchange", A("name"), vhost=True)
    for kind, fns in (("policy", (list_policies, set_policy, clear_policy)),
                      ("operator_policy", (list_operator_policies, set_operator_policy, clear_operator_policy))):
        what = kind.replace("_", " ")
        cmd(f"list_{kind.replace('policy', 'policies')}", fns[0], f"list {what.replace('policy', 'policies')}",
            vhost=True)
        cmd(f"set_{kind}", fns[1], f"create or change an {what}" if kind.startswith("o") else
            f"create or change a {what}", A("name"), A("pattern"),
            A("definition", help="JSON object"), A("--priority", type=int, default=0),
            A("--apply-to", default="queues" if kind.startswith("o") else "all",
              choices=("all", "queues", "exchanges")), vhost=True)
        cmd(f"clear_{kind}", fns[2], f"delete an {what}" if kind.startswith("o") else f"delete a {what}",
            A("name"), vhost=True)
    cmd("list_connections", list_connections, "list client connections")
    cmd("close_connection", close_connection, "close a client connection", A("name"),
        A("reason", nargs="?", default="Closed via lavinmqctl"))
    cmd("export_definitions", export_definitions, "print users, vhosts, queues ... as JSON")
    cmd("import_definitions", import_definitions, "load definitions from a JSON file (- for stdin)",
        A("file"))
    cmd("status", status, "broker version, uptime and totals")
    cmd("cluster_status", cluster_status, "the cluster's nodes: role, in-sync replicas, replication lag")
    return p


def render(result, fmt, quiet, out):
    if result is None:
        return
    if isinstance(result, str):
        if fmt == "json":
            out.write(json.dumps({"result": result}) + "\n")
        elif not (quiet and isinstance(result, Info)):
            out.write(escape_controls(result) + "\n")
        return
    if isinstance(result, tuple):
        columns, rows = result
        if fmt == "json":
            out.write(json.dumps([dict(zip(columns, r)) for r in rows]) + "\n")
        else:
            if not quiet:
                out.write("\t".join(columns) + "\n")
            for r in rows:
                # a tab or newline in a name would shift columns; escape sequences would reach the terminal
                out.write("\t".join("" if v is None else escape_controls(str(v)) for v in r) + "\n")
        return
    out.write(json.dumps(result, indent=None if fmt == "json" else 2) + "\n")


def trusted_uids():
    uids = {0, os.getuid()}
    try:
        import pwd
        uids.add(pwd.getpwnam(BROKER_USER).pw_uid)
    except (KeyError, ImportError):
        pass
    return uids


def trusted_socket(path):
    """None if credentials may go to the socket at path, else why not: it
    must be a socket owned by root, the broker's user or us (anyone can put
    a socket in /tmp and collect the passwords sent to it)."""
    import stat
    try:
        st = os.lstat(path)
    except OSError as exc:
        return exc.strerror
    if not stat.S_ISSOCK(st.st_mode):
        return "not a socket"
    if st.st_uid not in trusted_uids():
        return f"owned by uid {st.st_uid}, not by root, {BROKER_USER} or you"
    return None


def main(argv=None, out=None):
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    unix_path = None
    if not args.uri and args.func is not hash_password_cmd:
        if args.data_dir and not args.socket:
            args.socket = os.path.join(args.data_dir, "lavinmqctl.sock")
        if args.socket:
            unix_path = args.socket
            why = trusted_socket(unix_path) if os.path.exists(unix_path) else None
            if why:
                print(f"lavinmqctl: refusing to send credentials to {unix_path}: {why}", file=sys.stderr)
                return EX_NOPERM
        else:
            for candidate in DEFAULT_SOCKETS:
                if not os.path.exists(candidate):
                    continue
                why = trusted_socket(candidate)
                if why is None:
                    unix_path = candidate
                    break
                print(f"lavinmqctl: not using {candidate}: {why}", file=sys.stderr)
    try:
        client = Client(args.uri, args.api_user, args.api_password, unix_path)
        render(args.func(client, args), args.format, args.quiet, out)
    except CtlError as exc:
        print(f"lavinmqctl: {escape_controls(str(exc))}", file=sys.stderr)
        return exc.code
    return 0


if __name__ == "__main__":
    sys.exit(main())

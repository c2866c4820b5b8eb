"""lavinmqctl: manage a running broker through its HTTP API, over TCP
(--uri, or --hostname/--port/--scheme) or the control UNIX socket the
broker listens on (LavinMQ's `control_unix_path`, where the same API is
served). Its commands, global options (-p/--vhost anywhere on the line) and
output are LavinMQ's; the commands are in lavinmq/ctl_commands.py. The API
is RabbitMQ's, so this also works against RabbitMQ's management plugin.

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

import lavinmq
from lavinmq import ctl_commands as cmds
from lavinmq.ctl_commands import CtlError, Fields, Info, Table
from lavinmq.safetext import escape_controls

# the broker listens on DATA_DIR/lavinmqctl.sock: the packages' data dir
# first (the service's /tmp is private), then LavinMQ's own default, then
# ./data (where `./dev run` keeps its data, for a fresh clone). Each is used
# only if root, the broker's user or we own it (see trusted_socket).
DEFAULT_SOCKETS = ("/var/lib/lavinmq/lavinmqctl.sock", "/tmp/lavinmqctl.sock", "data/lavinmqctl.sock")
BROKER_USER = "lavinmq"
DEFAULT_URI = "http://127.0.0.1:15672"
EX_USAGE, EX_UNAVAILABLE, EX_NOPERM = 2, 69, 77


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


# -- command line ---------------------------------------------------------------

def _global_options(p, defaults, uri=True):
    """LavinMQ's global options. They are given to the main parser (with
    their defaults) and to every command (without, so that one given after
    the command wins, and one not given there changes nothing)."""
    d = (lambda v: v) if defaults else (lambda v: argparse.SUPPRESS)      # noqa: E731
    p.add_argument("-p", "--vhost", metavar="VHOST", default=d(None), help="the vhost (default /)")
    if uri:     # add_federation's --uri is the upstream's (the API's goes before the command)
        p.add_argument("-U", "--uri", default=d(None), help=f"HTTP API, e.g. {DEFAULT_URI}")
    p.add_argument("-H", "--host", default=d(None), help="(deprecated) same as --uri")
    p.add_argument("--hostname", default=d(None), help="the broker's host name (with --port and --scheme)")
    p.add_argument("-P", "--port", default=d(None), help="its HTTP port (default 15672)")
    p.add_argument("--scheme", default=d(None), choices=("http", "https"), help="http (default) or https")
    p.add_argument("-u", "--user", dest="api_user", metavar="USER", default=d(None),
                   help="user (default guest, or the one in the URI)")
    p.add_argument("--password", dest="api_password", metavar="PASSWORD", default=d(None), help="password")
    p.add_argument("--control-unix-path", "--socket", dest="socket", metavar="PATH", default=d(None),
                   help=f"control UNIX socket (default $LAVINMQCTL_CONTROL_UNIX_PATH or $LAVINMQCTL_SOCKET, "
                        f"else the first of {', '.join(DEFAULT_SOCKETS)} that exists)")
    p.add_argument("-D", "--data-dir", default=d(None), help="the broker's data directory: use its control "
                                                             "socket (DATA_DIR/lavinmqctl.sock)")
    p.add_argument("-n", "--node", default=d(None), help="accepted, as LavinMQ does; there is one node")
    p.add_argument("-f", "--format", choices=("text", "json"), default=d("text"))
    p.add_argument("-q", "--quiet", action="store_true", default=d(False),
                   help="no informational lines (\"Listing ...\")")
    p.add_argument("-s", "--silent", action="store_true", default=d(False),
                   help="no informational lines and no table header")


def build_parser():
    p = argparse.ArgumentParser(prog="lavinmqctl", description="Manage a running lavinmq broker.")
    _global_options(p, True)
    p.add_argument("-v", "--version", action="version", version=lavinmq.__version__)
    p.add_argument("--build-info", action=BuildInfo, help="show build information and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def cmd(name, fn, help_, *args):
        s = sub.add_parser(name, help=help_)
        _global_options(s, False, uri=name != "add_federation")
        for a in args:
            s.add_argument(*a[0], **a[1])
        s.set_defaults(func=fn)
        return s

    A = lambda *names, **kw: (names, kw)      # noqa: E731
    flag = lambda name, h: A(name, action="store_true", help=h)    # noqa: E731
    num = lambda name, h: A(name, type=int, help=h)    # noqa: E731
    c = cmds
    cmd("list_users", c.list_users, "list users and their tags")
    cmd("add_user", c.add_user, "create a user", A("username"), A("password"),
        A("--tags", nargs="*", default=[], help="administrator, monitoring, management, policymaker"))
    cmd("delete_user", c.delete_user, "delete a user", A("username"))
    cmd("change_password", c.change_password, "set a user's password", A("username"), A("password"))
    cmd("set_user_tags", c.set_user_tags, "set a user's tags", A("username"), A("tags", nargs="*"))
    cmd("set_permissions", c.set_permissions, "set a user's permissions in a vhost (-p)", A("username"),
        A("configure"), A("write"), A("read"))
    cmd("hash_password", c.hash_password_cmd, "print a password hash for users.json / definitions",
        A("password"))
    cmd("list_vhosts", c.list_vhosts, "list vhosts")
    cmd("add_vhost", c.add_vhost, "create a vhost", A("name"))
    cmd("delete_vhost", c.delete_vhost, "delete a vhost and everything in it", A("name"))
    cmd("set_vhost_limits", c.set_vhost_limits, "set a vhost's (-p) limits: max-connections, max-queues",
        A("json", help='e.g. {"max-connections": 100, "max-queues": 1000}'))
    cmd("list_queues", c.list_queues, "list queues")
    cmd("create_queue", c.create_queue, "declare a queue", A("name"), flag("--durable", "survive restarts"),
        flag("--auto-delete", "delete when the last consumer goes"),
        num("--expires", "delete after this many ms unused (x-expires)"),
        num("--max-length", "at most this many messages (x-max-length)"),
        num("--message-ttl", "messages expire after this many ms (x-message-ttl)"),
        num("--delivery-limit", "dead-letter after this many deliveries (x-delivery-limit)"),
        flag("--reject-on-overflow", "refuse publishes past max-length instead of dropping the oldest"),
        A("--dead-letter-exchange", help="where dead letters go"),
        A("--dead-letter-routing-key", help="their routing key"),
        flag("--stream-queue", "a stream (x-queue-type stream)"),
        A("--args", help="JSON arguments"))
    cmd("list_streams", c.list_streams, "list stream queues with their first and last offset and size")
    cmd("list_stream_consumers", c.list_stream_consumers, "stream consumers' offsets (connected and stored)")
    cmd("purge_queue", c.purge_queue, "remove every ready message of a queue", A("name"))
    cmd("pause_queue", c.pause_queue, "pause a queue: it delivers nothing until resumed", A("name"))
    cmd("resume_queue", c.resume_queue, "resume a paused queue", A("name"))
    cmd("restart_queue", c.restart_queue, "open a closed queue again from its files", A("name"))
    cmd("delete_queue", c.delete_queue, "delete a queue", A("name"))
    cmd("list_exchanges", c.list_exchanges, "list exchanges")
    cmd("create_exchange", c.create_exchange, "declare an exchange", A("type"), A("name"),
        flag("--durable", "survive restarts"), flag("--auto-delete", "delete with its last binding"),
        flag("--internal", "only exchange-to-exchange publishes"), flag("--delayed", "delay by x-delay"),
        A("--alternate-exchange", help="where unroutable messages go"),
        num("--persist-messages", "a persistent exchange: keep this many messages (x-persist-messages)"),
        num("--persist-ms", "a persistent exchange: keep messages this many ms (x-persist-ms)"),
        A("--args", help="JSON arguments"))
    cmd("delete_exchange", c.delete_exchange, "delete an exchange", A("name"))
    for kind, fns in (("policy", (c.list_policies, c.set_policy, c.clear_policy)),
                      ("operator_policy", (c.list_operator_policies, c.set_operator_policy,
                                           c.clear_operator_policy))):
        what = kind.replace("_", " ")
        an = "an" if kind.startswith("o") else "a"
        cmd(f"list_{kind.replace('policy', 'policies')}", fns[0], f"list {what.replace('policy', 'policies')}")
        cmd(f"set_{kind}", fns[1], f"create or change {an} {what}", A("name"), A("pattern"),
            A("definition", help="JSON object"), A("--priority", type=int, default=0),
            A("--apply-to", default="queues" if kind.startswith("o") else "all",
              choices=("all", "queues", "exchanges")))
        cmd(f"clear_{kind}", fns[2], f"delete {an} {what}", A("name"))
    cmd("list_connections", c.list_connections, "list client connections", A("columns", nargs="*",
        help="fields to show (default: user peer_host peer_port state; name for close_connection)"))
    cmd("close_connection", c.close_connection, "close a client connection", A("name"),
        A("reason", nargs="?", default="Closed via lavinmqctl"))
    cmd("close_all_connections", c.close_all_connections, "close every connection (of -p VHOST if given)",
        A("reason", nargs="?", default="Closed via lavinmqctl"))
    cmd("list_shovels", c.list_shovels, "list shovels and their state")
    cmd("add_shovel", c.add_shovel, "create a shovel (LavinMQ's defaults: prefetch 1000, on-confirm)", A("name"),
        A("--src-uri", required=True), A("--dest-uri", required=True), A("--src-queue"), A("--dest-queue"),
        A("--src-exchange"), A("--dest-exchange"), A("--src-exchange-key"), A("--dest-exchange-key"),
        num("--src-prefetch-count", "messages in flight (default 1000)"),
        A("--src-delete-after", help="never (default), queue-length or a count"),
        A("--ack-mode", choices=("on-confirm", "on-publish", "no-ack")),
        num("--reconnect-delay", "seconds (default 5)"))
    cmd("delete_shovel", c.delete_shovel, "delete a shovel", A("name"))
    cmd("list_federations", c.list_federations, "list federation upstreams")
    cmd("add_federation", c.add_federation, "create a federation upstream (LavinMQ's defaults)", A("name"),
        A("--uri", dest="upstream_uri", required=True, help="the upstream broker (amqp:// or amqps://)"),
        num("--expires", "ms unused before the upstream queue goes"),
        num("--message-ttl", "ms"), num("--max-hops", "default 1"), num("--prefetch-count", "default 1000"),
        num("--reconnect-delay", "seconds (default 1)"), A("--ack-mode", choices=("on-confirm", "on-publish",
                                                                                  "no-ack")),
        A("--consumer-tag"), A("--exchange", help="the upstream exchange's name"),
        A("--queue", help="the upstream queue's name"))
    cmd("delete_federation", c.delete_federation, "delete a federation upstream", A("name"))
    cmd("export_definitions", c.export_definitions, "print users, vhosts, queues ... as JSON (-p: one vhost)")
    cmd("import_definitions", c.import_definitions, "load definitions from a JSON file (- for stdin)",
        A("file"))
    cmd("definitions", c.definitions, "definitions JSON read from a data directory (no broker needed)",
        A("data_dir_path", metavar="DATA_DIR"))
    cmd("status", c.status, "broker version, uptime and totals")
    cmd("cluster_status", c.cluster_status, "the cluster's nodes: role, in-sync replicas, replication lag")
    cmd("gc_collect", c.gc_collect, "collect garbage in the broker and print its collector's statistics")
    cmd("stop_app", c.app_noop, "accepted, as LavinMQ does: does nothing")
    cmd("start_app", c.app_noop, "accepted, as LavinMQ does: does nothing")
    return p


class BuildInfo(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from lavinmq.config import build_info
        print(build_info())
        parser.exit()


def _cell(v):
    """A value as LavinMQ prints it in a table: booleans in lower case,
    nothing for null, JSON for objects."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def render(result, fmt, quiet, out, silent=False):
    if result is None:
        return
    if isinstance(result, list) and all(isinstance(r, (Info, Table)) for r in result):
        for r in result:
            render(r, fmt, quiet, out, silent)
        return
    if isinstance(result, Info):
        if fmt != "json" and not quiet and not silent:
            out.write(escape_controls(result) + "\n")
        return
    if isinstance(result, str):
        out.write((json.dumps(result) if fmt == "json" else escape_controls(result)) + "\n")
        return
    if isinstance(result, Table):
        if fmt == "json":
            out.write(json.dumps([dict(zip(result.columns, r)) for r in result.rows]) + "\n")
            return
        if result.info and not quiet and not silent:
            out.write(result.info + "\n")
        if not silent:
            out.write("\t".join(result.columns) + "\n")
        for r in result.rows:
            # a tab or newline in a name would shift columns; escape sequences would reach the terminal
            out.write("\t".join(escape_controls(_cell(v)) for v in r) + "\n")
        return
    if isinstance(result, Fields):
        if fmt == "json":
            out.write(json.dumps(result) + "\n")
        else:
            for k, v in result.items():
                out.write(f"{k}: {escape_controls(_cell(v))}\n")
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


def _uri(args, env):
    """The API's address from --uri / -H / $LAVINMQCTL_HOST, or built from
    --hostname, --port and --scheme (LavinMQ's rules: not both kinds)."""
    uri = args.uri or args.host or (env.get("LAVINMQCTL_HOST") if not args.hostname else None)
    parts = [n for n, v in (("hostname", args.hostname), ("port", args.port), ("scheme", args.scheme)) if v]
    if uri and parts and (args.uri or args.host):
        raise CtlError(f"invalid args when using {'uri' if args.uri else 'host'}: {', '.join(parts)}", 2)
    if uri or not parts:
        return uri
    if not args.hostname:
        raise CtlError("--port and --scheme need --hostname", 2)
    try:
        port = int(args.port or 15672)
    except ValueError:
        raise CtlError(f"--port: {args.port!r} is not a number", 2) from None
    return f"{args.scheme or 'http'}://{args.hostname}:{port}"


def main(argv=None, out=None, env=None):
    out = out or sys.stdout
    env = os.environ if env is None else env
    args = build_parser().parse_args(argv)
    args.vhost_given = args.vhost is not None
    args.vhost = args.vhost if args.vhost is not None else "/"
    if args.socket is None:
        args.socket = env.get("LAVINMQCTL_CONTROL_UNIX_PATH") or env.get("LAVINMQCTL_SOCKET")
    try:
        args.uri = _uri(args, env)
    except CtlError as exc:
        print(f"lavinmqctl: {exc}", file=sys.stderr)
        return exc.code
    unix_path = None
    offline = args.func in (cmds.hash_password_cmd, cmds.definitions, cmds.app_noop)
    if not args.uri and not offline:
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
        render(args.func(client, args), args.format, args.quiet, out, args.silent)
    except CtlError as exc:
        print(f"lavinmqctl: {escape_controls(str(exc))}", file=sys.stderr)
        return exc.code
    return 0


if __name__ == "__main__":
    sys.exit(main())

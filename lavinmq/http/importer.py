"""POST /api/definitions: a RabbitMQ (or LavinMQ) export applied to this
broker, all or nothing.

Everything that can be checked is checked before anything changes; what
still fails while applying (a queue argument the vhost refuses, say) undoes
what the import had done, so a bad file changes nothing. users.json is
written once per import, not once per user (2,000 users used to hold the
event loop for 12 s with an fsync each)."""
import asyncio
import logging
import time

from lavinmq import long_work, policy
from lavinmq.auth.password import algorithm_name, check_hash
from lavinmq.auth.users import Permissions
from lavinmq.errors import AMQPError
from lavinmq.exchange import exchange_class
from lavinmq.http.helpers import HTTPError
from lavinmq.vhost import delayed_form

KNOWN_ALGORITHMS = ("rabbit_password_hashing_sha256", "rabbit_password_hashing_sha512",
                    "rabbit_password_hashing_md5", "sha256", "sha512", "md5", "SHA256", "SHA512", "MD5")


log = logging.getLogger("lavinmq.definitions")

SLICE = 0.002       # seconds of compiling policy patterns between turns of the loop

def _items(body, key):
    items = body.get(key, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise HTTPError(400, f"'{key}' must be a list of objects")
    return items


def _str(item, key, what, default=None):
    value = item.get(key, default)
    if not isinstance(value, str) or (key == "name" and not value):
        raise HTTPError(400, f"bad definitions: {what} needs a string '{key}', not {value!r}")
    return value


def _tags(u):
    tags = u.get("tags", "")
    if isinstance(tags, list) and all(isinstance(t, str) for t in tags):
        return ",".join(tags)
    if not isinstance(tags, str):
        raise HTTPError(400, f"bad definitions: user '{u['name']}': tags must be a string or a list")
    return tags


DELAY_STORE_PREFIXES = ("amq.delayed.", "amq.delayed-")    # ours; LavinMQ 2.9's (and its older one)


def _internal_queue(name):
    """An x-delayed-message exchange's own store: exports from LavinMQ (and
    from this broker before it left them out) list it; it comes back with
    its exchange, so it is skipped, not declared."""
    return isinstance(name, str) and name.startswith(DELAY_STORE_PREFIXES)


def _own_forms(body, only):
    """The file in this broker's shapes: RabbitMQ and LavinMQ write vhost
    limits and operator policies as runtime parameters (components
    vhost-limits and operator_policy), LavinMQ a delayed exchange as type
    x-delayed-exchange and its store amq.delayed-<name> among the queues."""
    body = dict(body)
    params, limits, operator = [], [], list(_items(body, "operator_policies"))
    for p in _items(body, "parameters"):
        component = p.get("component")
        if component == "vhost-limits":
            limits.append(p)
        elif component == "operator_policy" and isinstance(p.get("value"), dict):
            operator.append({**p["value"], "name": p.get("name"), **({"vhost": p["vhost"]} if "vhost" in p else {})})
        else:
            params.append(p)
    body["parameters"], body["operator_policies"], body["_vhost_limits"] = params, operator, limits
    body["exchanges"] = [dict(x, type="x-delayed-message") if x.get("type") == "x-delayed-exchange" else x
                         for x in _items(body, "exchanges")]
    body["queues"] = [q for q in _items(body, "queues") if not _internal_queue(q.get("name"))]
    body["bindings"] = [b for b in _items(body, "bindings")
                        if not (b.get("destination_type", "queue") == "queue" and _internal_queue(b.get("destination")))]
    if body.get("topic_permissions"):
        log.warning("definitions: %d topic permissions skipped (this broker has none)",
                    len(body["topic_permissions"]) if isinstance(body["topic_permissions"], list) else 1)
    return body


def _check_limits(value, where):
    if not isinstance(value, dict):
        raise HTTPError(400, f"bad definitions: {where}: limits must be an object")
    for key, n in value.items():
        if key not in ("max-connections", "max-queues"):
            raise HTTPError(400, f"bad definitions: {where}: unknown vhost limit {key!r}")
        if not isinstance(n, int) or isinstance(n, bool):
            raise HTTPError(400, f"bad definitions: {where}: vhost limit {key} must be an integer")


def _check(server, body, only, compiled=None):
    """Everything that can be known before applying; HTTPError(400) naming it."""
    users, vhosts, perms = (_items(body, k) for k in ("users", "vhosts", "permissions"))
    policies, exchanges, queues, bindings = (_items(body, k) for k in ("policies", "exchanges", "queues",
                                                                        "bindings"))
    new_vhosts = set()
    for v in vhosts:
        new_vhosts.add(_str(v, "name", "a vhost"))
        _check_limits(v.get("limits") or {}, f"vhost '{v['name']}'")
    known_vhosts = set(server.vhosts) | (new_vhosts if only is None else set())
    new_users = set()
    for u in users:
        name = _str(u, "name", "a user")
        new_users.add(name)
        _tags(u)
        try:
            if u.get("password_hash"):
                check_hash(u["password_hash"], algorithm_name(u.get("hashing_algorithm")
                                                              or "rabbit_password_hashing_sha256"))
            elif "password" in u and not isinstance(u["password"], str):
                raise ValueError("password must be a string")
        except ValueError as exc:
            raise HTTPError(400, f"bad definitions: user '{name}': {exc}")
    for p in perms:
        user, vhost = _str(p, "user", "a permission"), _str(p, "vhost", "a permission")
        if user not in server.users and user not in new_users:
            raise HTTPError(400, f"bad definitions: permission for unknown user '{user}'")
        if vhost not in known_vhosts:
            raise HTTPError(400, f"bad definitions: permission on unknown vhost '{vhost}'")
        try:
            Permissions(p.get("configure", ""), p.get("write", ""), p.get("read", ""))
        except ValueError as exc:
            raise HTTPError(400, f"bad definitions: permission of '{user}' on '{vhost}': {exc}")

    def vhost_name(item, what):
        name = only if only is not None else item.get("vhost", "/")
        if not isinstance(name, str) or name not in known_vhosts:
            raise HTTPError(400, f"bad definitions: {what}: vhost '{name}' does not exist")
        return name

    checked = []
    budget = _PolicyBudget(server)
    for p, operator in [(p, False) for p in policies] + [(p, True) for p in _items(body, "operator_policies")]:
        _str(p, "name", "a policy")
        vhost = vhost_name(p, f"policy '{p['name']}'")
        try:
            clean, regex = policy.checked_policy(p, operator, compiled)
        except ValueError as exc:
            raise HTTPError(400, f"bad definitions: policy '{p['name']}': {exc}")
        budget.add(vhost, p["name"], regex, operator)
        checked.append((p, clean, regex, operator))
    for x in exchanges:
        _str(x, "name", "an exchange")
        vhost_name(x, f"exchange '{x['name']}'")
        try:
            type_name = _str(x, "type", f"exchange '{x['name']}'", "direct")
            if type_name == "x-delayed-message":
                type_name, _ = delayed_form(x.get("arguments") if isinstance(x.get("arguments"), dict) else {})
            exchange_class(type_name)
        except AMQPError as exc:
            raise HTTPError(400, f"bad definitions: exchange '{x['name']}': {exc.reply_text}")
        if not isinstance(x.get("arguments") or {}, dict):
            raise HTTPError(400, f"bad definitions: exchange '{x['name']}': arguments must be an object")
    for q in queues:
        _str(q, "name", "a queue")
        vhost_name(q, f"queue '{q['name']}'")
        if not isinstance(q.get("arguments") or {}, dict):
            raise HTTPError(400, f"bad definitions: queue '{q['name']}': arguments must be an object")
    for b in bindings:
        for key in ("source", "destination"):
            _str(b, key, "a binding")
        _str(b, "routing_key", "a binding", "")
        vhost_name(b, f"binding {b['source']} -> {b['destination']}")
        if b.get("destination_type", "queue") not in ("queue", "exchange"):
            raise HTTPError(400, "bad definitions: destination_type must be queue or exchange")
        if not isinstance(b.get("arguments") or {}, dict):
            raise HTTPError(400, "bad definitions: binding arguments must be an object")
    params = _check_parameters(body, vhost_name)
    limits = [(vhost_name(p, "vhost-limits"), p.get("value")) for p in body["_vhost_limits"]]
    for vhost, value in limits:
        _check_limits(value, f"vhost-limits of '{vhost}'")
    limits += [(v["name"], v["limits"]) for v in vhosts if v.get("limits") and only is None]
    return users, vhosts, perms, checked, exchanges, queues, bindings, params, limits


def _check_parameters(body, vhost_name):
    """Runtime parameters (shovels, federation upstreams): each value as
    its component checks it; applied after the exchanges and queues."""
    from lavinmq.parameters import ParameterError, check
    out = []
    for p in _items(body, "parameters"):
        component, name = _str(p, "component", "a parameter"), _str(p, "name", "a parameter")
        vhost = vhost_name(p, f"parameter {component}/{name}")
        try:
            check(component, name, p.get("value"))
        except (ParameterError, PermissionError) as exc:
            raise HTTPError(400, f"bad definitions: parameter {component}/{name}: {exc}")
        out.append((vhost, component, name, p["value"]))
    return out


class _PolicyBudget:
    """Policies past a vhost's max_policy_instructions are refused before
    anything is applied, and as soon as the import passes it (20,000
    policies would otherwise all be compiled first)."""

    def __init__(self, server):
        self.server = server
        self.totals = {}        # (vhost, operator) -> instructions after the import

    def add(self, vhost, name, regex, operator):
        store = self.server.vhosts[vhost].policies if vhost in self.server.vhosts else None
        key = (vhost, operator)
        if key not in self.totals:
            self.totals[key] = store.instructions(operator) if store is not None else 0
        self.totals[key] += regex.programsize - (store.instructions_of(operator, name) if store is not None else 0)
        limit = store.max_instructions if store is not None else self.server.config.max_policy_instructions
        if self.totals[key] > limit:
            raise HTTPError(400, f"bad definitions: the {'operator ' if operator else ''}policies of vhost "
                                 f"'{vhost}' would compile to more than {limit} RE2 instructions "
                                 f"(max_policy_instructions)")


async def import_definitions_async(server, body, only=None):
    """import_definitions for the API: the policies' patterns (the costly
    part of checking 20,000 of them, ~1 s) are compiled first, a slice of
    the event loop at a time."""
    compiled = {}
    deadline = time.perf_counter() + SLICE
    items = [] if not isinstance(body, dict) else _items(body, "policies") + _items(body, "operator_policies")
    with long_work.running():       # the fsync threads get the GIL between our slices
        for p in items:
            pattern = p.get("pattern") if isinstance(p, dict) else None
            if isinstance(pattern, str) and pattern not in compiled:
                try:
                    compiled[pattern] = policy.compile_pattern(pattern)
                except ValueError:
                    pass            # _check names it
                if time.perf_counter() > deadline:
                    await asyncio.sleep(0)
                    deadline = time.perf_counter() + SLICE
    import_definitions(server, body, only, compiled)


def import_definitions(server, body, only=None, compiled=None, skip_existing=False):
    """skip_existing (load_definitions at start, as LavinMQ's): users,
    permissions, policies, parameters, limits, queues and exchanges that
    already exist are left as they are, so a restart keeps what was changed
    since and never stops on an object declared otherwise."""
    if not isinstance(body, dict):
        raise HTTPError(400, "Malformed JSON: expected an object")
    body = _own_forms(body, only)
    checked = _check(server, body, only, compiled)
    users, vhosts, perms, policies, exchanges, queues, bindings, params, limits = checked
    if skip_existing:
        users, perms, policies, exchanges, queues, params, limits = _new_only(
            server, only, users, perms, policies, exchanges, queues, params, limits)
    undo = []
    # policies.json is written once per vhost, not once per policy
    with policy.batch():
        try:
            with server.users.batch():
                _apply(server, only, users, vhosts, perms, policies, exchanges, queues, bindings, undo)
                for vhost, value in limits:
                    v = server.vhosts[vhost]
                    old = dict(v.limits)
                    server.set_vhost_limits(vhost, value)
                    undo.append(lambda vhost=vhost, old=old: server.vhosts[vhost].set_limits(old))
                for vhost, component, name, value in params:
                    vp = server.parameters.of(server.vhosts[vhost])
                    old = vp.store.get(component, name)
                    vp.set(component, name, value)
                    undo.append(lambda vp=vp, c=component, n=name, old=old: vp.restore(c, n, old))
                _global_parameters(server, body, only, undo, skip_existing)
        except (KeyError, ValueError, TypeError, AMQPError) as exc:
            for action in reversed(undo):
                try:
                    action()
                except Exception:       # best effort: the first error is the one to report
                    pass
            text = exc.reply_text if isinstance(exc, AMQPError) else str(exc)
            raise HTTPError(400, f"bad definitions, nothing imported: {text}")


def _new_only(server, only, users, perms, policies, exchanges, queues, params, limits):
    vhost = lambda item: server.vhosts.get(only if only is not None else item.get("vhost", "/"))  # noqa: E731
    known = server.users.users
    users = [u for u in users if u["name"] not in known]
    perms = [p for p in perms if p["user"] not in known or p["vhost"] not in known[p["user"]].permissions]
    policies = [c for c in policies
                if vhost(c[0]) is None or vhost(c[0]).policies.get(c[0]["name"], c[3]) is None]
    exchanges = [x for x in exchanges if vhost(x) is None or x["name"] not in vhost(x).exchanges]
    queues = [q for q in queues if vhost(q) is None or q["name"] not in vhost(q).queues]
    params = [p for p in params if p[0] not in server.vhosts
              or server.parameters.of(server.vhosts[p[0]]).store.get(p[1], p[2]) is None]
    limits = [(v, value) for v, value in limits if v not in server.vhosts or not server.vhosts[v].limits]
    return users, perms, policies, exchanges, queues, params, limits


def _apply(server, only, users, vhosts, perms, policies, exchanges, queues, bindings, undo):
    vhost_for = lambda item: server.vhosts[only if only is not None else item.get("vhost", "/")]  # noqa: E731
    if only is None:
        for v in vhosts:
            name = v["name"]
            if name not in server.vhosts:
                server.add_vhost(name)
                undo.append(lambda name=name: server.delete_vhost(name))
    for u in users:
        algorithm = u.get("hashing_algorithm") or "rabbit_password_hashing_sha256"
        if u.get("password_hash"):
            server.users.add_user(u["name"], password_hash=u["password_hash"], tags=_tags(u),
                                  hashing_algorithm=algorithm)
        elif "password" in u:
            server.users.add_user(u["name"], password=u["password"], tags=_tags(u))
        else:
            server.users.add_user(u["name"], tags=_tags(u))
    for p in perms:
        server.users.set_permissions(p["user"], p["vhost"], p.get("configure", ""), p.get("write", ""),
                                     p.get("read", ""))
    for p, clean, regex, operator in policies:
        v = vhost_for(p)
        old = v.policies.get(p["name"], operator)
        v.policies.set(p["name"], clean, operator, regex)
        undo.append(lambda v=v, name=p["name"], old=old, op=operator:
                    v.policies.set(name, old, op) if old else v.policies.delete(name, op))
    for x in exchanges:
        v = vhost_for(x)
        existed = x["name"] in v.exchanges
        v.declare_exchange(x["name"], x.get("type", "direct"), bool(x.get("durable", True)),
                           bool(x.get("auto_delete", False)), bool(x.get("internal", False)),
                           x.get("arguments") or {})
        if not existed:
            undo.append(lambda v=v, n=x["name"]: v.delete_exchange(n))
    for q in queues:
        v = vhost_for(q)
        existed = q["name"] in v.queues
        # a durable server-named queue (amq.gen-...) is in exports: it comes back under its name
        v.declare_queue(q["name"], bool(q.get("durable", True)), None, bool(q.get("auto_delete", False)),
                        q.get("arguments") or {}, server_named=q["name"].startswith("amq.gen-"))
        if not existed:
            undo.append(lambda v=v, n=q["name"]: v.delete_queue(n))
    for b in bindings:
        v = vhost_for(b)
        rk, args = b.get("routing_key", ""), b.get("arguments") or {}
        kind = b.get("destination_type", "queue")
        if _has_binding(v, b["source"], b["destination"], kind, rk, args):
            continue
        if kind == "queue":
            v.bind_queue(b["destination"], b["source"], rk, args)
            undo.append(lambda v=v, b=b, rk=rk, args=args: v.unbind_queue(b["destination"], b["source"], rk, args))
        else:
            v.bind_exchange(b["destination"], b["source"], rk, args)
            undo.append(lambda v=v, b=b, rk=rk, args=args: v.unbind_exchange(b["destination"], b["source"],
                                                                              rk, args))


def _global_parameters(server, body, only, undo, skip_existing=False):
    """RabbitMQ's and LavinMQ's global_parameters, kept (exports carry
    cluster_name and internal_cluster_id among them)."""
    params = body.get("global_parameters") or []
    if only is not None or not params:
        return
    if not isinstance(params, list) or not all(isinstance(p, dict) and isinstance(p.get("name"), str)
                                               and "value" in p for p in params):
        raise ValueError("global_parameters must be a list of objects with a name and a value")
    store = server.global_parameters
    for p in params:
        old = store.values.get(p["name"], undo)       # undo: a marker for "was not there"
        if skip_existing and old is not undo:
            continue
        store.set(p["name"], p["value"])
        undo.append(lambda n=p["name"], old=old: store.delete(n) if old is undo else store.set(n, old))


def _has_binding(v, source, destination, kind, rk, args):
    ex = v.exchanges.get(source)
    dest = (v.queues if kind == "queue" else v.exchanges).get(destination)
    return ex is not None and dest is not None and any(
        b.destination is dest and b.routing_key == rk and b.arguments == args for b in ex.bindings.values())

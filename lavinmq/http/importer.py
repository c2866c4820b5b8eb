"""POST /api/definitions: a RabbitMQ (or LavinMQ) export applied to this
broker. Everything is checked before anything is applied, so a bad file
changes nothing."""
from lavinmq.errors import AMQPError
from lavinmq.http.app import HTTPError

KNOWN_ALGORITHMS = ("rabbit_password_hashing_sha256", "rabbit_password_hashing_sha512",
                    "rabbit_password_hashing_md5", "sha256", "sha512", "md5", "SHA256", "SHA512", "MD5")


def _items(body, key):
    items = body.get(key, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise HTTPError(400, f"'{key}' must be a list of objects")
    return items


def import_definitions(server, body, only=None):
    from lavinmq.policy import check_policy
    users, vhosts, perms = (_items(body, k) for k in ("users", "vhosts", "permissions"))
    policies, exchanges, queues, bindings = (_items(body, k) for k in ("policies", "exchanges", "queues",
                                                                        "bindings"))
    op_policies = _items(body, "operator_policies")
    for u in users:
        if not isinstance(u.get("name"), str):
            raise HTTPError(400, "a user needs a name")
    for x in exchanges + queues + policies + op_policies:
        if not isinstance(x.get("name"), str):
            raise HTTPError(400, "every exchange, queue and policy needs a name")
    try:
        checked = [check_policy(p) for p in policies]
        op_checked = [check_policy(p, operator=True) for p in op_policies]
    except ValueError as exc:
        raise HTTPError(400, f"bad policy: {exc}")

    def vhost_for(item):
        name = only if only is not None else item.get("vhost", "/")
        v = server.vhosts.get(name)
        if v is None:
            raise HTTPError(400, f"vhost '{name}' does not exist")
        return v

    try:
        for v in vhosts:
            if only is None:
                server.add_vhost(v["name"])
                if v.get("limits"):
                    server.set_vhost_limits(v["name"], v["limits"])
        for u in users:
            tags = u.get("tags", "")
            tags = ",".join(tags) if isinstance(tags, list) else tags
            if u.get("password_hash"):
                server.users.add_user(u["name"], password_hash=u["password_hash"], tags=tags,
                                      hashing_algorithm=u.get("hashing_algorithm") or "rabbit_password_hashing_sha256")
            elif "password" in u:
                server.users.add_user(u["name"], password=u["password"], tags=tags)
            else:
                server.users.add_user(u["name"], tags=tags)
        for p in perms:
            server.users.set_permissions(p["user"], p["vhost"], p.get("configure", ""), p.get("write", ""),
                                         p.get("read", ""))
        for p, clean in zip(policies, checked):
            vhost_for(p).policies.set(p["name"], clean)
        for p, clean in zip(op_policies, op_checked):
            vhost_for(p).policies.set(p["name"], clean, operator=True)
        for x in exchanges:
            vhost_for(x).declare_exchange(x["name"], x.get("type", "direct"), bool(x.get("durable", True)),
                                          bool(x.get("auto_delete", False)), bool(x.get("internal", False)),
                                          x.get("arguments") or {})
        for q in queues:
            vhost_for(q).declare_queue(q["name"], bool(q.get("durable", True)), None,
                                       bool(q.get("auto_delete", False)), q.get("arguments") or {})
        for b in bindings:
            v = vhost_for(b)
            if b.get("destination_type", "queue") == "queue":
                v.bind_queue(b["destination"], b["source"], b.get("routing_key", ""), b.get("arguments") or {})
            else:
                v.bind_exchange(b["destination"], b["source"], b.get("routing_key", ""), b.get("arguments") or {})
    except (KeyError, ValueError) as exc:
        raise HTTPError(400, f"bad definitions: {exc}")
    except AMQPError as exc:
        raise HTTPError(400, exc.reply_text)

"""users.json: users, their password hashes, tags and per-vhost permissions."""
import ipaddress
import logging
import os
import re

import orjson

from lavinmq.auth.password import hash_password, verify

log = logging.getLogger("lavinmq.users")

ALGORITHM_NAMES = {"SHA256": "sha256", "SHA512": "sha512", "MD5": "md5"}


def is_loopback_address(host):
    try:
        addr = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


class Permissions:
    __slots__ = ("configure", "write", "read", "_re")

    def __init__(self, configure=".*", write=".*", read=".*"):
        self.configure, self.write, self.read = configure, write, read
        # RabbitMQ semantics: the pattern is searched in the name; "" matches nothing
        self._re = {k: (re.compile(v) if v else None)
                    for k, v in (("configure", configure), ("write", write), ("read", read))}

    def allows(self, kind, name):
        r = self._re[kind]
        return r is not None and r.search(name) is not None

    def to_json(self):
        return {"config": self.configure, "write": self.write, "read": self.read}


class User:
    def __init__(self, name, password_hash, hashing_algorithm="SHA256", tags=(), permissions=None):
        self.name = name
        self.password_hash = password_hash
        self.hashing_algorithm = hashing_algorithm
        self.tags = list(tags)
        self.permissions = permissions or {}
        self.loopback_only = False

    @property
    def is_administrator(self):
        return "administrator" in self.tags

    def can_access(self, vhost):
        return vhost in self.permissions

    def _allows(self, kind, vhost, name):
        p = self.permissions.get(vhost)
        return p is not None and p.allows(kind, name)

    def can_configure(self, vhost, name):
        return self._allows("configure", vhost, name)

    def can_write(self, vhost, name):
        return self._allows("write", vhost, name)

    def can_read(self, vhost, name):
        return self._allows("read", vhost, name)

    def to_json(self):
        return {"name": self.name, "password_hash": self.password_hash,
                "hashing_algorithm": self.hashing_algorithm, "tags": ",".join(self.tags),
                "permissions": {v: p.to_json() for v, p in self.permissions.items()}}


class UserStore:
    def __init__(self, data_dir, default_user="guest", default_password="guest"):
        self.path = os.path.join(data_dir, "users.json")
        self.default_user = default_user
        self.users = {}
        if os.path.exists(self.path):
            self._load()
        else:
            self.add_user(default_user, default_password, tags=("administrator",))
            self.set_permissions(default_user, "/", ".*", ".*", ".*")
        u = self.users.get(default_user)
        if u is not None and default_user == "guest":
            u.loopback_only = True

    def _load(self):
        with open(self.path, "rb") as f:
            data = orjson.loads(f.read())
        for d in data:
            tags = d.get("tags") or ""
            tags = [t for t in (tags.split(",") if isinstance(tags, str) else tags) if t]
            perms = {v: Permissions(p.get("config", ""), p.get("write", ""), p.get("read", ""))
                     for v, p in (d.get("permissions") or {}).items()}
            self.users[d["name"]] = User(d["name"], d.get("password_hash", ""),
                                         d.get("hashing_algorithm", "SHA256"), tags, perms)

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(orjson.dumps([u.to_json() for u in self.users.values()], option=orjson.OPT_INDENT_2))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def authenticate(self, username, password):
        u = self.users.get(username)
        if u is None or not u.password_hash:
            return None
        algo = ALGORITHM_NAMES.get(u.hashing_algorithm.upper(), u.hashing_algorithm)
        return u if verify(password, u.password_hash, algo) else None

    def get(self, name):
        return self.users.get(name)

    def add_user(self, name, password=None, tags=(), password_hash=None, hashing_algorithm="SHA256"):
        if password is not None:
            password_hash = hash_password(password, ALGORITHM_NAMES.get(hashing_algorithm, "sha256"))
        u = User(name, password_hash or "", hashing_algorithm, tags)
        self.users[name] = u
        self.save()
        return u

    def delete_user(self, name):
        if self.users.pop(name, None) is not None:
            self.save()
            return True
        return False

    def change_password(self, name, password):
        u = self.users[name]
        u.password_hash = hash_password(password, ALGORITHM_NAMES.get(u.hashing_algorithm, "sha256"))
        self.save()

    def set_tags(self, name, tags):
        self.users[name].tags = list(tags)
        self.save()

    def set_permissions(self, user, vhost, configure, write, read):
        self.users[user].permissions[vhost] = Permissions(configure, write, read)
        self.save()

    def clear_permissions(self, user, vhost):
        self.users[user].permissions.pop(vhost, None)
        self.save()

    def remove_vhost(self, vhost):
        for u in self.users.values():
            u.permissions.pop(vhost, None)
        self.save()

"""users.json: users, their password hashes, tags and per-vhost permissions,
in LavinMQ's format, which is RabbitMQ's definitions format for users:

    [{"name": "guest", "password_hash": "<base64>",
      "hashing_algorithm": "rabbit_password_hashing_sha256",
      "tags": "administrator",
      "permissions": {"/": {"config": ".*", "read": ".*", "write": ".*"}}}]

Permission patterns follow RabbitMQ: a regex searched in the resource name
(unanchored unless the pattern says ^ or $); "" and "^$" match nothing.
"""
import contextlib
import ipaddress
import logging
import os
import re

import orjson

from lavinmq.auth.password import algorithm_name, check_hash, hash_password, verify
from lavinmq.clustering import changes
from lavinmq.errors import ConfigError

log = logging.getLogger("lavinmq.users")

DEFAULT_ALGORITHM = "rabbit_password_hashing_sha256"
PERMISSION_CACHE_SIZE = 1024   # names remembered per (user, vhost) before starting over
_NOTHING = ("", "^$")


def is_loopback_address(host) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback (::ffff:127.0.0.1).
    Anything that is not an IP address (a unix socket path, None) is False:
    the caller decides about unix sockets."""
    if not isinstance(host, str):
        return False
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])   # drop an IPv6 scope id
    except ValueError:
        return False
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def _compile(kind, pattern):
    if not isinstance(pattern, str):
        raise ValueError(f"{kind} permission must be a string, not {pattern!r}")
    if pattern in _NOTHING:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid {kind} permission regex {pattern!r}: {exc}") from None


class Permissions:
    """A user's configure/write/read patterns on one vhost. Immutable: a
    change replaces the object, which also drops its cache of answers."""
    __slots__ = ("configure", "write", "read", "configure_re", "write_re", "read_re", "_cache")

    def __init__(self, configure=".*", write=".*", read=".*"):
        self.configure, self.write, self.read = configure, write, read
        self.configure_re = _compile("configure", configure)
        self.write_re = _compile("write", write)
        self.read_re = _compile("read", read)
        # Checked on every declare/bind/consume/publish-to-exchange; the same
        # few names come back again and again, so remember the answers.
        self._cache = {}

    def allows(self, kind, name):
        key = (kind, name)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        regex = getattr(self, kind + "_re")
        ok = regex is not None and regex.search(name) is not None
        if len(self._cache) >= PERMISSION_CACHE_SIZE:
            self._cache.clear()   # bounded: a client declaring random names can't grow it
        self._cache[key] = ok
        return ok

    def to_json(self):
        return {"config": self.configure, "read": self.read, "write": self.write}

    def __eq__(self, other):
        return isinstance(other, Permissions) and self.to_json() == other.to_json()

    def __repr__(self):
        return f"Permissions(configure={self.configure!r}, write={self.write!r}, read={self.read!r})"


class User:
    def __init__(self, name, password_hash="", hashing_algorithm=DEFAULT_ALGORITHM, tags=(),
                 permissions=None, loopback_only=False):
        self.name = name
        self.password_hash = password_hash or ""       # "" = cannot log in with a password
        self.hashing_algorithm = hashing_algorithm
        self.tags = list(tags)
        self.permissions = dict(permissions or {})   # vhost -> Permissions
        self.loopback_only = loopback_only            # not stored: follows the config

    @property
    def is_administrator(self) -> bool:
        return "administrator" in self.tags

    def verify_password(self, password) -> bool:
        return bool(self.password_hash) and verify(password, self.password_hash, self.hashing_algorithm)

    def can_access(self, vhost) -> bool:
        return vhost in self.permissions

    def _allows(self, kind, vhost, name):
        p = self.permissions.get(vhost)
        return p is not None and p.allows(kind, name)

    def can_configure(self, vhost, name) -> bool:
        return self._allows("configure", vhost, name)

    def can_write(self, vhost, name) -> bool:
        return self._allows("write", vhost, name)

    def can_read(self, vhost, name) -> bool:
        return self._allows("read", vhost, name)

    def to_json(self):
        return {"name": self.name, "password_hash": self.password_hash,
                "hashing_algorithm": self.hashing_algorithm if self.password_hash else None,
                "tags": ",".join(self.tags),
                "permissions": {v: p.to_json() for v, p in self.permissions.items()}}

    @classmethod
    def from_json(cls, d):
        """One users.json entry; ValueError naming what is wrong."""
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            raise ValueError("a user needs a string 'name'")
        password_hash = d.get("password_hash") or ""
        # LavinMQ (and RabbitMQ before 3.6) take a hash with no algorithm as MD5
        algorithm = algorithm_name(d.get("hashing_algorithm") or ("md5" if password_hash else DEFAULT_ALGORITHM))
        if password_hash:
            check_hash(password_hash, algorithm)
        perms = {}
        for vhost, p in (d.get("permissions") or {}).items():
            if not isinstance(p, dict):
                raise ValueError(f"permissions on vhost {vhost!r} must be an object")
            perms[vhost] = Permissions(p.get("config", ""), p.get("write", ""), p.get("read", ""))
        return cls(d["name"], password_hash, algorithm, parse_tags(d.get("tags")), perms)

    def __repr__(self):
        return f"User({self.name!r}, tags={self.tags!r})"


def parse_tags(tags):
    """'administrator, monitoring' or a list -> ['administrator', 'monitoring']."""
    if tags is None:
        return []
    if isinstance(tags, str):
        tags = tags.split(",")
    return [t.strip() for t in tags if t and t.strip()]


class UserStore:
    """The users of this broker, kept in <data_dir>/users.json. Every change
    is saved at once. With no users.json, the default user is created as an
    administrator with full permissions on "/"."""

    def __init__(self, data_dir, default_user="guest", default_password="guest", *,
                 default_password_hash=None, default_user_only_loopback=True, loopback_users=("guest",)):
        self.path = os.path.join(data_dir, "users.json")
        self.default_user = default_user
        # Users that may only log in from loopback, by name (RabbitMQ's
        # loopback_users, plus LavinMQ's default_user_only_loopback): a user
        # deleted and created again, or created later, gets the rule too.
        self.loopback_names = set(parse_tags(loopback_users))
        if default_user_only_loopback:
            self.loopback_names.add(default_user)
        self.users = {}
        self._batch_depth = 0
        self._unsaved = False
        # called with (user name, vhost or None) after a user is deleted or
        # its permissions change, so open connections follow (Server sets it)
        self.on_change = None
        self._changed = set()
        if os.path.exists(self.path):
            self._load()
        else:
            self.add_user(default_user, None if default_password_hash else default_password,
                          tags=("administrator",), password_hash=default_password_hash)
            self.set_permissions(default_user, "/", ".*", ".*", ".*")
            log.info("created default user %s", default_user)

    @classmethod
    def from_config(cls, config):
        return cls(config.data_dir, config.default_user, config.default_password,
                   default_password_hash=config.default_password_hash,
                   default_user_only_loopback=config.default_user_only_loopback,
                   loopback_users=config.loopback_users)

    def _adopt(self, user):
        user.loopback_only = user.name in self.loopback_names
        self.users[user.name] = user
        return user

    def _load(self):
        try:
            with open(self.path, "rb") as f:
                data = orjson.loads(f.read())
            if not isinstance(data, list):
                raise ValueError("expected a JSON list of users")
            for i, d in enumerate(data):
                try:
                    user = User.from_json(d)
                except ValueError as exc:
                    raise ValueError(f"user #{i} {d.get('name') if isinstance(d, dict) else ''!r}: {exc}") from None
                self._adopt(user)
        except (OSError, ValueError) as exc:   # orjson.JSONDecodeError is a ValueError
            raise ConfigError(f"cannot load {self.path}: {exc}") from None
        log.debug("%d users loaded", len(self.users))

    @contextlib.contextmanager
    def batch(self):
        """Many changes, one write of users.json (an import of thousands of
        users is one fsync, not one each). All or nothing: on an exception
        every user is as before, the same objects open connections hold."""
        before = {name: (u, u.password_hash, u.hashing_algorithm, list(u.tags), dict(u.permissions))
                  for name, u in self.users.items()}
        self._batch_depth += 1
        try:
            yield self
        except BaseException:
            self.users.clear()
            for name, (u, password_hash, algorithm, tags, perms) in before.items():
                u.password_hash, u.hashing_algorithm, u.tags, u.permissions = password_hash, algorithm, tags, perms
                self.users[name] = u
            self._changed.clear()
            raise
        finally:
            self._batch_depth -= 1
        if self._batch_depth == 0:
            if self._unsaved:
                self.save()
            changed, self._changed = self._changed, set()
            for name, vhost in changed:
                self._notify(name, vhost)

    def _notify(self, name, vhost):
        if self._batch_depth:
            self._changed.add((name, vhost))
        elif self.on_change is not None:
            self.on_change(name, vhost)

    def save(self):
        """Write users.json atomically: a crash leaves the old or the new file."""
        if self._batch_depth:
            self._unsaved = True
            return
        self._unsaved = False
        data = orjson.dumps([u.to_json() for u in self.users.values()], option=orjson.OPT_INDENT_2)
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)   # hashes: owner only
        try:
            with open(fd, "wb", closefd=True) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        # the rename is durable only once the directory is synced
        dfd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        changes.changed(self.path)

    def authenticate(self, username, password):
        """The user if the password is right, else None. The loopback rule is
        the caller's (it knows the peer): see User.loopback_only."""
        user = self.users.get(username)
        if user is None or not user.verify_password(password):
            return None
        return user

    def get(self, name):
        return self.users.get(name)

    def __contains__(self, name):
        return name in self.users

    def __len__(self):
        return len(self.users)

    def add_user(self, name, password=None, tags=(), password_hash=None,
                 hashing_algorithm="SHA256"):
        """Create a user, or update an existing one's password and tags while
        keeping its permissions (like PUT /api/users/NAME). Give either a
        password or a password_hash in hashing_algorithm; with neither the
        user cannot log in with a password."""
        if not isinstance(name, str) or not name:
            raise ValueError("user name must be a non-empty string")
        algorithm = algorithm_name(hashing_algorithm)
        if password is not None:
            password_hash = hash_password(password, algorithm)
        elif password_hash:
            check_hash(password_hash, algorithm)
        old = self.users.get(name)
        if old is not None:
            # the same object: open connections see its new tags at once
            old.password_hash, old.hashing_algorithm, old.tags = password_hash or "", algorithm, parse_tags(tags)
            user = old
        else:
            user = self._adopt(User(name, password_hash or "", algorithm, parse_tags(tags)))
        self.save()
        return user

    def delete_user(self, name) -> bool:
        if self.users.pop(name, None) is None:
            return False
        self.save()
        self._notify(name, None)
        return True

    def change_password(self, name, password):
        # always SHA-256: an imported MD5 hash is upgraded on its next change
        user = self.users[name]
        user.password_hash = hash_password(password, DEFAULT_ALGORITHM)
        user.hashing_algorithm = DEFAULT_ALGORITHM
        self.save()

    def set_tags(self, name, tags):
        self.users[name].tags = parse_tags(tags)
        self.save()

    def set_permissions(self, user, vhost, configure, write, read):
        """Replace the user's permissions on vhost (argument order as
        rabbitmqctl set_permissions). ValueError on a bad regex."""
        self.users[user].permissions[vhost] = Permissions(configure, write, read)
        self.save()
        self._notify(user, vhost)

    def clear_permissions(self, user, vhost) -> bool:
        if self.users[user].permissions.pop(vhost, None) is None:
            return False
        self.save()
        self._notify(user, vhost)
        return True

    def remove_vhost(self, vhost):
        """Drop every user's permissions on a deleted vhost."""
        changed = [u for u in self.users.values() if u.permissions.pop(vhost, None) is not None]
        if changed:
            self.save()

"""Password hashes (RabbitMQ-compatible), users.json, permissions."""
import base64
import hashlib
import json
import os
import stat

import pytest

from lavinmq.auth import password
from lavinmq.auth.users import (PERMISSION_CACHE_SIZE, Permissions, User, UserStore,
                                is_loopback_address)
from lavinmq.errors import ConfigError

# Published hashes: RabbitMQ's documentation example (password "test12",
# salt 908dc60a) and LavinMQ's built-in default (password "guest").
RABBITMQ_DOC_VECTOR = ("test12", "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR")
LAVINMQ_GUEST_VECTOR = ("guest", "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+")
DIGESTS = {"sha256": hashlib.sha256, "sha512": hashlib.sha512, "md5": hashlib.md5}


def rabbit_hash(pw, salt, digest):
    """The format written out by hand: base64(salt ++ H(salt ++ utf8(pw)))."""
    return base64.b64encode(salt + DIGESTS[digest](salt + pw.encode("utf-8")).digest()).decode()


# -- password hashes ------------------------------------------------------------

@pytest.mark.parametrize("pw,hashed", [RABBITMQ_DOC_VECTOR, LAVINMQ_GUEST_VECTOR])
def test_published_vectors(pw, hashed):
    assert password.verify(pw, hashed, "rabbit_password_hashing_sha256")
    assert password.verify(pw, hashed)                  # sha256 is the default
    assert not password.verify(pw + "x", hashed)
    assert not password.verify(pw, hashed, "md5")


@pytest.mark.parametrize("digest", ["sha256", "sha512", "md5"])
@pytest.mark.parametrize("pw", ["guest", "", "pässwörd ☃", "a" * 1000])
def test_independently_computed_vectors(digest, pw):
    hashed = rabbit_hash(pw, bytes.fromhex("01020304"), digest)
    assert password.verify(pw, hashed, f"rabbit_password_hashing_{digest}")
    assert password.verify(pw.encode(), hashed, digest.upper())   # bytes, and the short upper-case name
    assert not password.verify(pw + "!", hashed, digest)


@pytest.mark.parametrize("digest", ["sha256", "sha512", "md5"])
def test_hash_password_output(digest):
    hashed = password.hash_password("s3cret", digest)
    raw = base64.b64decode(hashed, validate=True)
    salt = raw[:4]
    assert len(raw) == 4 + DIGESTS[digest]().digest_size
    assert hashed == rabbit_hash("s3cret", salt, digest)
    assert password.hash_password("s3cret", digest) != hashed        # a fresh salt each time


def test_malformed_hashes_never_verify():
    pw, hashed = RABBITMQ_DOC_VECTOR
    assert password.verify(pw, "$5$" + hashed)        # LavinMQ's old prefixed form
    for bad in ("", "!!!!", hashed[:-8], "Z3Vlc3Q="):
        assert not password.verify(pw, bad)
        with pytest.raises(ValueError):
            password.check_hash(bad)
    assert not password.verify(pw, hashed, "lavinmq_bcrypt")
    with pytest.raises(ValueError, match="unknown password hashing algorithm"):
        password.hash_password(pw, "rot13")


# -- users.json -------------------------------------------------------------------

def read_users(data_dir):
    with open(os.path.join(data_dir, "users.json")) as f:
        return json.load(f)


def test_default_user_created_in_lavinmq_format(tmp_path):
    store = UserStore(str(tmp_path))
    (entry,) = read_users(tmp_path)
    assert entry["name"] == "guest" and entry["tags"] == "administrator"
    assert entry["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert entry["permissions"] == {"/": {"config": ".*", "read": ".*", "write": ".*"}}
    assert password.verify("guest", entry["password_hash"])
    assert stat.S_IMODE(os.stat(tmp_path / "users.json").st_mode) == 0o600
    assert not (tmp_path / "users.json.tmp").exists()
    guest = store.authenticate("guest", "guest")
    assert guest is store.get("guest") and guest.is_administrator and guest.loopback_only
    assert store.authenticate("guest", "wrong") is None
    assert store.authenticate("nobody", "guest") is None


def test_default_user_from_config_values(tmp_path):
    pw, hashed = RABBITMQ_DOC_VECTOR
    store = UserStore(str(tmp_path), "admin", "ignored", default_password_hash=hashed,
                      default_user_only_loopback=False)
    assert list(store.users) == ["admin"]
    admin = store.authenticate("admin", pw)
    assert admin is not None and not admin.loopback_only and admin.password_hash == hashed
    # the loopback rule follows the configuration on every start, it is not stored
    assert UserStore(str(tmp_path), "admin").get("admin").loopback_only


def test_round_trip(tmp_path):
    store = UserStore(str(tmp_path))
    store.add_user("alice", "wonderland", tags=("management", "policymaker"))
    store.add_user("bob", password_hash=rabbit_hash("builder", b"abcd", "sha512"), hashing_algorithm="SHA512")
    store.add_user("nologin")
    store.set_permissions("alice", "/", "^alice\\.", "^(alice|amq\\.default)", ".*")
    store.set_permissions("alice", "other", "", "", "^$")
    store.set_permissions("bob", "/", ".*", ".*", ".*")

    again = UserStore(str(tmp_path))
    assert list(again.users) == ["guest", "alice", "bob", "nologin"]
    for name, user in store.users.items():
        other = again.get(name)
        assert (other.password_hash, other.hashing_algorithm, other.tags, other.permissions) == \
               (user.password_hash, user.hashing_algorithm, user.tags, user.permissions)
    assert again.get("alice").tags == ["management", "policymaker"]
    assert again.authenticate("alice", "wonderland") and again.authenticate("bob", "builder")
    assert again.get("bob").hashing_algorithm == "rabbit_password_hashing_sha512"
    assert again.authenticate("nologin", "") is None
    assert not again.get("alice").loopback_only
    entries = {e["name"]: e for e in read_users(tmp_path)}
    assert entries["alice"]["tags"] == "management,policymaker"
    assert entries["alice"]["permissions"]["other"] == {"config": "", "read": "^$", "write": ""}
    assert entries["nologin"]["password_hash"] == "" and entries["nologin"]["hashing_algorithm"] is None


def test_loads_rabbitmq_style_users(tmp_path):
    users = [
        # no hashing_algorithm: MD5, as in LavinMQ and old RabbitMQ exports
        {"name": "old", "password_hash": rabbit_hash("md5pw", b"\0\0\0\1", "md5"), "tags": "",
         "permissions": {"/": {"config": "", "write": "", "read": ".*"}}},
        {"name": "new", "password_hash": rabbit_hash("pw512", b"salt", "sha512"),
         "hashing_algorithm": "rabbit_password_hashing_sha512", "tags": ["administrator", "monitoring"]},
        {"name": "none", "password_hash": None, "hashing_algorithm": None, "tags": "monitoring"},
    ]
    (tmp_path / "users.json").write_text(json.dumps(users))
    store = UserStore(str(tmp_path))
    assert "guest" not in store                   # users.json exists: no default user added
    assert store.authenticate("old", "md5pw").hashing_algorithm == "rabbit_password_hashing_md5"
    assert store.get("new").tags == ["administrator", "monitoring"] and store.get("new").is_administrator
    assert store.authenticate("new", "pw512") is not None
    assert store.authenticate("none", "") is None
    old = store.get("old")
    assert old.can_read("/", "q") and not old.can_write("/", "q") and not old.can_configure("/", "q")
    # a password change upgrades the old MD5 hash to SHA-256
    store.change_password("old", "newpw")
    assert store.authenticate("old", "md5pw") is None
    assert UserStore(str(tmp_path)).authenticate("old", "newpw").hashing_algorithm == "rabbit_password_hashing_sha256"


@pytest.mark.parametrize("content,message", [
    (b"{not json", "cannot load"),
    (b'{"name": "x"}', "expected a JSON list"),
    (b'[{"password_hash": ""}]', "needs a string 'name'"),
    (b'[{"name": "x", "password_hash": "short", "hashing_algorithm": "rabbit_password_hashing_sha256"}]',
     "user #0 'x': password hash"),
    (b'[{"name": "x", "password_hash": "", "permissions": {"/": {"config": "(", "write": "", "read": ""}}}]',
     "invalid configure permission regex"),
    (b'[{"name": "x", "password_hash": "", "hashing_algorithm": "rot13"}]', "unknown password hashing"),
])
def test_bad_users_json_names_file(tmp_path, content, message):
    (tmp_path / "users.json").write_bytes(content)
    with pytest.raises(ConfigError) as e:
        UserStore(str(tmp_path))
    assert str(tmp_path / "users.json") in str(e.value) and message in str(e.value)


def test_management(tmp_path):
    store = UserStore(str(tmp_path))
    store.add_user("u", "one", tags=["management"])
    store.set_permissions("u", "/", ".*", ".*", ".*")
    store.set_permissions("u", "v2", ".*", ".*", ".*")
    # updating an existing user keeps its permissions
    store.add_user("u", "two", tags="administrator, monitoring")
    u = store.get("u")
    assert set(u.permissions) == {"/", "v2"} and u.tags == ["administrator", "monitoring"]
    assert store.authenticate("u", "two") and not store.authenticate("u", "one")
    store.set_tags("u", [])
    assert not store.get("u").is_administrator
    assert store.clear_permissions("u", "v2") and not store.clear_permissions("u", "v2")
    assert not store.get("u").can_access("v2")
    store.set_permissions("guest", "v3", ".*", ".*", ".*")
    store.set_permissions("u", "v3", ".*", ".*", ".*")
    store.remove_vhost("v3")
    assert not any(user.can_access("v3") for user in store.users.values())
    assert store.delete_user("u") and not store.delete_user("u")
    reloaded = UserStore(str(tmp_path))
    assert list(reloaded.users) == ["guest"] and set(reloaded.get("guest").permissions) == {"/"}
    with pytest.raises(KeyError):
        store.change_password("u", "x")
    with pytest.raises(ValueError, match="invalid write permission regex"):
        store.set_permissions("guest", "/", ".*", "[", ".*")
    with pytest.raises(ValueError):
        store.add_user("bad", password_hash="nope")


# -- permissions ----------------------------------------------------------------

@pytest.mark.parametrize("pattern,allowed,refused", [
    (".*", ["", "q", "amq.gen-1", "a\nb"], []),
    ("", [], ["", "q", "anything"]),                       # empty pattern: nothing
    ("^$", [], ["", "q"]),                                 # as LavinMQ: nothing either
    ("foo", ["foo", "xfooy", "foo.bar"], ["fo", "FOO"]),   # searched, not anchored
    ("^foo", ["foo", "foo.bar"], ["xfoo"]),
    ("^foo$", ["foo"], ["foo.bar", "xfoo"]),
    ("^(amq\\.gen.*|tasks)$", ["amq.gen-abc", "tasks"], ["tasks2", "my.tasks"]),
    ("^user-[0-9]+\\.", ["user-12.q"], ["user-.q", "user-1q"]),
])
def test_permission_patterns(pattern, allowed, refused):
    user = User("u", permissions={"/": Permissions(pattern, pattern, pattern)})
    for name in allowed:
        assert user.can_configure("/", name) and user.can_write("/", name) and user.can_read("/", name)
    for name in refused:
        assert not (user.can_configure("/", name) or user.can_write("/", name) or user.can_read("/", name))
    assert not user.can_read("other", allowed[0] if allowed else "q")


def test_configure_write_read_are_separate(tmp_path):
    store = UserStore(str(tmp_path))
    store.add_user("u", "pw")
    store.set_permissions("u", "/", "^conf", "^write", "^read")   # rabbitmqctl order
    u = store.get("u")
    assert u.can_access("/") and not u.can_access("/other")
    assert u.can_configure("/", "conf.q") and not u.can_configure("/", "write.q")
    assert u.can_write("/", "write.q") and not u.can_write("/", "read.q")
    assert u.can_read("/", "read.q") and not u.can_read("/", "conf.q")


def test_cached_answers_follow_permission_changes(tmp_path):
    store = UserStore(str(tmp_path))
    guest = store.get("guest")
    assert guest.can_write("/", "q1")
    store.set_permissions("guest", "/", ".*", "^q2$", ".*")
    assert not guest.can_write("/", "q1") and guest.can_write("/", "q2")
    store.clear_permissions("guest", "/")
    assert not guest.can_write("/", "q2")


def test_permission_cache_is_bounded():
    perms = Permissions(".*", "^a", "")
    for i in range(PERMISSION_CACHE_SIZE * 3):
        assert perms.allows("write", f"a{i}")
        assert not perms.allows("read", f"a{i}")
        assert len(perms._cache) <= PERMISSION_CACHE_SIZE


@pytest.mark.parametrize("host,expected", [
    ("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("10.0.0.1", False), ("::ffff:10.0.0.1", False), ("fe80::1%eth0", False), ("0.0.0.0", False),
    ("localhost", False), ("", False), (None, False), ("/run/lavinmq.sock", False),
])
def test_is_loopback_address(host, expected):
    assert is_loopback_address(host) is expected

"""The [clustering] settings checked once at start, and the node's id."""
import os
import secrets
import socket
import urllib.parse

from lavinmq.errors import ConfigError

ID_FILE = ".clustering_id"
# no key component etcd or an operator's etcdctl would trip over
PREFIX_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./")


def check_clustering(config):
    where = config.sources.get
    if not config.sync:
        raise ConfigError(f"{where('sync', 'sync')}: clustering needs [main] sync = true: confirms wait for "
                          f"every in-sync replica's disk")
    if not set(config.clustering_etcd_prefix) <= PREFIX_CHARS or config.clustering_etcd_prefix.endswith("/"):
        raise ConfigError(f"{where('clustering_etcd_prefix', '[clustering] etcd_prefix')}: "
                          f"{config.clustering_etcd_prefix!r}: letters, digits, - _ . / (not at the end) only")
    for ep in config.clustering_etcd_endpoints.split(","):
        try:
            parse_endpoint(ep)
        except ValueError as exc:
            raise ConfigError(f"{where('clustering_etcd_endpoints', '[clustering] etcd_endpoints')}: "
                              f"{exc}") from None
    try:
        advertised_host_port(config)
    except ValueError as exc:
        raise ConfigError(f"{where('clustering_advertised_uri', '[clustering] advertised_uri')}: {exc}") from None


def parse_endpoint(text):
    """'host:port', 'http://host:port', 'https://user:pass@host:port' ->
    (base URL, user or None, password or None)."""
    text = text.strip()
    if not text:
        raise ValueError("an empty etcd endpoint")
    if "://" not in text:
        text = "http://" + text
    u = urllib.parse.urlsplit(text)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"{text!r} is not an etcd endpoint (host:port or http(s)://host:port)")
    try:
        port = u.port or 2379
    except ValueError:
        raise ValueError(f"{text!r}: bad port") from None
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return f"{u.scheme}://{host}:{port}", u.username, u.password


def endpoints(config):
    return [parse_endpoint(e) for e in config.clustering_etcd_endpoints.split(",")]


def advertised_uri(config):
    if config.clustering_advertised_uri:
        return config.clustering_advertised_uri
    bind = config.clustering_bind
    host = socket.gethostname() if bind in ("0.0.0.0", "::", "") else bind
    return f"tcp://{host}:{config.clustering_port}"


def advertised_host_port(config):
    return parse_uri(advertised_uri(config))


def parse_uri(uri):
    """'tcp://host:port' -> (host, port)."""
    u = urllib.parse.urlsplit(uri)
    try:
        port = u.port
    except ValueError:
        port = None
    if u.scheme != "tcp" or not u.hostname or not port:
        raise ValueError(f"{uri!r} is not tcp://host:port")
    return u.hostname, port


def node_name(uri):
    """How the management API, lavinmqctl and the logs name a node:
    lavinmq@<host of its advertised URI> (RabbitMQ's name@host shape; the
    URIs differ per node, and so do their hosts, as every node of a cluster
    uses the same ports)."""
    try:
        return f"lavinmq@{parse_uri(uri)[0]}"
    except ValueError:
        return f"lavinmq@{uri}"


def to_base36(n):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def node_id(data_dir):
    """The node's id, kept in DATA_DIR/.clustering_id in base36 as LavinMQ
    does; made at the first start. It is also the id of the node's etcd
    lease, so a restarted node finds its old lease."""
    path = os.path.join(data_dir, ID_FILE)
    try:
        with open(path) as f:
            text = f.read().strip()
        value = int(text, 36)
        if 0 < value < 2 ** 31:
            return value
        raise ValueError(text)
    except FileNotFoundError:
        pass
    except ValueError:
        raise ConfigError(f"{path}: {text!r} is not a node id (base36, 1 .. 2^31-1)") from None
    value = secrets.randbelow(2 ** 31 - 2) + 1
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(to_base36(value) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return value

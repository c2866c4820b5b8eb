"""AMQP URIs as shovels and federation upstreams give them (RabbitMQ's URI
spec, LavinMQ's reading of it): amqp:// or amqps://, user and password,
host and port, the vhost as the path (percent-encoded; no path is "/"), and
query parameters for the connection. A URI without a host ("amqp://",
"amqp:///vhost") is this broker itself, reached in-process."""
import ssl
import urllib.parse
from dataclasses import dataclass, field

DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}

# query parameters we act on; others (RabbitMQ's auth_mechanism, ...) are
# accepted and ignored, as LavinMQ's client does
KNOWN_PARAMS = ("heartbeat", "frame_max", "channel_max", "connection_timeout", "connect_timeout", "name",
                "verify", "cacertfile", "certfile", "keyfile", "server_name_indication")


class URIError(ValueError):
    pass


@dataclass
class AMQPURI:
    scheme: str
    host: str              # "" = this broker, in-process
    port: int
    user: str
    password: str
    vhost: str
    params: dict = field(default_factory=dict)

    @property
    def local(self):
        return self.host == ""

    @property
    def tls(self):
        return self.scheme == "amqps"

    def int_param(self, name, default, lo=0, hi=2 ** 32 - 1):
        raw = self.params.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise URIError(f"URI parameter {name} must be an integer, not {raw!r}") from None
        if not lo <= value <= hi:
            raise URIError(f"URI parameter {name} must be between {lo} and {hi}")
        return value

    @property
    def connect_timeout(self):
        # RabbitMQ's connection_timeout is in milliseconds, LavinMQ's connect_timeout in seconds
        if "connection_timeout" in self.params:
            return self.int_param("connection_timeout", 10000, 1) / 1000
        return self.int_param("connect_timeout", 10, 1)

    def ssl_context(self):
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.params.get("cacertfile") or None)
        if self.params.get("certfile"):
            ctx.load_cert_chain(self.params["certfile"], self.params.get("keyfile") or None)
        if self.params.get("verify") in ("none", "verify_none"):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def scrubbed(self):
        """The URI without its password, for logs and the API."""
        netloc = self.host
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if self.port != DEFAULT_PORTS[self.scheme] and self.host:
            netloc += f":{self.port}"
        if self.user and self.host:
            netloc = urllib.parse.quote(self.user, safe="") + "@" + netloc
        path = "" if self.vhost == "/" else "/" + urllib.parse.quote(self.vhost, safe="")
        return f"{self.scheme}://{netloc}{path}"


def scrub(uri):
    """Any URI string with its password (user info) hidden; for display."""
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError:
        return "(unparseable URI)"
    if parts.password is None:
        return uri
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urllib.parse.urlunsplit((parts.scheme, f"{user}:***@{netloc}", parts.path, parts.query, ""))


def parse(uri):
    """An amqp(s) URI -> AMQPURI; URIError says what is wrong."""
    if not isinstance(uri, str):
        raise URIError(f"a URI must be a string, not {type(uri).__name__}")
    try:
        parts = urllib.parse.urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise URIError(f"bad URI {scrub(uri)!r}: {exc}") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise URIError(f"bad URI {scrub(uri)!r}: the scheme must be amqp or amqps")
    path = parts.path
    if path.startswith("/"):
        path = path[1:]
    if "/" in path:
        raise URIError(f"bad URI {scrub(uri)!r}: a vhost in the path must be percent-encoded (%2F for /)")
    vhost = urllib.parse.unquote(path) or "/"     # LavinMQ's reading: "amqp://h/" is "/" too
    params = {}
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        params[key] = value
    host = parts.hostname or ""
    if not host and (parts.username or port):
        raise URIError(f"bad URI {scrub(uri)!r}: user or port without a host")
    out = AMQPURI(parts.scheme, host, port or DEFAULT_PORTS[parts.scheme],
                  urllib.parse.unquote(parts.username) if parts.username is not None else "guest",
                  urllib.parse.unquote(parts.password) if parts.password is not None else "guest",
                  vhost, params)
    out.int_param("heartbeat", 60, 0, 65535)
    out.int_param("frame_max", 131072, 4096)
    out.int_param("channel_max", 0, 0, 65535)
    out.connect_timeout  # noqa: B018 - checks the value
    return out

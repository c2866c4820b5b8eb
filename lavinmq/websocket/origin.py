"""Which browsers' pages may open a WebSocket to the broker.

A browser lets any page open a WebSocket anywhere, sending the page's
origin in `Origin`; it is the server's to refuse. The broker's AMQP and MQTT
over WebSocket log in with the user's own protocol, and a page the
operator opens connects from the operator's machine: from loopback, as the
loopback-only guest may. So an upgrade that names an Origin is taken only
from the broker's own origin (the Origin's host is the Host the request
names, as the API's cross-site check has it) or from
`[mgmt] websocket_allowed_origins`; `*` there takes any (LavinMQ checks
none). An upgrade without Origin comes from a client that is no browser
(paho, a WebSocket library) and is taken as before: no page can leave the
header out."""
import urllib.parse

ANY = "*"


def _normal(origin):
    """scheme://host[:port], lowercased; ValueError for anything else."""
    parts = urllib.parse.urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username is not None:
        raise ValueError(f"{origin!r} is not an origin (scheme://host[:port], or *)")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def parse_allowed(value):
    """The setting's comma-separated origins -> frozenset (ANY in it: any
    origin); ValueError names a bad one."""
    out = set()
    for item in (value or "").split(","):
        item = item.strip()
        if item:
            out.add(ANY if item == ANY else _normal(item))
    return frozenset(out)


def allowed(request, allowed_origins):
    """-> None when the upgrade may go on, else why it is refused."""
    origin = request.headers.get("Origin")
    if origin is None or ANY in allowed_origins:
        return None
    try:
        normal = _normal(origin)
    except ValueError:
        return f"cross-origin WebSocket upgrade from {origin[:100]!r} refused"
    if urllib.parse.urlsplit(normal).netloc == request.host.lower() or normal in allowed_origins:
        return None
    return (f"cross-origin WebSocket upgrade from {origin[:100]!r} refused "
            f"([mgmt] websocket_allowed_origins names the origins allowed besides the broker's own)")

"""The WebSocket handshake on the management HTTP listeners (an aiohttp
middleware, ahead of authentication: the connection logs in with its own
protocol). The protocol is picked as LavinMQ does:

1. Sec-WebSocket-Protocol: the first offered token starting with `amqp` or
   `mqtt` (case-insensitive) picks that protocol, and is echoed back;
2. otherwise the path: /mqtt and /ws/mqtt are MQTT, anything else AMQP.

A browser's upgrade (one with Origin) is taken only from the broker's own
origin or an allowed one (lavinmq.websocket.origin).

After the 101 answer the socket is handed to WebSocketProtocol in the same
callback (no byte can reach aiohttp in between); aiohttp's request waits
until the connection ends, then finishes without writing anything."""
import asyncio
import base64
import hashlib
import logging

from aiohttp import web

from lavinmq.listener import RateLimitedLog
from lavinmq.websocket import origin

log = logging.getLogger("lavinmq.websocket")
_refused_log = RateLimitedLog(log)

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MQTT_PATHS = ("/mqtt", "/ws/mqtt")


def pick_protocol(offered, path):
    """-> ("amqp" or "mqtt", the sub-protocol token to echo or None)."""
    for token in offered:
        low = token.lower()
        if low.startswith("amqp"):
            return "amqp", token
        if low.startswith("mqtt"):
            return "mqtt", token
    return ("mqtt" if path.rstrip("/") in MQTT_PATHS else "amqp"), None


def is_upgrade(request):
    return request.headers.get("Upgrade", "").lower() == "websocket"


def accept_key(key):
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def install(app):
    """Upgrades are answered ahead of every other middleware (authentication:
    the connection logs in with its own protocol), and closed when the
    application shuts down, before aiohttp waits for its handlers."""
    app.middlewares.insert(0, websocket_middleware)
    app["websockets"] = set()
    app.on_shutdown.append(close_all)


async def close_all(app):
    for ws in list(app["websockets"]):
        ws.shutdown()


@web.middleware
async def websocket_middleware(request, handler):
    if not is_upgrade(request):
        return await handler(request)
    return await upgrade(request)


async def upgrade(request):
    h = request.headers
    if request.method != "GET" or "upgrade" not in h.get("Connection", "").lower():
        return web.Response(status=400, text="WebSocket upgrade needs GET and Connection: Upgrade\n")
    if h.get("Sec-WebSocket-Version") != "13":
        return web.Response(status=426, headers={"Sec-WebSocket-Version": "13"},
                            text="WebSocket version 13 only\n")
    key = h.get("Sec-WebSocket-Key", "")
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError
    except ValueError:
        return web.Response(status=400, text="bad Sec-WebSocket-Key\n")
    server = request.app["server"]
    refused = origin.allowed(request, origin.parse_allowed(server.config.websocket_allowed_origins))
    if refused is not None:
        _refused_log("WebSocket from %s: %s", request.remote, refused)
        return web.Response(status=403, text=refused + "\n")
    offered = [t.strip() for t in h.get("Sec-WebSocket-Protocol", "").split(",") if t.strip()]
    kind, token = pick_protocol(offered, request.path)
    if getattr(server, "draining", False):
        # a clean stop's grace period (lavinmq.drain): no new connections
        return web.Response(status=503, text="the broker is shutting down\n")
    transport = request.transport
    http = request.protocol
    if transport is None or transport.is_closing():
        return web.Response(status=400)
    if kind == "mqtt":
        from lavinmq.mqtt.connection import MQTTConnection
        inner = MQTTConnection(server)
        inner.transport_name = "websocket"
    else:
        from lavinmq.amqp.connection import AMQPConnection
        inner = AMQPConnection(server)
    # the HTTP socket's slot under the connection caps is now the inner
    # connection's: its login makes it one the guard never closes for room
    inner.ticket = getattr(http, "ticket", None)
    from lavinmq.websocket.transport import WebSocketProtocol
    done = asyncio.get_running_loop().create_future()
    ws = WebSocketProtocol(transport, inner, http, done)
    lines = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Accept: {accept_key(key)}"]
    if token is not None:
        lines.append(f"Sec-WebSocket-Protocol: {token}")
    transport.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    # bytes aiohttp read past the request (a client that did not wait for 101)
    tail = getattr(http, "_message_tail", b"") or b""
    transport.set_protocol(ws)
    ws.start(tail)
    log.debug("WebSocket %s connection from %s (%s)", kind.upper(), request.remote, request.path)
    sockets = request.app["websockets"]
    sockets.add(ws)
    try:
        await done
    finally:
        sockets.discard(ws)
    # aiohttp's handler saw the socket close: writing this fails quietly
    # (ConnectionError), and the request ends without a byte sent
    return web.Response(status=101)

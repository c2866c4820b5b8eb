"""POST .../exchanges/{vhost}/{exchange}/publish and .../queues/{vhost}/{queue}/get
as RabbitMQ's management API has them: for operators and tests, one
request at a time, never the message path."""
import base64

from aiohttp import web

from lavinmq._core.exchange_store import route_and_keep
from lavinmq.errors import AMQPError
from lavinmq.http.helpers import HTTPError, MANAGEMENT, body_json, not_found, require, typed, vhost_of
from lavinmq.http.records import build_record, check_props, parse_record

async def publish(request):
    require(request, MANAGEMENT)
    vhost = vhost_of(request)
    name = request.match_info["exchange"]
    ex = vhost.exchanges.get("" if name == "amq.default" else name)   # RabbitMQ's URL name for ""
    if ex is None:
        raise not_found()
    user = request["user"]
    if not user.can_write(vhost.name, ex.name or "amq.default"):     # as over AMQP
        raise HTTPError(403, f"write access to exchange '{ex.name}' refused for user '{user.name}'")
    if ex.internal:
        raise HTTPError(403, f"cannot publish to internal exchange '{ex.name}' in vhost '{vhost.name}'")
    server = request.app["server"]
    if server.alarm_reason is not None:
        # a resource alarm holds every publisher (AMQP and MQTT are not read):
        # this one is told to come back later (RabbitMQ and LavinMQ let it in)
        raise HTTPError(503, f"resource alarm in effect ({server.alarm_reason}): publishing is blocked "
                             f"until it clears", "service_unavailable")
    body = await body_json(request)
    rk = typed(body, "routing_key", str)
    text = typed(body, "payload", str)
    encoding = typed(body, "payload_encoding", str)
    if encoding == "string":
        payload = text.encode("utf-8", "surrogatepass")
    elif encoding == "base64":
        try:
            payload = base64.b64decode(text, validate=True)
        except ValueError:
            raise HTTPError(400, "payload is not base64")
    else:
        raise HTTPError(400, "payload_encoding must be string or base64")
    props = check_props(typed(body, "properties", dict, {}))
    uid = props.get("user_id")
    if uid is not None and uid != user.name and "impersonator" not in user.tags:
        raise HTTPError(400, f"PRECONDITION_FAILED - user_id property set to '{uid}' but authenticated user "
                             f"was '{user.name}'")
    rec = build_record(ex.name, rk, props, payload)
    # routed as a publish is (counted; kept by persistent exchanges on its way)
    queues, rec, kept = route_and_keep(ex, rec)
    if queues:
        ex.publish_out_count += 1
    stored = [q.publish_record(rec) for q in queues]
    if not kept or not all(stored):
        raise HTTPError(507, "disk full: the message could not be stored")
    return web.json_response({"routed": bool(queues)})


async def get(request):
    require(request, MANAGEMENT)
    vhost = vhost_of(request)
    q = vhost.queues.get(request.match_info["queue"])
    if q is None:
        raise not_found()
    user = request["user"]
    if not user.can_read(vhost.name, q.name):
        raise HTTPError(403, f"read access to queue '{q.name}' refused for user '{user.name}'")
    vhost.check_exclusive(q, None, 60, 70)
    body = await body_json(request)
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise HTTPError(400, "count must be a positive integer")
    ackmode = typed(body, "ackmode", str, "ack_requeue_true")
    if ackmode not in ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false"):
        raise HTTPError(400, f"bad ackmode {ackmode!r}")
    encoding = typed(body, "encoding", str, "auto")
    if encoding not in ("auto", "base64"):
        raise HTTPError(400, "encoding must be auto or base64")
    truncate = typed(body, "truncate", int, None)
    if truncate is not None and truncate < 0:
        raise HTTPError(400, "truncate must be a non-negative integer")
    if q.closed:
        raise HTTPError(400, f"queue '{q.name}' is closed: {q.store.error}")
    if getattr(q, "is_stream", False):
        raise HTTPError(400, f"queue '{q.name}' is a stream: read it with POST "
                             f"/api/queues/{{vhost}}/{{queue}}/stream")
    out = []
    left = q.message_count
    for rec, redelivered in q.take_records(count, ackmode.endswith("true")):
        left -= 1
        out.append(_message(rec, redelivered, max(left, 0), encoding, truncate))
    return web.json_response(out)


def _message(rec, redelivered, message_count, encoding, truncate, offset=None):
    exchange, rk, props, payload = parse_record(rec)
    size = len(payload)
    if offset is not None:
        props.setdefault("headers", {})["x-stream-offset"] = offset
    if truncate is not None:
        payload = payload[:int(truncate)]
    try:
        text = payload.decode() if encoding == "auto" else None
        payload_out, enc = (text, "string") if text is not None else (None, None)
    except UnicodeDecodeError:
        payload_out, enc = None, None
    if payload_out is None:
        payload_out, enc = base64.b64encode(payload).decode(), "base64"
    return {"payload_bytes": size, "redelivered": redelivered, "exchange": exchange,
            "routing_key": rk, "message_count": message_count,
            "properties": _jsonable(props), "payload": payload_out, "payload_encoding": enc}


async def read_stream(request):
    """LavinMQ's POST /api/queues/{vhost}/{queue}/stream: up to count
    messages from offset (first, last, next, a number, an interval such as
    1h), without a consumer."""
    require(request, MANAGEMENT)
    vhost = vhost_of(request)
    q = vhost.queues.get(request.match_info["queue"])
    if q is None:
        raise not_found()
    user = request["user"]
    if not user.can_read(vhost.name, q.name):
        raise HTTPError(403, f"read access to queue '{q.name}' refused for user '{user.name}'")
    if not getattr(q, "is_stream", False):
        raise HTTPError(400, f"queue '{q.name}' is not a stream")
    if q.closed:
        raise HTTPError(400, f"queue '{q.name}' is closed: {q.store.error}")
    body = await body_json(request)
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0 or count > 100_000:
        raise HTTPError(400, "count must be an integer from 0 to 100000")
    offset = body.get("offset", "first")
    if isinstance(offset, str) and offset.lstrip("-").isdigit():
        offset = int(offset)
    encoding = body.get("encoding", "auto")
    if encoding not in ("auto", "base64"):
        raise HTTPError(400, "encoding must be auto or base64")
    try:
        records = q.read(offset, count)
    except AMQPError as exc:
        raise HTTPError(400, exc.reply_text)
    return web.json_response([_message(rec, False, q.message_count, encoding, body.get("truncate"), off)
                              for off, rec in records])


def _jsonable(value):
    from lavinmq.http.shapes import _jsonable as j
    return j(value)


def add_routes(app):
    app.router.add_post("/api/exchanges/{vhost}/{exchange}/publish", publish)
    app.router.add_post("/api/queues/{vhost}/{queue}/get", get)
    app.router.add_post("/api/queues/{vhost}/{queue}/stream", read_stream)

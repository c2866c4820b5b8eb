"""The OpenAPI 3.1 document of the management API, served at
/api/openapi.json. Schemas are JSON Schema (2020-12); tests validate real
responses against them, so the document stays true."""
import lavinmq

STR, INT, BOOL, OBJ = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "object"}
NUM = {"type": "number"}
NULLSTR = {"type": ["string", "null"]}
RATE = {"type": "object", "required": ["rate"], "properties": {"rate": NUM}}


def obj(required, **props):
    return {"type": "object", "required": list(required), "properties": props}


def ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


def array(item):
    return {"type": "array", "items": item}


SCHEMAS = {
    "Error": obj(["error", "reason"], error=STR, reason=STR),
    "MessageStats": {"type": "object", "additionalProperties": {"oneOf": [INT, RATE]}},
    "Overview": obj(["product_name", "product_version", "node", "uptime", "object_totals", "queue_totals",
                     "message_stats"],
                    product_name=STR, product_version=STR, node=STR, uptime=INT, management_version=STR,
                    object_totals=obj(["connections", "channels", "consumers", "queues", "exchanges", "bindings"],
                                      connections=INT, channels=INT, consumers=INT, queues=INT, exchanges=INT,
                                      bindings=INT),
                    queue_totals=obj(["messages", "messages_ready", "messages_unacknowledged"],
                                     messages=INT, messages_ready=INT, messages_unacknowledged=INT),
                    message_stats=ref("MessageStats"), listeners=array(OBJ)),
    "Node": obj(["name", "running", "uptime", "mem_used", "fd_used", "fd_total", "disk_free", "disk_free_alarm"],
                name=STR, running=BOOL, uptime=INT, mem_used=INT, fd_used=INT, fd_total=INT, disk_free=INT,
                disk_free_limit=INT, disk_free_alarm=BOOL),
    "WhoAmI": obj(["name", "tags"], name=STR, tags=array(STR)),
    "Vhost": obj(["name", "messages", "messages_ready", "messages_unacknowledged", "message_stats"],
                 name=STR, messages=INT, messages_ready=INT, messages_unacknowledged=INT,
                 message_stats=ref("MessageStats"), limits=OBJ, tracing=BOOL),
    "User": obj(["name", "password_hash", "hashing_algorithm", "tags"], name=STR, password_hash=STR,
                hashing_algorithm=STR, tags=array(STR), limits=OBJ),
    "Permission": obj(["user", "vhost", "configure", "write", "read"], user=STR, vhost=STR, configure=STR,
                      write=STR, read=STR),
    "Exchange": obj(["name", "vhost", "type", "durable", "auto_delete", "internal", "arguments", "message_stats"],
                    name=STR, vhost=STR, type=STR, durable=BOOL, auto_delete=BOOL, internal=BOOL, arguments=OBJ,
                    message_stats=ref("MessageStats"),
                    # a persistent exchange's kept messages (x-persist-messages / x-persist-ms)
                    persist=obj(["messages", "bytes", "first_offset", "last_offset", "max_messages", "max_ms"],
                                messages=INT, bytes=INT, first_offset={"type": ["integer", "null"]},
                                last_offset={"type": ["integer", "null"]}, max_messages={"type": ["integer", "null"]},
                                max_ms={"type": ["integer", "null"]})),
    "Queue": obj(["name", "vhost", "durable", "exclusive", "auto_delete", "arguments", "state", "consumers",
                  "messages", "messages_ready", "messages_unacknowledged", "message_stats"],
                 name=STR, vhost=STR, durable=BOOL, exclusive=BOOL, auto_delete=BOOL, arguments=OBJ,
                 state={"enum": ["running", "paused", "closed"]}, consumers=INT, messages=INT, messages_ready=INT,
                 messages_unacknowledged=INT, message_stats=ref("MessageStats"),
                 messages_details=RATE, consumer_details=array(ref("Consumer")), stream=ref("Stream")),
    "Stream": obj(["first_offset", "last_offset", "segments", "message_bytes", "consumer_offsets"],
                  first_offset=INT, last_offset=INT, first_timestamp={"type": ["integer", "null"]},
                  last_timestamp={"type": ["integer", "null"]}, segments=INT, message_bytes=INT,
                  consumer_offsets={"type": "object", "additionalProperties": INT}),
    "Binding": obj(["source", "vhost", "destination", "destination_type", "routing_key", "arguments",
                    "properties_key"],
                   source=STR, vhost=STR, destination=STR, destination_type={"enum": ["queue", "exchange"]},
                   routing_key=STR, arguments=OBJ, properties_key=STR),
    "Connection": obj(["name", "vhost", "user", "state", "channels", "peer_host", "peer_port", "client_properties",
                       "send_oct", "recv_oct"],
                      name=STR, vhost=NULLSTR, user=NULLSTR, state=STR, channels=INT, peer_host=STR,
                      peer_port=INT, client_properties=OBJ, send_oct=INT, recv_oct=INT, send_oct_details=RATE),
    "Channel": obj(["name", "number", "vhost", "user", "confirm", "transactional", "consumer_count",
                    "messages_unacknowledged", "message_stats"],
                   name=STR, number=INT, vhost=NULLSTR, user=NULLSTR, confirm=BOOL, transactional=BOOL,
                   consumer_count=INT, messages_unacknowledged=INT, message_stats=ref("MessageStats")),
    "Consumer": obj(["consumer_tag", "queue", "ack_required", "exclusive", "prefetch_count", "channel_details"],
                    consumer_tag=STR, queue=obj(["name", "vhost"], name=STR, vhost=STR), ack_required=BOOL,
                    exclusive=BOOL, prefetch_count=INT, arguments=OBJ, channel_details=OBJ,
                    stream=obj(["offset", "automatic_offset_tracking"], offset=INT,
                               last_delivered_offset={"type": ["integer", "null"]},
                               committed_offset={"type": ["integer", "null"]}, automatic_offset_tracking=BOOL)),
    "Policy": obj(["name", "vhost", "pattern", "definition", "apply-to", "priority"], name=STR, vhost=STR,
                  pattern=STR, definition=OBJ, priority=INT, **{"apply-to": {"enum": ["all", "queues",
                                                                                       "exchanges"]}}),
    "Definitions": obj(["exchanges", "queues", "bindings", "policies"], users=array(OBJ), vhosts=array(OBJ),
                       permissions=array(OBJ), exchanges=array(OBJ), queues=array(OBJ), bindings=array(OBJ),
                       policies=array(OBJ)),
    "Status": obj(["status"], status={"enum": ["ok", "failed"]}, reason=STR),
    "Parameter": obj(["name", "vhost", "component", "value"], name=STR, vhost=STR,
                     component={"enum": ["shovel", "federation-upstream", "federation-upstream-set"]},
                     value={"type": ["object", "array"]}),
    "Shovel": obj(["name", "vhost", "type", "state", "error", "message_count", "src_uri", "dest_uri"],
                  name=STR, vhost=STR, type={"enum": ["dynamic"]},
                  state={"enum": ["starting", "running", "paused", "error", "terminated"]}, error=NULLSTR,
                  message_count=INT, timestamp=STR, src_uri=STR, dest_uri=STR, ack_mode=STR),
    "FederationLink": obj(["upstream", "vhost", "type", "resource", "uri", "status", "error", "timestamp"],
                          upstream=STR, vhost=STR, type={"enum": ["exchange", "queue"]}, resource=STR, uri=STR,
                          status={"enum": ["starting", "running", "error", "terminated"]}, error=NULLSTR,
                          timestamp=STR, message_count=INT, **{"consumer-tag": STR}),
    "Unacked": obj(["delivery_tag", "consumer_tag", "unacked_for_seconds", "channel_name"],
                   delivery_tag=INT, consumer_tag=STR, unacked_for_seconds={"type": ["integer", "null"]},
                   channel_name=STR),
    "GlobalParameter": obj(["name", "value"], name=STR, value={}, component={"type": "null"},
                           vhost={"type": "null"}),
    "GcStats": obj(["gc_no"], gc_no=INT, generations=array(OBJ), tracked_objects=array(INT), rss_bytes=INT,
                   heap_size=INT, free_bytes=INT, in_use_bytes=INT),
    "Page": obj(["items", "page", "page_size", "page_count", "total_count", "filtered_count", "item_count"],
                items=array(OBJ), page=INT, page_size=INT, page_count=INT, total_count=INT, filtered_count=INT,
                item_count=INT),
}

LIST_PARAMS = [{"name": n, "in": "query", "required": False, "schema": s} for n, s in (
    ("page", INT), ("page_size", INT), ("name", STR), ("use_regex", BOOL), ("sort", STR),
    ("sort_reverse", BOOL), ("columns", STR))]


def _op(summary, schema=None, status="200", params=(), body=None, listing=False, created=False, media=None):
    responses = {"401": {"description": "not authenticated", "content": _json(ref("Error"))},
                 "403": {"description": "not allowed", "content": _json(ref("Error"))}}
    if created:
        responses["201"] = {"description": "created"}
        responses["204"] = {"description": "updated"}
        responses["400"] = {"description": "bad request", "content": _json(ref("Error"))}
    elif schema is None:
        responses["204"] = {"description": "done"}
        responses["404"] = {"description": "not found", "content": _json(ref("Error"))}
    else:
        s = {"oneOf": [array(schema), ref("Page")]} if listing else schema
        responses[status] = {"description": summary, "content": _json(s)}
        responses["404"] = {"description": "not found", "content": _json(ref("Error"))}
    op = {"summary": summary, "responses": responses}
    if listing or params:
        op["parameters"] = (LIST_PARAMS if listing else []) + list(params)
    if body:
        op["requestBody"] = {"required": True, "content": _json(body)}
    if media:       # a body that is not JSON (a form's file, an event stream)
        where, kind, schema_ = media
        if where == "request":
            op.setdefault("requestBody", {"required": True, "content": {}})["content"][kind] = {"schema": schema_}
        else:
            op["responses"][status] = {"description": summary, "content": {kind: {"schema": schema_}}}
    return op


def _json(schema):
    return {"application/json": {"schema": schema}}


def _path_params(path):
    import re
    return [{"name": n, "in": "path", "required": True, "schema": STR} for n in re.findall(r"{(\w+)}", path)]


PATHS = {
    "/api/overview": {"get": _op("broker totals and rates", ref("Overview"))},
    "/api/nodes": {"get": _op("this node", array(ref("Node")))},
    "/api/whoami": {"get": _op("the authenticated user", ref("WhoAmI"))},
    "/api/vhosts": {"get": _op("vhosts", ref("Vhost"), listing=True)},
    "/api/vhosts/{vhost}": {"get": _op("a vhost", ref("Vhost")), "put": _op("create a vhost", created=True),
                            "delete": _op("delete a vhost and its contents")},
    "/api/users": {"get": _op("users", ref("User"), listing=True)},
    "/api/users/{user}": {"get": _op("a user", ref("User")),
                          "put": _op("create or update a user", created=True, body=OBJ),
                          "delete": _op("delete a user")},
    "/api/permissions": {"get": _op("permissions", ref("Permission"), listing=True)},
    "/api/permissions/{vhost}/{user}": {"get": _op("a user's permissions in a vhost", ref("Permission")),
                                        "put": _op("set permissions", created=True, body=OBJ),
                                        "delete": _op("clear permissions")},
    "/api/exchanges": {"get": _op("exchanges", ref("Exchange"), listing=True)},
    "/api/exchanges/{vhost}": {"get": _op("exchanges in a vhost", ref("Exchange"), listing=True)},
    "/api/exchanges/{vhost}/{exchange}": {"get": _op("an exchange", ref("Exchange")),
                                          "put": _op("declare an exchange", created=True, body=OBJ),
                                          "delete": _op("delete an exchange")},
    "/api/queues": {"get": _op("queues", ref("Queue"), listing=True)},
    "/api/queues/{vhost}": {"get": _op("queues in a vhost", ref("Queue"), listing=True)},
    "/api/queues/{vhost}/{queue}": {"get": _op("a queue", ref("Queue")),
                                    "put": _op("declare a queue", created=True, body=OBJ),
                                    "delete": _op("delete a queue")},
    "/api/queues/{vhost}/{queue}/contents": {"delete": _op("purge a queue")},
    "/api/queues/{vhost}/{queue}/pause": {"put": _op("pause a queue: it delivers nothing until resumed (LavinMQ)")},
    "/api/queues/{vhost}/{queue}/resume": {"put": _op("resume a paused queue (LavinMQ)")},
    "/api/queues/{vhost}/{queue}/restart": {"put": _op("open a closed queue again from its files (LavinMQ); "
                                                       "400 if it is not closed or still unreadable")},
    "/api/queues/{vhost}/{queue}/stream": {"post": _op("read a stream from an offset (LavinMQ)", body=OBJ)},
    "/api/queues/{vhost}/{queue}/bindings": {"get": _op("a queue's bindings", ref("Binding"), listing=True)},
    "/api/bindings": {"get": _op("bindings", ref("Binding"), listing=True)},
    "/api/bindings/{vhost}": {"get": _op("bindings in a vhost", ref("Binding"), listing=True)},
    "/api/bindings/{vhost}/e/{source}/q/{destination}": {
        "get": _op("bindings between an exchange and a queue", ref("Binding"), listing=True),
        "post": _op("bind", created=True, body=OBJ)},
    "/api/bindings/{vhost}/e/{source}/q/{destination}/{props}": {
        "get": _op("a binding", ref("Binding")), "delete": _op("unbind")},
    "/api/policies": {"get": _op("policies", ref("Policy"), listing=True)},
    "/api/operator-policies": {"get": _op("operator policies", ref("Policy"), listing=True)},
    "/api/policies/{vhost}/{name}": {"get": _op("a policy", ref("Policy")),
                                     "put": _op("set a policy", created=True, body=OBJ),
                                     "delete": _op("clear a policy")},
    "/api/connections": {"get": _op("client connections", ref("Connection"), listing=True)},
    "/api/connections/{name}": {"get": _op("a connection", ref("Connection")),
                                "delete": _op("close a connection")},
    "/api/channels": {"get": _op("channels", ref("Channel"), listing=True)},
    "/api/consumers": {"get": _op("consumers", ref("Consumer"), listing=True)},
    "/api/consumers/{vhost}/{connection}/{channel}/{consumer_tag}": {
        "delete": _op("cancel a consumer; the client gets basic.cancel (LavinMQ)")},
    "/api/definitions": {"get": _op("export definitions", ref("Definitions")),
                         "post": _op("import definitions", body=OBJ)},
    "/api/aliveness-test/{vhost}": {"get": _op("the vhost answers", ref("Status"))},
    "/api/nodes/{node}": {"get": _op("a node", ref("Node"))},
    "/api/healthchecks/node/{node}": {"get": _op("the node answers", ref("Status"))},
    "/api/users/bulk-delete": {"post": _op("delete users", body=obj(["users"], users=array(STR)))},
    "/api/exchanges/{vhost}/{exchange}/publish": {"post": _op(
        "publish a message", obj(["routed"], routed=BOOL),
        body=obj(["routing_key", "payload", "payload_encoding"], routing_key=STR, payload=STR,
                 payload_encoding={"enum": ["string", "base64"]}, properties=OBJ))},
    "/api/queues/{vhost}/{queue}/get": {"post": _op(
        "take messages", array(OBJ),
        body=obj(["count", "ackmode", "encoding"], count=INT, truncate=INT,
                 ackmode={"enum": ["ack_requeue_true", "ack_requeue_false", "reject_requeue_true",
                                   "reject_requeue_false"]},
                 encoding={"enum": ["auto", "base64"]}))},
    "/api/vhost-limits/{vhost}/{name}": {"put": _op("set a vhost limit", body=obj(["value"], value=INT)),
                                         "delete": _op("clear a vhost limit")},
    "/api/definitions/{vhost}": {"get": _op("export a vhost's definitions", ref("Definitions")),
                                 "post": _op("import definitions into a vhost", body=OBJ)},
    "/api/health/checks/alarms": {"get": _op("no resource alarm", ref("Status"))},
    "/api/parameters": {"get": _op("runtime parameters (shovels, federation upstreams and sets)",
                                   ref("Parameter"), listing=True)},
    "/api/parameters/{component}/{vhost}/{name}": {
        "put": _op("set a parameter: define a shovel, an upstream or an upstream set", created=True,
                   body=obj(["value"], value={"type": ["object", "array"]})),
        "delete": _op("clear a parameter (a shovel stops, an upstream's links go)")},
    "/api/shovels": {"get": _op("shovels and their state", ref("Shovel"), listing=True)},
    "/api/shovels/{vhost}/{name}/pause": {"put": _op("pause a shovel, also across restarts (LavinMQ)")},
    "/api/shovels/{vhost}/{name}/resume": {"put": _op("resume a paused shovel (LavinMQ)")},
    "/api/shovels/{vhost}/{name}/restart": {"put": _op("reconnect a shovel now")},
    "/api/federation-links": {"get": _op("federation links and their status", ref("FederationLink"),
                                         listing=True)},
    # LavinMQ's routes
    "/api/queues/{vhost}/{queue}/unacked": {"get": _op(
        "the queue's messages delivered and not acked yet (LavinMQ)", ref("Unacked"), listing=True)},
    "/api/channels/{channel}": {
        "get": _op("a channel, with its consumers", ref("Channel")),
        "put": _op("set the channel's consumer prefetch, for its consumers too (LavinMQ)",
                   body=obj([], prefetch={"type": "integer", "minimum": 0, "maximum": 65535}))},
    "/api/connections/username/{user}": {
        "get": _op("a user's connections (LavinMQ)", ref("Connection"), listing=True),
        "delete": _op("close every connection of a user; X-Reason header (LavinMQ)")},
    "/api/global-parameters": {"get": _op("global parameters", ref("GlobalParameter"), listing=True)},
    "/api/global-parameters/{parameter}": {
        "get": _op("a global parameter", ref("GlobalParameter")),
        "put": _op("set a global parameter", created=True, body=obj(["value"], value={})),
        "delete": _op("clear a global parameter")},
    "/api/auth/hash_password": {"put": _op(
        "a password's rabbit_password_hashing_sha256 hash; nothing is stored (LavinMQ)",
        obj(["password_hash"], password_hash=STR), body=obj(["password"], password=STR))},
    "/api/users/without-permissions": {"get": _op("users with permissions in no vhost (LavinMQ)", ref("User"),
                                                  listing=True)},
    "/api/definitions/upload": {"post": _op(
        "import definitions from a form's file part (or JSON); a same-site Referer is redirected back (LavinMQ)",
        media=("request", "multipart/form-data", obj(["file"], file={"type": "string", "format": "binary"})))},
    "/api/definitions/{vhost}/upload": {"post": _op(
        "import a vhost's definitions from a form's file part (or JSON) (LavinMQ)",
        media=("request", "multipart/form-data", obj(["file"], file={"type": "string", "format": "binary"})))},
    "/api/livelog": {"get": _op(
        "the log as server-sent events: id (ms) and data [severity, source, message]; the kept lines "
        "first, then each new one; Last-Event-Id skips those seen (LavinMQ)",
        media=("response", "text/event-stream", STR))},
    "/api/nodes/gc_stats": {"get": _op("the garbage collector's and the heap's figures (LavinMQ)",
                                       ref("GcStats"))},
    "/api/nodes/gc_collect": {"post": _op("a full garbage collection, the freed heap given back (LavinMQ)")},
    "/api/nodes/{node}/gc_collect": {"post": _op("the same, on this node by name (LavinMQ)")},
}
for _path, _ops in PATHS.items():
    for _op_ in _ops.values():
        params = _path_params(_path)
        if params:
            _op_["parameters"] = params + _op_.get("parameters", [])

DOCUMENT = {
    "openapi": "3.1.0",
    "info": {"title": "lavinmq management API", "version": lavinmq.__version__,
             "description": "RabbitMQ-compatible management API of lavinmq for Python."},
    "components": {"schemas": SCHEMAS,
                   "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}},
    "security": [{"basic": []}],
    "paths": PATHS,
}

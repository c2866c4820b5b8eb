"""The routes of LavinMQ's HTTP controllers that the API lacked, over real
HTTP against a real broker: unacked messages, a channel's prefetch,
cancelling a consumer, a user's connections, global parameters,
hash_password, users without permissions, the definitions upload, the
live log, the collector's routes, and /docs from the OpenAPI document."""
import json
import re
import time
import urllib.parse
import urllib.request
import uuid

import pika

from lavinmq.auth.password import verify
from tests.conftest import unique
from tests.parity.helpers import api


def enc(s):
    return urllib.parse.quote(s, safe="")


def conn_name(broker, conn):
    port = conn._impl._transport._sock.getsockname()[1]
    return [c["name"] for c in api(broker, "GET", "/api/connections")[1] if c["peer_port"] == port][0]


def test_unacked_prefetch_and_consumer_cancel(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    for i in range(8):
        ch.basic_publish("", q, b"%d" % i)
    getter = conn.channel()
    method, _, _ = getter.basic_get(q)                      # one held by basic.get
    ch.basic_qos(prefetch_count=2)
    got, cancelled = [], []
    tag = ch.basic_consume(q, lambda c, m, p, b: got.append(m.delivery_tag), consumer_tag="slow-one")
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    conn.process_data_events(0.3)
    assert len(got) == 2
    name = conn_name(broker, conn)
    status, unacked = api(broker, "GET", f"/api/queues/%2F/{q}/unacked")
    assert status == 200
    assert sorted((u["consumer_tag"], u["channel_name"]) for u in unacked) == sorted(
        [("Basic get", f"{name} (2)"), ("slow-one", f"{name} (1)"), ("slow-one", f"{name} (1)")])
    assert all(isinstance(u["unacked_for_seconds"], int) and 0 <= u["unacked_for_seconds"] < 5 for u in unacked)
    assert api(broker, "GET", f"/api/queues/%2F/{q}/unacked?page=1&page_size=1")[1]["total_count"] == 3
    # the channel's prefetch from the API: its consumer takes it at once (LavinMQ)
    channel = enc(f"{name} (1)")
    assert api(broker, "PUT", f"/api/channels/{channel}", {"prefetch": 70000})[0] == 400
    assert api(broker, "PUT", f"/api/channels/{channel}", {"prefetch": 5})[0] == 204
    conn.process_data_events(0.3)
    assert len(got) == 5
    assert api(broker, "GET", f"/api/channels/{channel}")[1]["consumer_details"][0]["prefetch_count"] == 5
    # cancel the consumer: the client hears basic.cancel
    path = f"/api/consumers/%2F/{enc(name)}/1/{tag}"
    assert api(broker, "DELETE", path)[0] == 204
    conn.process_data_events(0.3)
    assert cancelled == [tag]
    assert api(broker, "DELETE", path)[0] == 404
    assert api(broker, "GET", f"/api/queues/%2F/{q}")[1]["consumers"] == 0
    getter.basic_ack(method.delivery_tag)
    conn.close()


def test_connections_by_username(broker):
    user = unique("u")
    assert api(broker, "PUT", f"/api/users/{user}", {"password": "pw", "tags": "management"})[0] == 201
    assert api(broker, "PUT", f"/api/permissions/%2F/{user}", {"configure": ".*", "write": ".*", "read": ".*"})[0] \
        in (201, 204)
    url = f"amqp://{user}:pw@{broker.host}:{broker.port}/%2F"
    conns = [pika.BlockingConnection(pika.URLParameters(url)) for _ in range(2)]
    try:
        status, listed = api(broker, "GET", f"/api/connections/username/{user}")
        assert status == 200 and len(listed) == 2 and {c["user"] for c in listed} == {user}
        # the user itself may close its own, not others'
        assert api(broker, "DELETE", "/api/connections/username/guest", user=user, password="pw")[0] == 403
        assert api(broker, "DELETE", f"/api/connections/username/{user}",
                   headers={"X-Reason": "rotating credentials"})[0] == 204
        for c in conns:
            try:
                c.process_data_events(1)
                raise AssertionError("still open")
            except pika.exceptions.ConnectionClosedByBroker as exc:
                assert exc.reply_code == 320 and "rotating credentials" in exc.reply_text
        assert api(broker, "GET", f"/api/connections/username/{user}")[1] == []
    finally:
        api(broker, "DELETE", f"/api/users/{user}")


def test_global_parameters_hash_password_and_users_without_permissions(broker):
    name = unique("gp")
    assert api(broker, "PUT", f"/api/global-parameters/{name}", {"nope": 1})[0] == 400
    assert api(broker, "PUT", f"/api/global-parameters/{name}", {"value": {"a": [1, 2]}})[0] == 201
    assert api(broker, "PUT", f"/api/global-parameters/{name}", {"value": "b"})[0] == 204
    assert api(broker, "GET", f"/api/global-parameters/{name}")[1] == {"name": name, "value": "b",
                                                                       "component": None, "vhost": None}
    assert any(p["name"] == name for p in api(broker, "GET", "/api/global-parameters")[1])
    assert {"name": name, "value": "b"} in api(broker, "GET", "/api/definitions")[1]["global_parameters"]
    assert api(broker, "DELETE", f"/api/global-parameters/{name}")[0] == 204
    assert api(broker, "GET", f"/api/global-parameters/{name}")[0] == 404
    # hash_password
    status, body = api(broker, "PUT", "/api/auth/hash_password", {"password": "s3cret"})
    assert status == 200 and verify("s3cret", body["password_hash"])
    assert api(broker, "PUT", "/api/auth/hash_password", {})[0] == 400
    # users without permissions
    lonely = unique("lonely")
    assert api(broker, "PUT", f"/api/users/{lonely}", {"password": "x", "tags": ""})[0] == 201
    names = [u["name"] for u in api(broker, "GET", "/api/users/without-permissions")[1]]
    assert lonely in names and "guest" not in names
    api(broker, "PUT", f"/api/permissions/%2F/{lonely}", {"configure": "", "write": "", "read": ".*"})
    assert lonely not in [u["name"] for u in api(broker, "GET", "/api/users/without-permissions")[1]]
    api(broker, "DELETE", f"/api/users/{lonely}")


def multipart(field, filename, data):
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\n"
            f"Content-Type: application/json\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def test_definitions_upload(broker):
    q1, q2, v = unique("up"), unique("up"), unique("upv")
    body, ctype = multipart("file", "defs.json", json.dumps(
        {"queues": [{"name": q1, "vhost": "/", "durable": True, "arguments": {"x-max-length": 3}}]}).encode())
    assert api(broker, "POST", "/api/definitions/upload", raw=body, headers={"Content-Type": ctype})[0] == 204
    assert api(broker, "GET", f"/api/queues/%2F/{q1}")[1]["arguments"] == {"x-max-length": 3}
    # JSON too; into one vhost
    api(broker, "PUT", f"/api/vhosts/{v}")
    assert api(broker, "POST", f"/api/definitions/{v}/upload",
               {"queues": [{"name": q2, "durable": True, "arguments": {}}]})[0] == 204
    assert api(broker, "GET", f"/api/queues/{v}/{q2}")[0] == 200
    # a form into vhost / (%2F) and one into a vhost with other escaped characters: the
    # form check used to read the path after %2F became / and answered 415
    q3, v2 = unique("up"), unique("up v/é")
    api(broker, "PUT", f"/api/vhosts/{enc(v2)}")
    for vhost in ("/", v2):
        body, ctype = multipart("file", "defs.json", json.dumps(
            {"queues": [{"name": q3, "durable": True, "arguments": {}}]}).encode())
        status, reply = api(broker, "POST", f"/api/definitions/{enc(vhost)}/upload", raw=body,
                            headers={"Content-Type": ctype})
        assert status == 204, (vhost, reply)
        assert api(broker, "GET", f"/api/queues/{enc(vhost)}/{q3}")[0] == 200
    api(broker, "DELETE", f"/api/queues/%2F/{q3}")
    api(broker, "DELETE", f"/api/vhosts/{enc(v2)}")
    # a form of ours is sent back to its page; one from another site is refused
    body, ctype = multipart("file", "defs.json", b'{"queues": []}')
    req = urllib.request.Request(broker.http_url + "/api/definitions/upload", data=body, method="POST", headers={
        "Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q=", "Content-Type": ctype, "Referer": broker.http_url + "/"})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **kw):
            return None
    try:
        urllib.request.build_opener(NoRedirect).open(req, timeout=10)
        raise AssertionError("no redirect")
    except urllib.error.HTTPError as e:
        assert e.code == 302 and e.headers["Location"] == broker.http_url + "/"
    status, _ = api(broker, "POST", "/api/definitions/upload", raw=body,
                    headers={"Content-Type": ctype, "Referer": "https://evil.example/page"})
    assert status == 403
    assert api(broker, "POST", "/api/definitions/upload", raw=b"x", headers={"Content-Type": "text/plain"})[0] == 415
    bad, ctype = multipart("file", "defs.json", b"{not json")
    assert api(broker, "POST", "/api/definitions/upload", raw=bad, headers={"Content-Type": ctype})[0] == 400
    api(broker, "DELETE", f"/api/queues/%2F/{q1}")
    api(broker, "DELETE", f"/api/vhosts/{v}")


def read_events(resp, want, timeout=10):
    """Server-sent events (id, data) until want(events) or timeout."""
    events, buf, deadline = [], b"", time.monotonic() + timeout
    while not want(events) and time.monotonic() < deadline:
        line = resp.readline()
        if not line:
            break
        buf += line
        if line == b"\n":
            fields = dict(x.split(": ", 1) for x in buf.decode().strip().split("\n") if not x.startswith(":"))
            if "data" in fields:
                events.append((int(fields["id"]), json.loads(fields["data"])))
            buf = b""
    return events


def test_livelog_streams_the_log(broker):
    req = urllib.request.Request(broker.http_url + "/api/livelog", headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        # a new line reaches the open stream: a vhost's creation is logged
        v = unique("live")
        api(broker, "PUT", f"/api/vhosts/{v}")
        c = pika.BlockingConnection(pika.URLParameters(broker.url))
        c.close()
        events = read_events(resp, lambda ev: any("opened by user guest" in e[1][2] for e in ev))
        assert any("opened by user guest" in e[1][2] for e in events)
        sev, source, _ = events[-1][1]
        assert sev in ("info", "debug", "warn", "error", "notice") and source.startswith("lavinmq")
        last = events[-1][0]
    # Last-Event-Id: only what is newer
    req.add_header("Last-Event-Id", str(last))
    c = pika.BlockingConnection(pika.URLParameters(broker.url))
    c.close()
    with urllib.request.urlopen(req, timeout=10) as resp:
        newer = read_events(resp, lambda ev: any("opened by user guest" in e[1][2] for e in ev))
        assert newer and all(i > last for i, _ in newer)
    api(broker, "DELETE", f"/api/vhosts/{v}")
    # administrators only
    assert api(broker, "PUT", "/api/users/mon-" + v, {"password": "pw", "tags": "monitoring"})[0] == 201
    assert api(broker, "GET", "/api/livelog", user="mon-" + v, password="pw")[0] == 403
    api(broker, "DELETE", "/api/users/mon-" + v)


def test_gc_routes_and_docs(broker):
    status, stats = api(broker, "GET", "/api/nodes/gc_stats")
    assert status == 200 and stats["gc_no"] >= 0 and stats["rss_bytes"] > 0
    assert api(broker, "POST", "/api/nodes/gc_collect")[0] == 204
    assert api(broker, "GET", "/api/nodes/gc_stats")[1]["gc_no"] > stats["gc_no"]
    node = api(broker, "GET", "/api/nodes")[1][0]["name"]
    assert api(broker, "POST", f"/api/nodes/{enc(node)}/gc_collect")[0] == 204
    assert api(broker, "POST", "/api/nodes/other@node/gc_collect")[0] == 404
    # /docs: the API reference from the OpenAPI document, without a login (as LavinMQ's)
    with urllib.request.urlopen(broker.http_url + "/docs", timeout=10) as r:
        page = r.read().decode()
        assert r.headers["Content-Type"].startswith("text/html")
    with urllib.request.urlopen(broker.http_url + "/docs/openapi.json", timeout=10) as r:
        doc = json.load(r)
    for path, ops in doc["paths"].items():
        for method in ops:
            assert f"<code>{method.upper()} {path}</code>" in page, (method, path)
    assert "/api/queues/{vhost}/{queue}/unacked" in doc["paths"] and "<script" not in page
    # LavinMQ's URL (its UI links there) answered 404; its links lead to the same files
    for url in ("/docs/", "/docs/index.html", "/docs"):
        with urllib.request.urlopen(broker.http_url + url, timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/html")
            here = r.read().decode()
        assert here.replace('"../', '"') == page, url
        for link in re.findall(r'(?:href)="([^"#]+)"', here):
            target = urllib.parse.urljoin(broker.http_url + url, link)
            with urllib.request.urlopen(target, timeout=10) as r:
                assert r.status == 200, (url, link)

"""Issue 14 item 9: a page on another site, in a browser that holds the
API's Basic credentials, cannot change anything: what a form or a no-cors
fetch can send is refused. Before, a text/plain POST of JSON was imported."""
import json

from tests.security.conftest import call


def test_form_and_text_bodies_are_refused(make_broker):
    b = make_broker()
    defs = json.dumps({"vhosts": [{"name": "csrf"}], "users": [{"name": "evil", "password": "x",
                                                                 "tags": "administrator"}]}).encode()
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, body = call(b, "POST", "/api/definitions", raw=defs, content_type=ctype)
        assert status == 415 and body["error"] == "unsupported_media_type", (ctype, status, body)
        status, _ = call(b, "PUT", "/api/users/evil", raw=b'{"password":"x","tags":"administrator"}',
                         content_type=ctype)
        assert status == 415
    assert call(b, "GET", "/api/users/evil")[0] == 404
    assert call(b, "GET", "/api/vhosts/csrf")[0] == 404


def test_foreign_origin_is_refused(make_broker):
    b = make_broker()
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{b.http_port + 1}"):
        status, body = call(b, "PUT", "/api/vhosts/csrf", {}, headers={"Origin": origin})
        assert status == 403 and "cross-origin" in body["reason"], (origin, status, body)
        assert call(b, "DELETE", "/api/vhosts/%2F", headers={"Origin": origin})[0] == 403
    assert call(b, "DELETE", "/api/vhosts/%2F", headers={"Sec-Fetch-Site": "cross-site"})[0] == 403
    assert call(b, "GET", "/api/vhosts/%2F")[0] == 200
    # the same origin (a UI served by the broker) and tools that send no Origin work
    same = f"http://127.0.0.1:{b.http_port}"
    assert call(b, "PUT", "/api/vhosts/csrf", {}, headers={"Origin": same, "Sec-Fetch-Site": "same-origin"})[0] == 201
    assert call(b, "DELETE", "/api/vhosts/csrf")[0] == 204
    # reading is not changing: a GET with a foreign Origin is answered (no CORS headers: the page can't read it)
    status, _ = call(b, "GET", "/api/overview", headers={"Origin": "http://evil.example"})
    assert status == 200

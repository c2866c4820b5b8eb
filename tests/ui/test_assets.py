"""The UI's files and headers, without a browser: everything ships inside
the package (no URL to fetch at run time), no inline script or style (the
CSP forbids them), security headers on every answer, no caching of API
answers, and the HTML never builds markup from strings."""
import os
import re
import urllib.request

import pytest

from lavinmq.http.controller import ui as ui_module
from tests.conftest import ROOT
from tests.ui.conftest import api

STATIC = ui_module.STATIC


def static_files():
    for d, _, files in os.walk(STATIC):
        for f in files:
            yield os.path.join(d, f)


def get(broker, path):
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as r:
        return r.status, dict(r.headers), r.read()


def test_assets_ship_in_the_package_and_fetch_nothing_from_outside():
    files = list(static_files())
    names = {os.path.relpath(f, STATIC) for f in files}
    assert {"index.html", "app.css", "favicon.svg", "js/main.js", "js/chart.js"} <= names
    for path in files:
        text = open(path, encoding="utf-8").read()
        # the only URL allowed is SVG's namespace name, which is never fetched
        urls = set(re.findall(r"https?://[^\s'\"<>)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, (path, urls)
        if path.endswith(".js"):
            assert "innerHTML" not in text and "eval(" not in text and "new Function" not in text, path
            assert "insertAdjacentHTML" not in text and "document.write" not in text, path


def test_package_data_and_the_frozen_build_include_the_assets():
    pyproject = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert re.search(r'"lavinmq\.http"\s*=\s*\[[^\]]*"static/\*\*/\*"', pyproject), "package-data for the UI"
    spec = open(os.path.join(ROOT, "packaging", "pyinstaller.spec")).read()
    assert "lavinmq/http/static" in spec


def test_no_inline_script_or_style():
    html = open(os.path.join(STATIC, "index.html")).read()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag, tag
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html), "inline script"
    assert "<style" not in html and "style=" not in html and not re.search(r"<[^>]+\son\w+\s*=", html)
    for path in static_files():
        if path.endswith(".js"):
            text = open(path).read()
            assert "setAttribute('style'" not in text and ".style." not in text, path


def test_security_headers_and_caching(ui_broker):
    status, headers, body = get(ui_broker, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b'src="static/js/main.js"' in body
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp
    assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
    status, headers, body = get(ui_broker, "/static/js/main.js")
    assert status == 200 and "javascript" in headers["Content-Type"] and headers["Cache-Control"] == "no-cache"
    assert headers["X-Frame-Options"] == "DENY"
    # API answers, good and bad, are never cached
    req = urllib.request.Request(ui_broker.http_url + "/api/overview",
                                 headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Cache-Control"] == "no-store" and r.headers["X-Frame-Options"] == "DENY"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(ui_broker.http_url + "/api/overview", timeout=10)
    assert info.value.code == 401 and info.value.headers["Cache-Control"] == "no-store"
    # files outside static/ are not served
    for path in ("/static/../ui.py", "/static/%2e%2e/ui.py", "/static/../../config.py"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(ui_broker.http_url + path, timeout=10)
        assert info.value.code in (403, 404), path


def test_user_list_for_the_ui_carries_no_password_hashes(ui_broker):
    status, users = api(ui_broker, "GET", "/api/users?columns=name,tags")
    assert status == 200 and users and all(set(u) <= {"name", "tags"} for u in users)


def test_operator_policies_api(ui_broker):
    assert api(ui_broker, "PUT", "/api/operator-policies/%2F/cap",
               {"pattern": ".*", "definition": {"max-length": 1000}, "apply-to": "queues"})[0] == 201
    assert api(ui_broker, "PUT", "/api/operator-policies/%2F/cap",
               {"pattern": ".*", "definition": {"max-length": 2000}, "apply-to": "queues"})[0] == 204
    status, body = api(ui_broker, "PUT", "/api/operator-policies/%2F/bad",
                       {"pattern": ".*", "definition": {"alternate-exchange": "x"}})
    assert status == 400 and "alternate-exchange" in body["reason"]
    _, listed = api(ui_broker, "GET", "/api/operator-policies")
    assert [p for p in listed if p["name"] == "cap"][0]["definition"] == {"max-length": 2000}
    assert api(ui_broker, "DELETE", "/api/operator-policies/%2F/cap")[0] == 204
    assert api(ui_broker, "GET", "/api/operator-policies/%2F/cap")[0] == 404


def test_log_api(ui_broker):
    status, text = api(ui_broker, "GET", "/api/logs")
    assert status == 200 and "started" in text
    status, records = api(ui_broker, "GET", "/api/logs?after=0")
    assert status == 200 and records and {"seq", "timestamp", "level", "logger", "message"} <= set(records[0])
    last = records[-1]["seq"]
    assert api(ui_broker, "GET", f"/api/logs?after={last}")[1] == []
    assert api(ui_broker, "GET", "/api/logs?after=x")[0] == 400


def test_tags_only_update_keeps_the_password(ui_broker):
    assert api(ui_broker, "PUT", "/api/users/tagged", {"password": "pw", "tags": "management"})[0] == 201
    assert api(ui_broker, "PUT", "/api/users/tagged", {"tags": "monitoring"})[0] == 204
    status, me = api(ui_broker, "GET", "/api/whoami", user="tagged", password="pw")
    assert status == 200 and me["tags"] == ["monitoring"]
    assert api(ui_broker, "PUT", "/api/users/nobody-yet", {"tags": "management"})[0] == 400
    api(ui_broker, "DELETE", "/api/users/tagged")

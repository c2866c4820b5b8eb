"""Issue 41 row 10: a JSON body nested 100,000 deep made the API's parser
raise RecursionError: 500 and a traceback, on every route that takes a
body. Now 400, and bodies are held to MAX_JSON_DEPTH levels (a value
stored some hundreds deep would have failed every listing that shows it)."""
import pytest

from lavinmq.http.helpers import MAX_JSON_DEPTH
from tests.security.conftest import call

DEEP = 100_000
ROUTES = [
    ("POST", "/api/exchanges/%2F/amq.default/publish", "{}"),
    ("PUT", "/api/queues/%2F/deep", '{"arguments": {"x": {}}}'),
    ("PUT", "/api/exchanges/%2F/deep", '{"type": "direct", "arguments": {"x": {}}}'),
    ("POST", "/api/definitions", '{"queues": {}}'),
    ("PUT", "/api/policies/%2F/deep", '{"pattern": ".*", "definition": {"x": {}}}'),
    ("PUT", "/api/users/deep", '{"tags": {}}'),
    ("PUT", "/api/vhosts/deep", '{"description": {}}'),
]


def _nest(template, levels):
    """The template's innermost {} replaced by `levels` nested arrays."""
    return template.replace("{}", "[" * levels + "]" * levels, 1) if "{}" in template[1:] else \
        "[" * levels + "]" * levels


@pytest.mark.parametrize("method,path,template", ROUTES)
def test_a_deeply_nested_body_is_a_bad_request(make_broker, method, path, template):
    b = make_broker()
    for levels in (DEEP, MAX_JSON_DEPTH + 1):
        status, body = call(b, method, path, raw=_nest(template, levels).encode())
        assert status == 400, (levels, status, body)
        assert "Malformed JSON" in body["reason"] or "nested" in body["reason"], body
    # and the broker goes on answering (the fixture checks its log for tracebacks)
    assert call(b, "GET", "/api/overview")[0] == 200

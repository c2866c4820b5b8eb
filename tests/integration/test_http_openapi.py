"""The served OpenAPI document is true: every GET route it lists answers
with a body its schema accepts, and errors match the Error schema."""
import re

import jsonschema
import pika
import pytest

from tests.conftest import unique
from tests.integration.test_http_api import call


@pytest.fixture
def doc(broker):
    if broker.external:
        pytest.skip("needs our broker's HTTP port")
    status, body = call(broker, "GET", "/api/openapi.json")
    assert status == 200
    return body


def validate(doc, schema, instance):
    root = {"$ref": "#/$defs/target", "$defs": {"target": schema}, "components": doc["components"]}
    jsonschema.Draft202012Validator(root).validate(instance)


def test_document_shape(doc):
    assert doc["openapi"].startswith("3.1") and doc["info"]["title"]
    jsonschema.Draft202012Validator.check_schema({"$defs": doc["components"]["schemas"]})
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["responses"], (path, method)
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == set(re.findall(r"{(\w+)}", path)), path


def test_every_get_route_matches_its_schema(broker, doc):
    q, x = unique("q"), unique("x")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(x, "direct", arguments={"x-persist-messages": 10})     # its shape has "persist"
    ch.queue_declare(q)
    ch.queue_bind(q, x, "rk")
    ch.basic_consume(q, lambda *a: None)
    assert call(broker, "PUT", "/api/policies/%2F/" + q, {"pattern": "^" + q, "definition": {"max-length": 5}})[0] == 201
    _, conns = call(broker, "GET", "/api/connections")
    values = {"vhost": "%2F", "queue": q, "exchange": x, "source": x, "destination": q, "props": "rk",
              "user": "guest", "name": None, "node": "lavinmq@localhost"}
    checked = 0
    for path, ops in doc["paths"].items():
        if "get" not in ops:
            continue
        url = path
        for param in re.findall(r"{(\w+)}", path):
            value = values[param]
            if param == "name":
                value = q if "policies" in path else __import__("urllib.parse").parse.quote(conns[0]["name"], safe="")
            url = url.replace("{" + param + "}", value)
        status, body = call(broker, "GET", url)
        assert status == 200, (url, body)
        validate(doc, ops["get"]["responses"]["200"]["content"]["application/json"]["schema"], body)
        checked += 1
        if ops["get"].get("parameters") and any(p["name"] == "page" for p in ops["get"]["parameters"]):
            status, page = call(broker, "GET", url + "?page=1&page_size=2")
            validate(doc, ops["get"]["responses"]["200"]["content"]["application/json"]["schema"], page)
    assert checked >= 25
    # an error body
    status, body = call(broker, "GET", "/api/queues/%2F/" + unique("missing"))
    assert status == 404
    validate(doc, {"$ref": "#/components/schemas/Error"}, body)
    call(broker, "DELETE", "/api/policies/%2F/" + q)
    conn.close()

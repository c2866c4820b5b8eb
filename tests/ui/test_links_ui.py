"""The Shovels and Federation pages in a real browser: a shovel made with
the form moves messages, shows its state, pauses, resumes and is deleted;
an upstream made with the form gets a link once a policy asks, shown with
its status, and is deleted with its button."""
import pika

from tests.conftest import unique
from tests.ui.conftest import api


def wait_text(ui, selector, text):
    ui.page.locator(selector, has_text=text).first.wait_for()


def depth(broker, queue):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


def test_shovel_page(ui, ui_broker):
    name, src, dest = unique("ui-shovel"), unique("ui-src"), unique("ui-dest")
    assert api(ui_broker, "PUT", f"/api/queues/%2F/{src}", {"durable": True})[0] == 201
    ui.login()
    ui.go("#/shovels", "#add-shovel")
    ui.page.fill("#add-shovel input[name=name]", name)
    ui.page.fill("#add-shovel input[name=src-endpoint]", src)
    ui.page.fill("#add-shovel input[name=dest-uri]", "amqp://")
    ui.page.fill("#add-shovel input[name=dest-endpoint]", dest)
    ui.page.fill("#add-shovel input[name=reconnect-delay]", "1")
    ui.page.click("#add-shovel button[type=submit]")
    wait_text(ui, ".toast", "saved")
    status, value = api(ui_broker, "GET", f"/api/parameters/shovel/%2F/{name}")
    assert status == 200 and value["value"] == {
        "src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://", "dest-queue": dest,
        "src-prefetch-count": 1000, "src-delete-after": "never", "ack-mode": "on-confirm", "reconnect-delay": 1}
    row = ui.page.locator("#shovels-table tr", has_text=name)
    row.locator(".badge", has_text="running").wait_for()
    conn = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    conn.channel().basic_publish("", src, b"through the shovel")
    conn.close()
    for _ in range(100):
        if depth(ui_broker, dest) == 1:
            break
        ui.page.wait_for_timeout(50)
    assert depth(ui_broker, dest) == 1
    row.locator("td", has_text="1").first.wait_for()     # moved: 1
    ui.shot("shovels")
    row.locator("button.pause-shovel").click()
    row.locator(".badge", has_text="paused").wait_for()
    assert api(ui_broker, "GET", f"/api/shovels/%2F/{name}")[1]["state"] == "paused"
    row.locator("button.resume-shovel").click()
    row.locator(".badge", has_text="running").wait_for()
    row.locator("button.delete-shovel").click()
    wait_text(ui, ".toast", "deleted")
    assert api(ui_broker, "GET", f"/api/parameters/shovel/%2F/{name}")[0] == 404
    ui.page.locator("#shovels-table tr", has_text=name).wait_for(state="detached")


def test_shovel_error_is_shown(ui, ui_broker):
    name = unique("ui-shovel")
    assert api(ui_broker, "PUT", f"/api/parameters/shovel/%2F/{name}", {"value": {
        "src-uri": "amqp://", "src-queue": unique("q"), "dest-uri": "amqp://guest:guest@127.0.0.1:1",
        "dest-queue": "q", "reconnect-delay": 30}})[0] == 201
    ui.login()
    ui.go("#/shovels", "#shovels-table")
    row = ui.page.locator("#shovels-table tr", has_text=name)
    row.locator(".badge", has_text="error").wait_for()
    assert "connection refused" in row.inner_text()
    api(ui_broker, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_federation_page(ui, ui_broker):
    prefix = unique("ui-fed")
    upstream_vhost = unique("ui-up")
    assert api(ui_broker, "PUT", f"/api/vhosts/{upstream_vhost}")[0] == 201
    assert api(ui_broker, "PUT", f"/api/permissions/{upstream_vhost}/guest",
               {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)
    ui.login()
    ui.go("#/federation", "#add-upstream")
    ui.page.fill("#add-upstream input[name=name]", prefix)
    ui.page.fill("#add-upstream input[name=uri]",
                 ui_broker.url.rsplit("/", 1)[0] + "/" + upstream_vhost)
    ui.page.fill("#add-upstream input[name=max-hops]", "2")
    ui.page.click("#add-upstream button[type=submit]")
    wait_text(ui, ".toast", "saved")
    wait_text(ui, "#upstreams-table td", prefix)
    value = api(ui_broker, "GET", f"/api/parameters/federation-upstream/%2F/{prefix}")[1]["value"]
    assert value["max-hops"] == 2 and value["prefetch-count"] == 1000 and value["ack-mode"] == "on-confirm"
    assert "guest:guest" not in ui.page.inner_text("#upstreams-table")
    assert api(ui_broker, "PUT", f"/api/policies/%2F/{prefix}", {
        "pattern": f"^{prefix}", "apply-to": "exchanges", "definition": {"federation-upstream": prefix}})[0] == 201
    assert api(ui_broker, "PUT", f"/api/exchanges/%2F/{prefix}.x", {"type": "fanout", "durable": True})[0] == 201
    link = ui.page.locator("#links-table tr", has_text=f"{prefix}.x")
    link.locator(".badge", has_text="running").wait_for()
    ui.shot("federation")
    ui.page.locator("#upstreams-table tr", has_text=prefix).locator("button.delete-upstream").click()
    wait_text(ui, ".toast", "deleted")
    link.wait_for(state="detached")
    assert api(ui_broker, "GET", "/api/federation-links")[1] == []
    api(ui_broker, "DELETE", f"/api/policies/%2F/{prefix}")
    api(ui_broker, "DELETE", f"/api/exchanges/%2F/{prefix}.x")
    api(ui_broker, "DELETE", f"/api/vhosts/{upstream_vhost}")

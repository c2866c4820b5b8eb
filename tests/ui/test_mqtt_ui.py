"""MQTT clients in the UI, as LavinMQ shows them: the connections list
with the protocol and the client id, the connection page with keepalive,
clean session and a link to the session's queue. The client comes over
WebSocket on the UI's own HTTP port (the UI broker has no MQTT port)."""
import queue
import urllib.parse

import pytest

from tests.conftest import unique
from tests.ui.conftest import api

paho = pytest.importorskip("paho.mqtt.client")
from paho.mqtt.enums import CallbackAPIVersion  # noqa: E402


def test_mqtt_connection_and_session_pages(ui, ui_broker):
    cid = unique("sensor")
    c = paho.Client(CallbackAPIVersion.VERSION2, client_id=cid, clean_session=False, transport="websockets")
    c.ws_set_options(path="/mqtt")
    c.username_pw_set("guest", "guest")
    acked = queue.Queue()
    c.on_connect = lambda *a: acked.put(a[3])
    c.on_subscribe = lambda *a: acked.put(a[3])
    c.connect("127.0.0.1", ui_broker.http_port, keepalive=42)
    c.loop_start()
    try:
        assert not acked.get(timeout=10).is_failure
        c.subscribe("greenhouse/+/temp", 1)
        acked.get(timeout=10)
        name = [x["name"] for x in api(ui_broker, "GET", "/api/connections")[1] if x.get("client_id") == cid][0]
        ui.login()
        ui.go("#/connections", "#connections-table tbody tr")
        row = ui.page.locator("#connections-table tbody tr", has_text=cid)
        row.wait_for()
        assert "MQTT 3.1.1 (WebSocket)" in row.inner_text()
        ui.shot("mqtt-connections")
        ui.go(f"#/connection/{urllib.parse.quote(name, safe='')}", "#connection-details dl")
        details = ui.page.inner_text("#connection-details")
        for text in (cid, "Keepalive", "42 s", "Clean session", f"mqtt.{cid}", "MQTT 3.1.1 over WebSocket"):
            assert text in details, (text, details)
        ui.page.locator("#connection-details a", has_text=f"mqtt.{cid}").click()
        ui.page.wait_for_selector("#queue-bindings td")
        ui.page.locator("#queue-bindings td", has_text="greenhouse.*.temp").first.wait_for()
        ui.shot("mqtt-session-queue")
    finally:
        c.disconnect()
        c.loop_stop()
    assert api(ui_broker, "DELETE", f"/api/queues/%2F/mqtt.{cid}")[0] == 204

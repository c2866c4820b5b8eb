"""What a newcomer trips over in the UI (issue 31 item 6): a stream queue's
size and offsets and reading it by offset, every exchange type the broker
takes in the add-exchange form, and connections' client-provided names."""
import urllib.parse

import pika

from tests.conftest import unique
from tests.ui.conftest import api


def q(s):
    return urllib.parse.quote(s, safe="")


def stat_value(ui, box, label):
    return ui.page.locator(f'{box} .stat[data-label="{label}"] .value').inner_text()


def test_stream_queue_shows_size_offsets_and_reads_by_offset(ui, ui_broker):
    name = unique("ui-first-stream")
    conn = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for i in range(25):
            ch.basic_publish("", name, f"event {i}".encode())
    finally:
        conn.close()
    stream = api(ui_broker, "GET", f"/api/queues/%2F/{q(name)}")[1]["stream"]
    assert stream["message_bytes"] > 0 and stream["last_offset"] - stream["first_offset"] == 24

    ui.login()
    ui.go(f"#/queue/%2F/{q(name)}", '#queue-stats .stat[data-label="First offset"]')
    # the size of what the stream holds, not "Ready bytes 0 B"
    assert ui.page.locator('#queue-stats .stat[data-label="Ready bytes"]').count() == 0
    size = stat_value(ui, "#queue-stats", "Size")
    assert size != "0 B" and size != "–", size
    assert stat_value(ui, "#queue-stats", "First offset") == f"{stream['first_offset']:,}"
    assert stat_value(ui, "#queue-stats", "Last offset") == f"{stream['last_offset']:,}"

    # reading by offset, not basic.get (which a stream refuses)
    ui.page.click("#get-box summary")
    assert ui.page.inner_text("#get-box summary") == "Read messages"
    assert not ui.page.locator("#get-messages").is_visible()
    ui.page.fill("#read-stream input[name=offset]", str(stream["first_offset"] + 20))
    ui.page.fill("#read-stream input[name=count]", "3")
    ui.page.click("#read-stream button[type=submit]")
    ui.page.wait_for_selector("#got-messages pre.payload")
    assert ui.page.locator("#got-messages pre.payload").all_inner_texts() == ["event 20", "event 21", "event 22"]
    assert f"{stream['first_offset'] + 20}" in ui.page.inner_text("#got-messages .message")
    ui.shot("stream-read-by-offset")
    # nothing was taken from it
    after = api(ui_broker, "GET", f"/api/queues/%2F/{q(name)}")[1]
    assert after["stream"]["first_offset"] == stream["first_offset"] and after["messages"] == 25
    api(ui_broker, "DELETE", f"/api/queues/%2F/{q(name)}")


def test_a_classic_queue_keeps_get_messages(ui, ui_broker):
    name = unique("ui-first-classic")
    assert api(ui_broker, "PUT", f"/api/queues/%2F/{q(name)}", {"durable": False})[0] == 201
    ui.login()
    ui.go(f"#/queue/%2F/{q(name)}", '#queue-stats .stat[data-label="Ready bytes"]')
    assert ui.page.locator('#queue-stats .stat[data-label="First offset"]').count() == 0
    ui.page.click("#get-box summary")
    assert ui.page.inner_text("#get-box summary") == "Get messages"
    assert ui.page.locator("#get-messages").is_visible() and not ui.page.locator("#read-stream").is_visible()
    api(ui_broker, "DELETE", f"/api/queues/%2F/{q(name)}")


def test_every_exchange_type_in_the_add_exchange_form(ui, ui_broker):
    listed = [t["name"] for t in api(ui_broker, "GET", "/api/overview")[1]["exchange_types"]]
    assert {"direct", "fanout", "topic", "headers", "x-consistent-hash", "x-delayed-message"} <= set(listed)
    ui.login()
    ui.go("#/exchanges", "#exchanges-table tbody tr")
    ui.page.click("details.card summary:has-text('Add an exchange')")
    offered = ui.page.locator("#add-exchange > select[name=type] option").evaluate_all("os => os.map(o => o.value)")
    assert offered == listed
    # a consistent-hash exchange and a delayed one, made with the form
    for kind in ("x-consistent-hash", "x-delayed-message"):
        name = unique(f"ui-{kind}")
        ui.page.fill("#add-exchange input[name=name]", name)
        ui.page.select_option("#add-exchange > select[name=type]", kind)
        if kind == "x-delayed-message":
            # choosing it offers the argument it needs
            key = ui.page.locator("#add-exchange .args-editor .k").first
            assert key.input_value() == "x-delayed-type"
            ui.page.locator("#add-exchange .args-editor .v").first.fill("topic")
        ui.page.click("#add-exchange button[type=submit]")
        ui.page.locator(".toast", has_text=f"Exchange {name} added.").first.wait_for()
        status, ex = api(ui_broker, "GET", f"/api/exchanges/%2F/{q(name)}")
        assert status == 200, ex
        if kind == "x-delayed-message":     # kept as LavinMQ keeps it: its routing type, delaying
            assert ex["type"] == "topic" and ex["arguments"].get("x-delayed-exchange") is True, ex
        else:
            assert ex["type"] == kind, ex
        api(ui_broker, "DELETE", f"/api/exchanges/%2F/{q(name)}")


def test_connection_names_in_the_list_and_on_the_page(ui, ui_broker):
    provided = unique("orders-service")
    params = pika.URLParameters(ui_broker.url)
    params.client_properties = {"connection_name": provided}
    named = pika.BlockingConnection(params)
    anonymous = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        conns = api(ui_broker, "GET", "/api/connections")[1]
        ours = [c for c in conns if c.get("user_provided_name") == provided]
        assert len(ours) == 1
        ui.login()
        ui.go("#/connections", "#connections-table tbody tr")
        row = ui.page.locator("#connections-table tbody tr", has_text=provided)
        row.wait_for()
        assert row.locator("td.provided-name").inner_text() == provided
        # a connection without one shows a dash, not "undefined"
        port = anonymous._impl._transport._sock.getsockname()[1]
        other = [c["name"] for c in conns if c["peer_port"] == port][0]
        assert ui.page.locator("#connections-table tbody tr", has_text=other).locator(
            "td.provided-name").inner_text() == "–"
        row.locator("a").first.click()
        ui.page.wait_for_selector("#connection-details dl")
        assert ui.page.inner_text("#connection-subtitle") == f'connection "{provided}"'
        assert provided in ui.page.inner_text("#connection-details")
        ui.shot("connection-provided-name")
    finally:
        named.close()
        anonymous.close()

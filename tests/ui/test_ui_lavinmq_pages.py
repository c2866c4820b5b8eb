"""The UI pages LavinMQ has that the first UI lacked: a stream's own page
(offsets, bytes, consumers' offsets, reading by offset, cancelling a
consumer), the node page and a queue's unacked messages."""
import urllib.parse

import pika

from tests.conftest import unique
from tests.ui.conftest import api


def q(s):
    return urllib.parse.quote(s, safe="")


def stat_value(ui, box, label):
    return ui.page.locator(f'{box} .stat[data-label="{label}"] .value').inner_text()


def test_stream_page_offsets_reader_and_cancel(ui, ui_broker):
    name = unique("ui-stream")
    conn = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for i in range(1, 6):
            ch.basic_publish("", name, f"event {i}".encode())
        reader = conn.channel()
        reader.basic_qos(prefetch_count=2)
        tag = reader.basic_consume(name, lambda *a: None, consumer_tag="ui-reader",
                                   arguments={"x-stream-offset": 3})
        conn.process_data_events(0.3)
        total_bytes = api(ui_broker, "GET", f"/api/queues/%2F/{name}")[1]["stream"]["message_bytes"]

        ui.login()
        # the list links a stream to its own page, as LavinMQ's
        ui.go("#/queues", "#queues-table tbody tr")
        ui.page.fill("#queues-table input.filter", name)
        ui.page.locator("#queues-table td a", has_text=name).click()
        ui.page.wait_for_selector("#stream-stats .stat")
        assert "#/stream/" in ui.page.url
        assert stat_value(ui, "#stream-stats", "First offset") == "1"
        assert stat_value(ui, "#stream-stats", "Last offset") == "5"
        assert stat_value(ui, "#stream-stats", "Messages") == "5"
        assert stat_value(ui, "#stream-stats", "Bytes") == f"{total_bytes} B"
        row = ui.page.locator("#stream-consumers tbody tr", has_text=tag)
        row.wait_for()
        assert row.locator("td").nth(3).inner_text() in ("5", "6")   # its cursor: past the 2 it was given
        ui.shot("stream")
        # read two messages from offset 2 without a consumer
        ui.page.fill("#read-stream input[name=offset]", "2")
        ui.page.fill("#read-stream input[name=count]", "2")
        ui.page.click("#read-stream button[type=submit]")
        ui.page.wait_for_selector("#stream-messages .message")
        assert ui.page.locator("#stream-messages .message h2").all_inner_texts() == ["Offset 2", "Offset 3"]
        assert ui.page.locator("#stream-messages pre.payload").all_inner_texts() == ["event 2", "event 3"]
        # a queue page link to a stream lands on the stream page too
        ui.go(f"#/queue/%2F/{q(name)}", "#stream-stats .stat")
        # cancel the consumer from the page (DELETE /api/consumers/...)
        ui.page.click("#stream-consumers button.cancel-consumer")
        ui.page.locator(".toast", has_text="Consumer cancelled.").wait_for()
        conn.process_data_events(0.3)
        assert tag not in reader._impl._consumers
        assert api(ui_broker, "GET", f"/api/queues/%2F/{name}")[1]["consumers"] == 0
    finally:
        conn.close()
        api(ui_broker, "DELETE", f"/api/queues/%2F/{name}")


def test_nodes_unacked_and_docs_pages(ui, ui_broker):
    name = unique("ui-unacked")
    conn = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        ch = conn.channel()
        ch.queue_declare(name)
        for i in range(3):
            ch.basic_publish("", name, b"%d" % i)
        ch.basic_qos(prefetch_count=2)
        ch.basic_consume(name, lambda *a: None, consumer_tag="holder")
        conn.process_data_events(0.3)
        ui.login()
        # the queue page's unacked count leads to LavinMQ's unacked page
        ui.go(f"#/queue/%2F/{q(name)}", "#queue-stats .stat")
        ui.page.click("#unacked-link")
        ui.page.wait_for_selector("#unacked-table tbody tr")
        rows = ui.page.locator("#unacked-table tbody tr")
        rows.nth(1).wait_for()
        assert rows.count() == 2 and all("holder" in t for t in rows.all_inner_texts())
        ui.shot("unacked")
        # the nodes page, with a garbage collection
        ui.go("#/nodes", "#node-stats .stat")
        assert stat_value(ui, "#node-stats", "Processors").isdigit()
        assert "Version" in ui.page.inner_text("#node-details")
        before = ui.page.inner_text("#node-gc")
        ui.page.click("#gc-collect")
        ui.page.locator(".toast", has_text="Garbage collected.").wait_for()
        ui.page.wait_for_function("b => document.querySelector('#node-gc').innerText !== b", arg=before)
        ui.shot("nodes")
        # /docs, LavinMQ's API reference page
        ui.page.goto(ui_broker.http_url + "/docs")
        ui.page.wait_for_selector("section.api-op")
        assert ui.page.locator("section.api-op").count() > 60
        ui.shot("docs")
    finally:
        conn.close()
        api(ui_broker, "DELETE", f"/api/queues/%2F/{name}")
